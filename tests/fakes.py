"""Small recording stand-ins for the edges a test does not exercise (never for the thing under test)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from adapters.cosmos.deferral_store import DeferralLog
from adapters.cosmos.errors import StoreUnavailable
from adapters.cosmos.order_store import CreateOutcome, OrderStore
from adapters.cosmos.state_store import StateStore
from adapters.servicebus.deferred import DeferredReceiver
from adapters.servicebus.sender import OutgoingMessage, QueueNotFound
from domain.circuit import DependencyHealth
from domain.deferral import DeferralDocument
from domain.records import StateRecord
from domain.states import ProcessState

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
    def from_sent(cls, sent: OutgoingMessage) -> FakeReceivedMessage:
        """A message the app sent (to ``orders``: a copy, submission/store_outage.py), as its trigger receives it."""
        body = sent.body if isinstance(sent.body, bytes) else sent.body.encode("utf-8")
        return cls(body=body, message_id=sent.message_id, application_properties=dict(sent.application_properties))

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

    @property
    def attempts(self) -> list[tuple[str, str | None, Any, Any]]:
        """Each start as (orchestrator, instance id, its input's ``orderId``, its ``attempt``): the
        scheduler's input also carries the attempt's plan (``plans``)."""
        return [(name, instance, given.get("orderId"), given.get("attempt")) for name, instance, given in self.started]

    @property
    def plans(self) -> list[Any]:
        """The plan each start handed its orchestration (None: an input without one)."""
        return [given.get("plan") for _, _, given in self.started]


class _ReceiverWithNothingDeferred:
    def receive_deferred(self, sequence_numbers: Sequence[int]) -> list[Any]:
        return []

    def peek(self, max_count: int, from_sequence_number: int = 0) -> list[Any]:
        return []

    def _settle(self, message: Any) -> None:
        raise AssertionError("no message was received from a queue with nothing deferred")

    complete = abandon = defer = _settle

    def dead_letter(self, message: Any, reason: str, description: str) -> None:
        self._settle(message)


class QueuesWithNothingDeferred:
    """A ``DeferredMessageStore`` whose queues hold no deferred message: a peek or a fetch finds nothing.
    For contexts whose messages are not on a broker (a recording sender); tests about deferral use the
    local broker's store."""

    def open(self, queue: str) -> AbstractContextManager[DeferredReceiver]:
        return nullcontext(_ReceiverWithNothingDeferred())


class HealthStoreWithoutMemory:
    """A ``HealthStore`` that keeps nothing: every dependency reads as never seen, so no circuit ever opens
    and every call is made (contexts of tests about something other than dependency health)."""

    def get(self, dependency: str) -> DependencyHealth | None:
        return None

    def save(self, doc: DependencyHealth) -> DependencyHealth:
        return doc

    def count_waiting(self, reason: str) -> int:
        return 0


class DeferralLogReadTooEarly:
    """The deferral log as a submission sees it when it looked before a notification for its order was
    recorded (the race the look-again and the peek sweep cover): every read finds no document; writes go
    to the real log."""

    def __init__(self, log: DeferralLog) -> None:
        self._log = log

    def get(self, order_id: str) -> DeferralDocument | None:
        return None

    def save(self, doc: DeferralDocument) -> DeferralDocument:
        return self._log.save(doc)


class DeferralLogThatFails:
    """The deferral log (the order's deferral document in the ``state`` container) answering every read and write
    with a 429 past the SDK's retries while ``failing`` is set; the real log otherwise."""

    def __init__(self, log: DeferralLog) -> None:
        self._log = log
        self.failing = True

    def get(self, order_id: str) -> DeferralDocument | None:
        if self.failing:
            raise StoreUnavailable(f"deferral log: 429 on read of {order_id}")
        return self._log.get(order_id)

    def save(self, doc: DeferralDocument) -> DeferralDocument:
        if self.failing:
            raise StoreUnavailable(f"deferral log: 429 on save of {doc.order_id}")
        return self._log.save(doc)


class OrderStoreThatFailsOnRead:
    """The order database (a dependency of applying a payment notification, not the state store)
    answering every read with a 503 while ``failing`` is set; writes, and reads while it is not failing,
    go to the real store."""

    def __init__(self, store: OrderStore) -> None:
        self._store = store
        self.failing = False

    def get(self, order_id: str) -> dict[str, Any] | None:
        if self.failing:
            raise StoreUnavailable(f"orders container: 503 on read of {order_id}")
        return self._store.get(order_id)

    def create_or_verify(self, order: dict[str, Any]) -> CreateOutcome:
        return self._store.create_or_verify(order)


class StateStoreThatFails:
    """The state store failing with ``StoreUnavailable`` (a 503, a reset connection) on the operations named
    in ``failing`` (e.g. ``"create"``, ``"get"``); every other call, and these once removed from ``failing``,
    go to the real store."""

    def __init__(self, store: StateStore, *failing: str) -> None:
        self._store = store
        self.failing = set(failing)

    def __getattr__(self, name: str) -> Any:
        member = getattr(self._store, name)
        if name not in self.failing:
            return member

        def fail(*args: Any, **kwargs: Any) -> Any:
            raise StoreUnavailable(f"state store: 503 on {name}")

        return fail


class StateStoreCountingScans:
    """The state store, recording each per-state count (the cross-partition scan behind the caps)."""

    def __init__(self, store: StateStore) -> None:
        self._store = store
        self.counted: list[ProcessState] = []

    def count(self, state: ProcessState) -> int:
        self.counted.append(state)
        return self._store.count(state)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class StateStoreWithAConcurrentWriter:
    """The state store, where another writer's change lands between our read and our next replace, once:
    ``change(current)`` is that writer's version of the current record (None: it does not write yet)."""

    def __init__(self, store: StateStore, change: Callable[[StateRecord], StateRecord | None]) -> None:
        self._store = store
        self._change = change
        self.raced = False

    def replace(self, record: StateRecord) -> StateRecord:
        if not self.raced:
            current = self._store.get(record.order_id)
            theirs = self._change(current) if current is not None else None
            if theirs is not None:
                self.raced = True
                self._store.replace(theirs)
        return self._store.replace(record)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class StateStoreReadFromALaggingReplica:
    """The state store as another instance reads it (Session consistency: another client's session): its
    next ``reads`` point reads are served by a replica that has not caught up, answering ``older`` (None: a
    404); it remembers nothing of the record (``recent`` None: another process)."""

    def __init__(self, store: StateStore, older: StateRecord | None, reads: int = 1) -> None:
        self._store = store
        self._older = older
        self._reads = reads

    def get(self, order_id: str) -> StateRecord | None:
        if self._reads > 0:
            self._reads -= 1
            return self._older
        return self._store.get(order_id)

    def recent(self, order_id: str) -> StateRecord | None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class OrderStoreReadFromALaggingReplica:
    """The order database as another instance reads it: its next ``reads`` reads of an order just created elsewhere
    answer 404 (a replica without the create: Session consistency holds read-your-writes within one client only)."""

    def __init__(self, store: OrderStore, reads: int = 1) -> None:
        self._store = store
        self._reads = reads

    def get(self, order_id: str) -> dict[str, Any] | None:
        if self._reads > 0:
            self._reads -= 1
            return None
        return self._store.get(order_id)

    def create_or_verify(self, order: dict[str, Any]) -> CreateOutcome:
        return self._store.create_or_verify(order)


def sdk_value_body_message(sequence_number: int, value: Any, reason: str | None = None) -> Any:
    """An ``azure.servicebus.ServiceBusReceivedMessage`` whose body is an AMQP value section, not data (another AMQP
    client can send one), decoded by the SDK from its AMQP bytes; ``reason``: its ``DeadLetterReason``."""
    from azure.servicebus import ServiceBusReceivedMessage
    from azure.servicebus._pyamqp._encode import encode_payload
    from azure.servicebus._pyamqp.message import Header, Message
    from azure.servicebus._pyamqp.utils import amqp_long_value

    message = Message(
        value=value,
        header=Header(delivery_count=1),
        message_annotations={b"x-opt-sequence-number": amqp_long_value(sequence_number)},
        application_properties={b"DeadLetterReason": reason.encode()} if reason is not None else None,
    )
    return ServiceBusReceivedMessage.from_bytes(bytes(encode_payload(bytearray(), message)))


class SlowStore:
    """The real store ``real``, whose calls take ``seconds`` each on ``sleep`` (a Cosmos DB slow to answer): the first
    ``calls`` of them, or every one (None)."""

    def __init__(self, real: Any, sleep: Callable[[float], None], seconds: float, calls: int | None = None) -> None:
        self._real, self._sleep, self._seconds, self._calls = real, sleep, seconds, calls

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._real, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._calls is None or self._calls > 0:
                self._calls = None if self._calls is None else self._calls - 1
                self._sleep(self._seconds)
            return attribute(*args, **kwargs)

        return call
