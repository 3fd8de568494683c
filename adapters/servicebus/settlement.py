"""What the app needs of a triggered message and of its settlement actions.

In Azure these are ``azurefunctions.extensions.bindings.servicebus.ServiceBusReceivedMessage`` (an
``azure.servicebus.ServiceBusReceivedMessage``) and ``ServiceBusMessageActions``; the local runner
passes its broker's objects, which have the same members."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from contracts.parsing import InvalidMessage, named_order_id
from domain.ids import MAX_MESSAGE_ID_LENGTH, bounded
from domain.text import carriable, one_line


class ReceivedMessage(Protocol):
    @property
    def message_id(self) -> object:
        """Not always text: read it with ``message_id_text``."""
        ...

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
    """The body as bytes, whatever shape it comes in: the SDK's ``ServiceBusReceivedMessage.body`` is a
    generator of data sections (one, for a message sent by a Service Bus SDK); the local runner's and
    the tests' messages hold bytes. A body that is not AMQP data (a value or sequence body, which
    another AMQP client can send) can never be our UTF-8 JSON: ``InvalidMessage`` ``NotJson``, so the
    trigger dead-letters it with that reason instead of failing on every delivery."""
    kind = getattr(message, "body_type", None)
    if kind is not None and str(getattr(kind, "value", kind)).lower() != "data":
        raise InvalidMessage("NotJson", f"body is an AMQP {getattr(kind, 'value', kind)} section, not data bytes")
    body = message.body
    if body is None:
        return b""
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8")
    try:
        parts = iter(body)
    except TypeError:
        raise InvalidMessage("NotJson", f"body is a {type(body).__name__}, not bytes") from None
    chunks: list[bytes] = []
    for part in parts:
        if not isinstance(part, bytes | bytearray | memoryview):
            raise InvalidMessage("NotJson", f"body section is a {type(part).__name__}, not bytes")
        chunks.append(bytes(part))
    return b"".join(chunks)


def message_id_text(message: ReceivedMessage) -> str | None:
    """The MessageId of a received (or peeked, or fetched) message as the app reads it: text, or None when it has none.

    AMQP lets a sender give ``message-id`` as a uuid, a ulong or binary as well as a string (another AMQP client, or
    the Python SDK's ``ServiceBusMessage(message_id=12345)``); Service Bus passes it on, and the SDK's
    ``ServiceBusReceivedMessage.message_id`` answers a ``uuid.UUID``, an ``int``, or ``bytes`` for binary that is not
    UTF-8. Read as it came, such an id failed the trigger on every delivery or was written into a document no read
    could map again (tests/deferral/test_redteam62_amqp_message_ids.py). Here a uuid is its canonical text, a ulong
    its digits, binary its UTF-8 text or else its hex digits, on one line with control characters made spaces
    (``carriable``, ``one_line``: the id goes into log lines), ``bounded`` to ``MAX_MESSAGE_ID_LENGTH`` characters.
    The same for every delivery of one message."""
    value = message.message_id
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.hex()
    else:
        text = str(value)
    return bounded(one_line(carriable(text)), MAX_MESSAGE_ID_LENGTH)


def named_order(message: ReceivedMessage) -> str | None:
    """The order ``message``'s body names (``named_order_id``); None for a body that is not AMQP data (a value or
    sequence section: ``body_bytes`` refuses it), as for one that does not parse."""
    try:
        return named_order_id(body_bytes(message))
    except InvalidMessage:
        return None


@dataclass(frozen=True)
class Settlement:
    """What to do with a triggered message, decided by plain code and applied by the thin trigger."""

    kind: Literal["complete", "abandon", "deadletter", "defer"]
    reason: str | None = None
    description: str | None = None

    @classmethod
    def complete(cls) -> Settlement:
        return cls("complete")

    @classmethod
    def abandon(cls, why: str) -> Settlement:
        return cls("abandon", description=why)

    @classmethod
    def deadletter(cls, reason: str, description: str) -> Settlement:
        reason, description = dead_letter_text(reason, description)
        return cls("deadletter", reason=reason, description=description)

    @classmethod
    def defer(cls) -> Settlement:
        return cls("defer")


def dead_letter_text(reason: str, description: str) -> tuple[str, str]:
    """A dead-letter reason and description Service Bus can carry: they often quote the message (a field
    name, a value), which may hold a lone surrogate no UTF-8 encoder takes (then the settlement itself
    fails, on every delivery, and the message ends ``MaxDeliveryCountExceeded`` without its reason) or
    control characters that forge lines in a console. The description is cut to 1,024 characters."""
    return carriable(reason), carriable(description)[:1024]


def apply_settlement(actions: MessageActions, message: Any, settlement: Settlement) -> None:
    if settlement.kind == "complete":
        actions.complete(message)
    elif settlement.kind == "abandon":
        actions.abandon(message)
    elif settlement.kind == "deadletter":
        actions.deadletter(
            message, deadletter_reason=settlement.reason, deadletter_error_description=settlement.description
        )
    else:
        actions.defer(message)
