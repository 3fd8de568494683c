"""Deferred receive: ``adapters.servicebus.deferred.DeferredMessageStore`` over the broker. A receiver
is what ``ServiceBusClient.get_queue_receiver`` gives in production: messages fetched on it are
locked to it and must be settled on it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from localrun.servicebus.errors import ReceiverClosed
from localrun.servicebus.messages import BrokerMessage

if TYPE_CHECKING:
    from localrun.servicebus.broker import InProcessBroker


class BrokerDeferredReceiver:
    """A receiver on one queue. Usable only inside its ``with`` block and only until a host restart
    (then ``ReceiverClosed``). Settlement raises ``MessageLockLost`` as ``HostMessageActions`` does."""

    def __init__(self, broker: InProcessBroker, queue: str, owner: str, generation: int) -> None:
        self._broker = broker
        self._queue = queue
        self._owner = owner
        self._generation = generation
        self._closed = False

    @property
    def queue(self) -> str:
        return self._queue

    def receive_deferred(self, sequence_numbers: Sequence[int]) -> list[BrokerMessage]:
        """The deferred messages with these sequence numbers, locked to this receiver (a delivery: the
        count + 1; each message's ``delivery_count`` is what the Python SDK reports, the deliveries before
        this one). A number that is not a deferred, unlocked message of this queue is absent; a
        deferred message whose TTL has passed is moved to the dead-letter queue (if the queue
        dead-letters on expiration) and is absent."""
        self._check_open()
        return self._broker._receive_deferred(self._owner, self._queue, list(sequence_numbers))

    def peek(self, max_count: int, from_sequence_number: int = 0) -> list[BrokerMessage]:
        self._check_open()
        return self._broker.peek(self._queue, max_count, from_sequence_number)

    def complete(self, message: Any) -> None:
        self._check_open()
        self._broker._settle(self._owner, message, "complete")

    def abandon(self, message: Any) -> None:
        """Release the lock: the message is deferred again (or dead-lettered after its last allowed delivery)."""
        self._check_open()
        self._broker._settle(self._owner, message, "abandon")

    def defer(self, message: Any) -> None:
        """Deferred again; dead-lettered ``MaxDeliveryCountExceeded`` on its last allowed delivery."""
        self._check_open()
        self._broker._settle(self._owner, message, "defer")

    def dead_letter(self, message: Any, reason: str, description: str) -> None:
        self._check_open()
        self._broker._settle(self._owner, message, "deadletter", reason, description)

    def renew_message_lock(self, message: Any) -> None:
        self._check_open()
        self._broker._renew(self._owner, message)

    def close(self) -> None:
        """Locks this receiver still holds stay until they expire (nobody can settle them now)."""
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise ReceiverClosed(f"the receiver on {self._queue!r} is closed")
        if not self._broker._is_current(self._generation):
            raise ReceiverClosed(f"the receiver on {self._queue!r} died with the host")


class BrokerDeadLetterPeeker:
    """A receiver on a queue's dead-letter subqueue, for peeks only (``adapters.servicebus.dead_letters``)."""

    def __init__(self, broker: InProcessBroker, queue: str, generation: int) -> None:
        self._broker = broker
        self._queue = queue
        self._generation = generation
        self._closed = False

    def peek(self, max_count: int, from_sequence_number: int = 0) -> list[BrokerMessage]:
        if self._closed or not self._broker._is_current(self._generation):
            raise ReceiverClosed(f"the dead-letter receiver on {self._queue!r} is closed")
        return self._broker.peek_dead_letters(self._queue, max_count, from_sequence_number)

    def close(self) -> None:
        self._closed = True


class BrokerDeferredStore:
    def __init__(self, broker: InProcessBroker) -> None:
        self._broker = broker

    @contextmanager
    def open(self, queue: str) -> Iterator[BrokerDeferredReceiver]:
        """A receiver on ``queue`` (``QueueNotFound`` if the queue is not declared)."""
        owner, generation = self._broker._open_receiver(queue)
        receiver = BrokerDeferredReceiver(self._broker, queue, owner, generation)
        try:
            yield receiver
        finally:
            receiver.close()

    @contextmanager
    def open_dead_letters(self, queue: str) -> Iterator[BrokerDeadLetterPeeker]:
        """A receiver on ``queue``'s dead-letter subqueue (``QueueNotFound`` if the queue is not declared)."""
        _, generation = self._broker._open_receiver(queue)
        peeker = BrokerDeadLetterPeeker(self._broker, queue, generation)
        try:
            yield peeker
        finally:
            peeker.close()
