"""What the app needs of a triggered message and of its settlement actions.

In Azure these are ``azurefunctions.extensions.bindings.servicebus.ServiceBusReceivedMessage`` (an
``azure.servicebus.ServiceBusReceivedMessage``) and ``ServiceBusMessageActions``; the local runner
passes its broker's objects, which have the same members."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol


class ReceivedMessage(Protocol):
    @property
    def message_id(self) -> str | None: ...

    @property
    def sequence_number(self) -> int | None: ...

    @property
    def delivery_count(self) -> int | None: ...

    @property
    def enqueued_time_utc(self) -> datetime | None: ...

    @property
    def application_properties(self) -> Mapping[Any, Any] | None: ...

    @property
    def body(self) -> Any: ...


class MessageActions(Protocol):
    def complete(self, message: Any) -> None: ...

    def abandon(self, message: Any) -> None: ...

    def deadletter(
        self, message: Any, deadletter_reason: str | None = None, deadletter_error_description: str | None = None
    ) -> None: ...

    def defer(self, message: Any) -> None: ...


def body_bytes(message: ReceivedMessage) -> bytes:
    """The body as bytes, whatever shape the SDK gives it (bytes, or a generator of sections)."""
    body = message.body
    if isinstance(body, bytes | bytearray):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8")
    chunks: list[bytes] = []
    for part in body:
        chunks.append(bytes(part) if isinstance(part, bytes | bytearray) else str(part).encode("utf-8"))
    return b"".join(chunks)
