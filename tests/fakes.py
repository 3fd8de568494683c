"""Small recording stand-ins for the edges a test does not exercise (never for the thing under test)."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from adapters.servicebus.sender import OutgoingMessage, QueueNotFound

_sequence = itertools.count(1)


class RecordingSender:
    """A ``MessageSender`` that records what was sent, per queue. ``missing`` queues raise
    ``QueueNotFound`` as Service Bus does for an entity that does not exist."""

    def __init__(self, missing: set[str] | None = None) -> None:
        self.sent: list[tuple[str, OutgoingMessage]] = []
        self.missing = missing or set()

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue in self.missing:
            raise QueueNotFound(f"queue {queue!r} not found")
        self.sent.append((queue, message))

    def bodies(self, queue: str) -> list[dict[str, Any]]:
        return [json.loads(m.body) for q, m in self.sent if q == queue]

    def message_ids(self, queue: str) -> list[str]:
        return [m.message_id for q, m in self.sent if q == queue]


@dataclass
class FakeReceivedMessage:
    """The members of ``azure.servicebus.ServiceBusReceivedMessage`` the app reads."""

    body: bytes
    message_id: str | None = None
    sequence_number: int = field(default_factory=lambda: next(_sequence))
    delivery_count: int = 1
    enqueued_time_utc: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    application_properties: dict[str, Any] = field(default_factory=dict)
    lock_token: str = "lock"

    @classmethod
    def of(cls, payload: Any, message_id: str | None = None) -> FakeReceivedMessage:
        raw = payload if isinstance(payload, bytes) else (payload if isinstance(payload, str) else json.dumps(payload))
        body = raw if isinstance(raw, bytes) else raw.encode("utf-8")
        return cls(body=body, message_id=message_id)


@dataclass
class RecordingActions:
    """Settlement calls as ``ServiceBusMessageActions`` receives them."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def complete(self, message: Any) -> None:
        self.calls.append(("complete", {}))

    def abandon(self, message: Any) -> None:
        self.calls.append(("abandon", {}))

    def deadletter(
        self, message: Any, deadletter_reason: str | None = None, deadletter_error_description: str | None = None
    ) -> None:
        self.calls.append(("deadletter", {"reason": deadletter_reason, "description": deadletter_error_description}))

    def defer(self, message: Any) -> None:
        self.calls.append(("defer", {}))

    @property
    def only(self) -> tuple[str, dict[str, Any]]:
        assert len(self.calls) == 1, f"expected exactly one settlement, got {self.calls}"
        return self.calls[0]


class RecordingClient:
    """A durable client that records ``start_new`` calls; ``fail_start`` makes it raise."""

    def __init__(self, fail_start: bool = False) -> None:
        self.started: list[tuple[str, str | None, Any]] = []
        self.fail_start = fail_start

    async def start_new(
        self, orchestration_function_name: str, instance_id: str | None = None, client_input: Any | None = None
    ) -> str:
        if self.fail_start:
            raise Exception("Durable host unavailable")
        self.started.append((orchestration_function_name, instance_id, client_input))
        return instance_id or ""
