"""The message objects the broker hands out: what a trigger, a deferred receiver or a peek sees, and
what the dead-letter queue holds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import IntEnum

from adapters.servicebus.sender import PropertyValue


class MessageState(IntEnum):
    """Same names and values as ``azure.servicebus.ServiceBusMessageState``."""

    ACTIVE = 0
    DEFERRED = 1
    SCHEDULED = 2


class BrokerMessage:
    """A received (or peeked) message with the members of ``azure.servicebus.ServiceBusReceivedMessage``
    that the app reads. A snapshot taken when it was handed out, except ``locked_until_utc``, which a
    lock renewal updates. ``delivery_count`` follows the service's count: 1 on the first delivery,
    + 1 after each abandon or lock expiry (0 in a peek before any delivery)."""

    def __init__(
        self,
        *,
        body: bytes,
        message_id: str,
        sequence_number: int,
        enqueued_time_utc: datetime,
        delivery_count: int,
        state: MessageState,
        subject: str | None = None,
        correlation_id: str | None = None,
        content_type: str | None = None,
        application_properties: Mapping[str, PropertyValue] | None = None,
        scheduled_enqueue_time_utc: datetime | None = None,
        expires_at_utc: datetime | None = None,
        time_to_live: timedelta | None = None,
        lock_token: str | None = None,
        locked_until_utc: datetime | None = None,
        dead_letter_reason: str | None = None,
        dead_letter_error_description: str | None = None,
    ) -> None:
        self._body = body
        self._message_id = message_id
        self._sequence_number = sequence_number
        self._enqueued_time_utc = enqueued_time_utc
        self._delivery_count = delivery_count
        self._state = state
        self._subject = subject
        self._correlation_id = correlation_id
        self._content_type = content_type
        self._application_properties = dict(application_properties or {})
        self._scheduled_enqueue_time_utc = scheduled_enqueue_time_utc
        self._expires_at_utc = expires_at_utc
        self._time_to_live = time_to_live
        self._lock_token = lock_token
        self._locked_until_utc = locked_until_utc
        self._dead_letter_reason = dead_letter_reason
        self._dead_letter_error_description = dead_letter_error_description

    @property
    def body(self) -> bytes:
        return self._body

    @property
    def message_id(self) -> str:
        return self._message_id

    @property
    def sequence_number(self) -> int:
        return self._sequence_number

    @property
    def enqueued_time_utc(self) -> datetime:
        return self._enqueued_time_utc

    @property
    def delivery_count(self) -> int:
        return self._delivery_count

    @property
    def state(self) -> MessageState:
        return self._state

    @property
    def subject(self) -> str | None:
        return self._subject

    @property
    def correlation_id(self) -> str | None:
        return self._correlation_id

    @property
    def content_type(self) -> str | None:
        return self._content_type

    @property
    def application_properties(self) -> dict[str, PropertyValue]:
        return dict(self._application_properties)

    @property
    def scheduled_enqueue_time_utc(self) -> datetime | None:
        return self._scheduled_enqueue_time_utc

    @property
    def expires_at_utc(self) -> datetime | None:
        return self._expires_at_utc

    @property
    def time_to_live(self) -> timedelta | None:
        return self._time_to_live

    @property
    def lock_token(self) -> str | None:
        """None for a peeked message (it holds no lock)."""
        return self._lock_token

    @property
    def locked_until_utc(self) -> datetime | None:
        return self._locked_until_utc

    @property
    def dead_letter_reason(self) -> str | None:
        return self._dead_letter_reason

    @property
    def dead_letter_error_description(self) -> str | None:
        return self._dead_letter_error_description

    def _renewed(self, locked_until: datetime) -> None:
        """Called by the broker when this message's lock is renewed."""
        self._locked_until_utc = locked_until

    def __str__(self) -> str:
        return self._body.decode("utf-8", errors="replace")

    def __repr__(self) -> str:
        return (
            f"BrokerMessage(message_id={self._message_id!r}, sequence_number={self._sequence_number}, "
            f"delivery_count={self._delivery_count}, state={self._state.name})"
        )


@dataclass(frozen=True)
class DeadLetteredMessage:
    """A message in a queue's dead-letter sub-queue. ``reason`` is the service's code
    (``MaxDeliveryCountExceeded``, ``TTLExpiredException``) or the app's own; None if the app gave none.
    ``sequence_number`` is the one it had on the queue, which it keeps in the subqueue."""

    queue: str
    sequence_number: int
    message_id: str
    reason: str | None
    description: str | None
    body: bytes
    dead_lettered_at: datetime
    delivery_count: int
    subject: str | None = None
    application_properties: Mapping[str, PropertyValue] = field(default_factory=dict)

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")
