"""Sending messages. The app sends through the ``azure-servicebus`` SDK (output bindings cannot set
``MessageId``, properties or a scheduled time); the local runner's broker implements the same
``MessageSender`` protocol."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from settings import SEND_TIMEOUT

if TYPE_CHECKING:
    from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSender


log = logging.getLogger(__name__)

PropertyValue = str | int | float | bool


@dataclass(frozen=True)
class OutgoingMessage:
    body: str | bytes  # what azure.servicebus.ServiceBusMessage accepts
    message_id: str
    subject: str | None = None
    application_properties: Mapping[str, PropertyValue] = field(default_factory=dict)
    scheduled_enqueue_time: datetime | None = None
    correlation_id: str | None = None
    content_type: str = "application/json"


class SendError(Exception):
    """A send failed (after the SDK's own retries)."""


class QueueNotFound(SendError):
    """The destination queue does not exist, is disabled (or send-disabled) by its owner, or this app may not
    send to it: it refuses this app until someone acts on it, whatever the SDK's retries do."""


class MessageRejected(SendError):
    """The message itself breaks a Service Bus limit (MessageId over 128 characters, over the tier's
    message size, a property too large, an integer property the SDK cannot encode): sending it again can
    never succeed. The SDK raises ``ValueError`` when such a message is built and
    ``MessageSizeExceededError`` when it is sent."""


# azure-servicebus 7.x (the pyamqp transport, ``_pyamqp/_encode.py`` ``encode_unknown``) writes an ``int``
# application property as an AMQP int, 32 bits; any other integer fails the send with ``ValueError("Value
# supplied for int invalid")``, surfaced as a non-retryable ``ServiceBusError`` after the sender's link is
# shut down (Azure/azure-sdk-for-python#34717). Refused here first, as what it is: a message that can never
# be sent. A number that may be larger (a sequence number: 64 bits) is sent as text instead.
INT_PROPERTY_MIN = -(2**31)
INT_PROPERTY_MAX = 2**31 - 1


def unsendable_property(properties: Mapping[str, PropertyValue]) -> str | None:
    """The name of an application property the SDK cannot encode (an integer outside 32 bits), or None."""
    for name, value in properties.items():
        if isinstance(value, int) and not isinstance(value, bool) and not INT_PROPERTY_MIN <= value <= INT_PROPERTY_MAX:
            return name
    return None


# The whole of one send, the SDK's retries included (``send_messages(timeout=...)``). Without it the SDK gives its
# AMQP client no timeout, and pyamqp's ``SendClient.send_message`` then waits for the service's outcome "until the
# message is sent or error happens": as long as the connection lives, an activity or trigger held until
# ``functionTimeout`` and an operator's request past the HTTP front end's 230 s. A send cut short may still land:
# the caller's retry sends the same MessageId, which duplicate detection collapses.
SEND_TIMEOUT_SECONDS = SEND_TIMEOUT.total_seconds()


class MessageSender(Protocol):
    def send(self, queue: str, message: OutgoingMessage) -> None: ...


# Senders kept idle per queue for later sends (each holds an AMQP connection and the SDK's keep-alive thread); more
# are opened while more sends to the queue run at once, and closed when they are done.
IDLE_SENDERS_PER_QUEUE = 4
# Idle senders kept in all, whatever the queues: a submitter's ``replyTo`` is any queue of the namespace, and every
# instance of a scale-out keeps its own; past this the one idle the longest is closed. A Standard namespace takes
# 5,000 AMQP connections in all (learn.microsoft.com/azure/service-bus-messaging/service-bus-quotas), the host's
# triggers' among them: 4 per queue to 40 reply queues on 40 instances would be 6,400.
IDLE_SENDERS = 16


def identity_failure(exc: Exception) -> str | None:
    """What an error of the SDK says of the app's identity, or None when it is about something else: no token from
    the credential (the SDK's "Handler failed" around azure-core's ``ClientAuthenticationError``), or a token the
    namespace did not take (``ServiceBusAuthenticationError``: its put-token answer)."""
    from azure.core.exceptions import ClientAuthenticationError
    from azure.servicebus.exceptions import ServiceBusAuthenticationError

    if isinstance(exc, ServiceBusAuthenticationError):
        return f"Service Bus did not take the app's token ({_refusal(exc)})"
    inner = exc if isinstance(exc, ClientAuthenticationError) else getattr(exc, "inner_exception", None)
    if isinstance(inner, ClientAuthenticationError):
        return (
            f"no token from the app's credential (the managed identity endpoint): {' '.join(str(inner).split())[:300]}"
        )
    return None


def _refusal(exc: Exception) -> str:
    """What the namespace answered the CBS put-token with: pyamqp's ``TokenAuthFailure`` (its status and reason)
    inside the SDK's error, else the error's own text."""
    failure = getattr(exc, "inner_exception", None)
    status, reason = getattr(failure, "status_code", None), getattr(failure, "status_description", None)
    if status is None:
        return str(exc)
    text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
    return f"put-token answered {status}: {text}"


class SdkMessageSender:
    """``MessageSender`` over ``azure.servicebus.ServiceBusClient``.

    The SDK's ``ServiceBusSender`` is not thread-safe (its README: one per thread, or a lock around it), and the
    Functions worker runs the app's sync functions on a pool of threads that share this object: a send that found
    its connection closed by the service closed the handler under another thread's send, which then failed at once
    ("Handler failed: 'NoneType' object has no attribute 'send_message'", not retried). So each send has a sender of
    its own while it runs: an idle one of its queue, or a new one, given back when the send succeeded. One whose
    send failed is closed instead: the SDK keeps a handler after a timeout and retries on it, and a connection that
    went dead without a word (no reset) times out every send on it until TCP gives up, about 15 minutes; the next
    send opens a new one."""

    def __init__(self, client: ServiceBusClient) -> None:
        self._client = client
        self._idle: list[tuple[str, ServiceBusSender]] = []  # (queue, sender), the one idle the longest first
        self._lock = threading.Lock()
        self._closed = False

    def _take(self, queue: str) -> tuple[ServiceBusSender, bool]:
        """A sender of ``queue`` and whether it was kept idle (False: new)."""
        with self._lock:
            for index in range(len(self._idle) - 1, -1, -1):  # its queue's sender idle the shortest
                if self._idle[index][0] == queue:
                    return self._idle.pop(index)[1], True
        return self._client.get_queue_sender(queue_name=queue), False

    def _give_back(self, queue: str, sender: ServiceBusSender) -> None:
        dropped = [sender]
        with self._lock:
            if not self._closed and sum(kept == queue for kept, _ in self._idle) < IDLE_SENDERS_PER_QUEUE:
                self._idle.append((queue, sender))
                dropped = [idle for _, idle in self._idle[:-IDLE_SENDERS]]
                del self._idle[:-IDLE_SENDERS]
        for idle in dropped:
            self._drop(idle)

    @staticmethod
    def _drop(sender: ServiceBusSender) -> None:
        try:
            sender.close()
        except Exception:  # a handler already broken: it is let go all the same
            log.info("closing a Service Bus sender failed", exc_info=True)

    def _send_alone(self, queue: str, message: ServiceBusMessage, *, new: bool = False) -> None:
        """``message`` sent on a sender of its own (a new one with ``new``). A kept sender the queue refuses as not
        found is closed and the send tried once on a new one: its link may be one the service detached when the
        queue was deleted, and the queue created again since (the SDK raises that detach's ``amqp:not-found``)."""
        from azure.servicebus.exceptions import MessagingEntityNotFoundError

        sender, kept = (self._client.get_queue_sender(queue_name=queue), False) if new else self._take(queue)
        try:
            sender.send_messages(message, timeout=SEND_TIMEOUT_SECONDS)
        except MessagingEntityNotFoundError:
            self._drop(sender)
            if not kept:
                raise
            self._send_alone(queue, message, new=True)
            return
        except BaseException:
            self._drop(sender)
            raise
        self._give_back(queue, sender)

    def send(self, queue: str, message: OutgoingMessage) -> None:
        from azure.core.exceptions import ClientAuthenticationError
        from azure.servicebus import ServiceBusMessage
        from azure.servicebus.exceptions import (
            MessageSizeExceededError,
            MessagingEntityDisabledError,
            MessagingEntityNotFoundError,
            ServiceBusAuthorizationError,
            ServiceBusError,
        )

        unsendable = unsendable_property(message.application_properties)
        if unsendable is not None:
            raise MessageRejected(
                f"message {message.message_id!r} for {queue!r} refused: application property {unsendable!r} is "
                f"the integer {message.application_properties[unsendable]}, outside the 32 bits the SDK encodes"
            )
        try:
            sb_message = ServiceBusMessage(
                message.body,
                message_id=message.message_id,
                subject=message.subject,
                application_properties=dict(message.application_properties) or None,  # type: ignore[arg-type]
                scheduled_enqueue_time_utc=message.scheduled_enqueue_time,
                correlation_id=message.correlation_id,
                content_type=message.content_type,
            )
        except ValueError as exc:  # e.g. "message_id cannot be longer than 128 characters."
            raise MessageRejected(f"message {message.message_id[:40]!r}... for {queue!r} refused: {exc}") from exc
        try:
            self._send_alone(queue, sb_message)
        except MessageSizeExceededError as exc:
            raise MessageRejected(f"message {message.message_id!r} for {queue!r} refused: {exc}") from exc
        except (MessagingEntityNotFoundError, MessagingEntityDisabledError, ServiceBusAuthorizationError) as exc:
            # Missing, disabled by its owner (the SDK counts that retryable: its retries are spent by now), or
            # this app may not send to it (no Data Sender role on that queue: amqp:unauthorized-access at the attach).
            raise QueueNotFound(f"cannot send to queue {queue!r}: {exc}") from exc
        except (ServiceBusError, ClientAuthenticationError) as exc:
            # The namespace not taking the identity's token (the CBS put-token answered 401: another audience or
            # tenant, expired) or no token from the credential: every queue alike, and a token renewed may be taken.
            # Transient, and said (the SDK's own text was "amqp:client-error", or "Handler failed").
            raise SendError(f"send to {queue!r} failed: {identity_failure(exc) or exc}") from exc

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = [sender for _, sender in self._idle]
            self._idle.clear()
        for sender in idle:
            self._drop(sender)
