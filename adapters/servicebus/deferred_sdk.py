"""``DeferredMessageStore`` over the ``azure-servicebus`` SDK (production).

``open(queue)`` is a ``ServiceBusClient.get_queue_receiver`` (peek-lock), closed at the block's end;
messages fetched on it are settled on it. The SDK's behaviour is translated to the protocol:
``receive_deferred_messages`` fails the whole call with ``MessageNotFoundError`` when any one
sequence number is not a deferred message of the queue (settled, expired, never deferred); the
protocol instead returns the ones that are there, so on that error the numbers are fetched one by
one and the missing ones left out. ``peek_messages`` without a sequence number continues after the
last message the receiver peeked; the protocol's ``peek(n, 0)`` is from the beginning, so a sequence
number is always passed."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from typing import TYPE_CHECKING, Any

from adapters.servicebus.deferred import ReceiveError
from adapters.servicebus.sender import identity_failure
from settings import SEND_TIMEOUT

if TYPE_CHECKING:
    from azure.servicebus import ServiceBusClient, ServiceBusReceiver

log = logging.getLogger(__name__)

# The whole of one fetch by sequence number or peek, the SDK's retries included: both are management requests,
# and without a ``timeout`` (and the client's ``try_timeout`` unset, its default) the SDK gives pyamqp's management
# operation none, which then waits for the service's response as long as the connection lives. The same bound as
# a send (``settings.SEND_TIMEOUT``); a receiver's link is opened by its first request, within it. Settling a
# message fetched by sequence number (over the management link) is bounded by the SDK itself (60 s a try).
REQUEST_TIMEOUT_SECONDS = SEND_TIMEOUT.total_seconds()

# The SDK's own start when a receiver has peeked nothing yet (``ServiceBusReceiver.peek_messages``).
FIRST_SEQUENCE_NUMBER = 1


@contextmanager
def _received(what: str) -> Iterator[None]:
    """The SDK's errors of a fetch or a peek (after its retries) as ``ReceiveError``, saying what they say of the
    app's identity (no token, a token not taken) when they do. ``MessageNotFoundError`` is the caller's."""
    from azure.core.exceptions import ClientAuthenticationError
    from azure.servicebus.exceptions import MessageNotFoundError, ServiceBusError

    try:
        yield
    except MessageNotFoundError:
        raise
    except (ServiceBusError, ClientAuthenticationError) as exc:
        raise ReceiveError(f"{what} failed: {identity_failure(exc) or exc}") from exc


class SdkDeferredReceiver:
    def __init__(self, receiver: ServiceBusReceiver) -> None:
        self._r = receiver

    def receive_deferred(self, sequence_numbers: Sequence[int]) -> list[Any]:
        from azure.servicebus.exceptions import MessageNotFoundError

        numbers = list(dict.fromkeys(sequence_numbers))
        if not numbers:
            return []
        with _received(f"fetching deferred messages {numbers[:5]} of {getattr(self._r, 'entity_path', None)!r}"):
            try:
                return list(self._r.receive_deferred_messages(numbers, timeout=REQUEST_TIMEOUT_SECONDS))
            except MessageNotFoundError:
                if len(numbers) == 1:
                    return []
            found: list[Any] = []
            for number in numbers:
                try:
                    found.extend(self._r.receive_deferred_messages([number], timeout=REQUEST_TIMEOUT_SECONDS))
                except MessageNotFoundError:
                    log.info("deferred message %s is not on the queue", number)
            return found

    def peek(self, max_count: int, from_sequence_number: int = 0) -> list[Any]:
        # Always a sequence number: without one (or with 0) the SDK goes on after the last message this
        # receiver peeked, not from the beginning.
        start = max(from_sequence_number, FIRST_SEQUENCE_NUMBER)
        with _received(f"peeking {getattr(self._r, 'entity_path', None)!r} from #{start}"):
            return list(
                self._r.peek_messages(
                    max_message_count=max_count, sequence_number=start, timeout=REQUEST_TIMEOUT_SECONDS
                )
            )

    def complete(self, message: Any) -> None:
        self._r.complete_message(message)

    def abandon(self, message: Any) -> None:
        self._r.abandon_message(message)

    def defer(self, message: Any) -> None:
        self._r.defer_message(message)

    def dead_letter(self, message: Any, reason: str, description: str) -> None:
        self._r.dead_letter_message(message, reason=reason, error_description=description[:1024])


class SdkDeferredStore:
    def __init__(self, client: ServiceBusClient) -> None:
        self._client = client

    @contextmanager
    def open(self, queue: str) -> Iterator[SdkDeferredReceiver]:
        # Not the receiver's own context manager: its ``__enter__`` opens the link with no timeout (the SDK's
        # ``_open_with_retry``, the client's ``try_timeout`` unset), and its wait for the link to be ready has no
        # end on a connection the service accepts and never answers. The first request opens it, within its bound.
        with closing(self._client.get_queue_receiver(queue_name=queue)) as receiver:
            yield SdkDeferredReceiver(receiver)
