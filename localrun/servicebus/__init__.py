"""An in-process Azure Service Bus broker for the local runner: queues with the semantics the app
relies on, driven by an injectable clock (``adapters.clock.Clock``), never the wall clock.

Modeled (each backed by a contract test in ``tests/localrun/test_broker_*.py``):

- Queues declared up front with a ``QueuePolicy`` (lock duration, max delivery count, duplicate
  detection window, default TTL, dead-lettering on expiration; defaults from ``contracts.names``); a
  lock over 5 minutes or a duplicate detection window outside 20 s to 7 days is refused, as Azure does.
  Sending to an undeclared queue raises ``QueueNotFound`` (the SDK's ``MessagingEntityNotFoundError``).
- Sending (``InProcessBroker.send``, the app's ``MessageSender``): gap-free increasing sequence numbers
  per queue; scheduled enqueue time (invisible to receivers until due, visible to peek, TTL counted from
  the scheduled time; when due it is renumbered and appended behind the messages already there, as the
  service does); duplicate detection by ``MessageId`` within the window (the duplicate is accepted
  and silently dropped); optional injected send failures (``SendFaults``), including failures after the
  message was stored.
- Peek-lock delivery to a trigger (``receive``), lowest sequence number first; settlement through
  ``actions`` (``complete``, ``abandon``, ``deadletter`` with reason and description, ``defer``,
  ``renew_message_lock``); lock expiry makes the message available again with delivery count + 1; a
  message that reaches the max delivery count without settlement is dead-lettered with
  ``MaxDeliveryCountExceeded``; settling without a valid lock raises ``MessageLockLost``; the trigger's
  dead-letter with a reason or description over 4,096 characters raises ``DeadLetterTextTooLong`` (the
  host's .NET SDK refuses it), nothing settled.
- Deferral: a deferred message is never delivered to a trigger again but is visible to peek; it is
  fetched by sequence number on a receiver from ``deferred_store.open(queue)`` and settled there.
- Time to live: an available message past its expiry is never delivered; it is dead-lettered with
  ``TTLExpiredException`` (or dropped if the queue does not dead-letter on expiration). A locked message
  is not affected until its lock ends, then expires at once (a deferred message fetched before its
  expiry too). A deferred message expires lazily, when it is fetched or such a lock ends.
- Inspection: ``dead_letters()``, ``peek()`` (at most 250 messages a call, as the service answers),
  ``counters()``; time skipping: ``next_due_time()``.
- Host restart (``restart_host``): the host's receivers and settlement handles are gone; the service
  keeps their locks until they expire, then the messages are redelivered.
- Thread-safe (one re-entrant lock) and deterministic (lock tokens are counters, faults use a seeded
  ``random.Random``).

Not modeled: topics and subscriptions, sessions, partitions, transactions, receive-and-delete mode,
prefetch, batches, entity size quotas, throttling, auto-forwarding, cancelling a scheduled message,
per-message TTL (``OutgoingMessage`` has none, so the queue's default TTL applies), the Premium tier's
larger messages (``limits.py`` holds every queue to Standard's 256 KB), ``properties_to_modify`` on
settlement, receiving from the dead-letter queue (it is inspection only), and the lazy garbage
collection of expired messages (here expiry takes effect at the first broker call at or after the
moment, evaluated as of that moment, so a peek never shows an expired active message; the service's
may until it collects it). Duplicate detection compares MessageIds exactly (case-sensitive): the
service's documentation does not say how it compares them.
``delivery_count`` counts like the service and the .NET SDK (1 on the first delivery); the Python SDK
reads the raw AMQP header, which counts prior attempts (one less), and so do the messages a deferred
receiver fetches (in Azure that receiver is the Python SDK's). Application property keys are
``str`` as sent.
"""

from localrun.servicebus.actions import HostMessageActions
from localrun.servicebus.broker import MAX_DELIVERY_COUNT_EXCEEDED, TTL_EXPIRED, InProcessBroker
from localrun.servicebus.counters import QueueCounters
from localrun.servicebus.deferred import BrokerDeferredReceiver, BrokerDeferredStore
from localrun.servicebus.errors import DeadLetterTextTooLong, MessageLockLost, ReceiverClosed
from localrun.servicebus.faults import SendFaults
from localrun.servicebus.messages import BrokerMessage, DeadLetteredMessage, MessageState
from localrun.servicebus.policy import QueuePolicy

__all__ = [
    "MAX_DELIVERY_COUNT_EXCEEDED",
    "TTL_EXPIRED",
    "BrokerDeferredReceiver",
    "BrokerDeferredStore",
    "BrokerMessage",
    "DeadLetterTextTooLong",
    "DeadLetteredMessage",
    "HostMessageActions",
    "InProcessBroker",
    "MessageLockLost",
    "MessageState",
    "QueueCounters",
    "QueuePolicy",
    "ReceiverClosed",
    "SendFaults",
]
