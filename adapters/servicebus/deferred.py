"""Deferred messages: a deferred message is never delivered to a trigger again; it is fetched by its
sequence number on an SDK receiver and settled on that same receiver.

``DeferredMessageStore.open(queue)`` gives a ``DeferredReceiver`` (a context manager). The
production implementation wraps ``ServiceBusClient.get_queue_receiver``; the local runner's broker
implements the same protocol."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol


class ReceiveError(Exception):
    """A fetch by sequence number or a peek that Service Bus did not answer (after the SDK's retries): the app's
    identity refused (no token from the credential, a token the namespace does not take, no role on the queue), the
    connection lost, a timeout. Nothing was fetched or settled by it. Not a ``SendError``: the callers that look
    for deferred messages on the side log it and leave them to the peek sweep, as before; the ``orders`` handler
    that fetches one for its own work (``RetryDeferred``) handles its message again later
    (``submission.store_outage``)."""


class DeferredReceiver(Protocol):
    def receive_deferred(self, sequence_numbers: Sequence[int]) -> list[Any]:
        """The deferred messages with these sequence numbers, locked to this receiver. A number that
        is not deferred on the queue (settled, expired, unknown) is simply absent from the result."""
        ...

    def peek(self, max_count: int, from_sequence_number: int = 0) -> list[Any]:
        """Up to ``max_count`` messages (active, locked, deferred, scheduled; not dead-lettered) whose
        sequence number is ``from_sequence_number`` or more, in sequence number order, without locking
        them; 0: from the oldest. None at or after it: empty. Each call stands alone (it does not go on
        from an earlier peek on the same receiver). Service Bus may return fewer than asked although
        more follow: only an empty answer says nothing is left."""
        ...

    def complete(self, message: Any) -> None: ...

    def abandon(self, message: Any) -> None: ...

    def defer(self, message: Any) -> None: ...

    def dead_letter(self, message: Any, reason: str, description: str) -> None: ...


class DeferredMessageStore(Protocol):
    def open(self, queue: str) -> AbstractContextManager[DeferredReceiver]: ...
