"""Peeking a queue's dead-letter subqueue (``<queue>/$deadletterqueue``).

The subqueue is a queue of its own to a receiver ("from an API and protocol perspective, the DLQ is mostly similar
to any other queue": Microsoft Learn, *Service Bus dead-letter queues*): a message moved there, whoever moved it
(the app's dead-letter call, or the broker: ``MaxDeliveryCountExceeded``, ``TTLExpiredException``...), keeps the
sequence number it had on its queue (a number changes only when a scheduled message becomes active:
MicrosoftDocs/azure-docs#97032), so a peek in number order may find one dead-lettered late before earlier ones. Its
``dead_letter_reason`` and ``dead_letter_error_description`` are the ``DeadLetterReason`` and
``DeadLetterErrorDescription`` properties the move set. A peek is the receiver's (``DeferredReceiver.peek``: from a
sequence number on, without locking); the app's identity, Azure Service Bus Data Owner on the namespace, may
receive (Listen) from every entity of it, subqueues too."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, closing, contextmanager
from typing import TYPE_CHECKING, Protocol

from adapters.servicebus.browse import Peeker
from adapters.servicebus.deferred_sdk import SdkDeferredReceiver

if TYPE_CHECKING:
    from azure.servicebus import ServiceBusClient


class DeadLetterBrowser(Protocol):
    def open_dead_letters(self, queue: str) -> AbstractContextManager[Peeker]:
        """A receiver on ``queue``'s dead-letter subqueue, for peeks only."""
        ...


class SdkDeadLetterBrowser:
    def __init__(self, client: ServiceBusClient) -> None:
        self._client = client

    @contextmanager
    def open_dead_letters(self, queue: str) -> Iterator[Peeker]:
        from azure.servicebus import ServiceBusSubQueue

        # As SdkDeferredStore.open: not the receiver's own context manager (its link opens unbounded); every peek
        # passes a sequence number and is bounded (SdkDeferredReceiver.peek).
        with closing(self._client.get_queue_receiver(queue_name=queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER)) as r:
            yield SdkDeferredReceiver(r)
