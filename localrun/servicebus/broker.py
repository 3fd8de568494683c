"""The in-process broker: queues with Service Bus semantics, on an injectable clock.

Time never passes by itself: everything that depends on time (a scheduled message becoming visible,
a lock expiring, a message's TTL running out) is applied lazily, at the moment of the first broker
call at or after it, and evaluated as of the moment it was due. ``next_due_time()`` tells a
time-skipping runner where to jump next."""

from __future__ import annotations

import heapq
import sys
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from typing import Any, Literal

from adapters.clock import Clock
from adapters.servicebus.sender import OutgoingMessage, PropertyValue, QueueNotFound, SendError
from localrun.packing import LearnedDictionary
from localrun.servicebus import limits
from localrun.servicebus.actions import HOST_OWNER, HostMessageActions
from localrun.servicebus.counters import QueueCounters
from localrun.servicebus.deferred import BrokerDeferredStore
from localrun.servicebus.errors import MessageLockLost
from localrun.servicebus.faults import SendFaults, SendRefusal
from localrun.servicebus.messages import BrokerMessage, DeadLetteredMessage, MessageState
from localrun.servicebus.policy import QueuePolicy

MAX_DELIVERY_COUNT_EXCEEDED = "MaxDeliveryCountExceeded"
TTL_EXPIRED = "TTLExpiredException"

Outcome = Literal["complete", "abandon", "defer", "deadletter"]


class _Due(IntEnum):
    VISIBLE = 0  # a scheduled message reaches its enqueue time
    LOCK_EXPIRY = 1
    TTL = 2  # an available message's time to live runs out


@dataclass(slots=True)
class _Lock:
    token: str
    owner: str
    locked_until: datetime
    orphaned: bool = False  # the receiver holding it is gone (host restart): nobody can settle it


# The bodies of messages on queues nothing has received from yet (the submitters' status queues,
# the operator alerts: only the runner's report reads them, at the end), packed with a dictionary
# learned from the first ones (``localrun.packing``): a status body is ~60 bytes instead of ~230.
_UNREAD_BODIES = LearnedDictionary(16)
_NO_PROPERTIES: dict[str, PropertyValue] = {}  # shared by every message without properties: never changed


@dataclass(slots=True)
class _Stored:
    seq: int
    message_id: str
    stored_body: bytes  # the body, or packed (``packed``): read it as ``body``
    subject: str | None
    correlation_id: str | None
    content_type: str | None
    application_properties: dict[str, PropertyValue]
    enqueued_time: datetime
    scheduled_time: datetime | None
    ttl: timedelta | None
    expires_at: datetime | None
    state: MessageState
    deliveries: int = 0
    lock: _Lock | None = None
    packed: bool = False

    @property
    def body(self) -> bytes:
        return _UNREAD_BODIES.unpack(self.stored_body) if self.packed else self.stored_body


@dataclass(frozen=True)
class _LockRef:
    """A lock token standing in for the message it locks (settlement by token)."""

    lock_token: str


# (when, tie-breaker, what, sequence number, lock token or "")
_Event = tuple[datetime, int, _Due, int, str]


@dataclass
class _Queue:
    name: str
    policy: QueuePolicy
    next_seq: int = 1
    # Main queue, in sequence order (a record is inserted once, at send): scheduled, active, locked, deferred.
    messages: dict[int, _Stored] = field(default_factory=dict)
    ready: list[int] = field(default_factory=list)  # heap of sequence numbers that may be deliverable
    events: list[_Event] = field(default_factory=list)  # heap
    dead_letters: list[DeadLetteredMessage] = field(default_factory=list)
    seen_ids: dict[str, datetime] = field(default_factory=dict)  # duplicate-detection history
    seen_order: deque[tuple[datetime, str]] = field(default_factory=deque)
    counters: QueueCounters = field(default_factory=QueueCounters)
    refusals: list[SendRefusal] = field(default_factory=list)
    # the MessageIds an injected send failure kept off this queue, none stored since (for a status given up on)
    failed_ids: set[str] = field(default_factory=set)
    # when a refusal first kept each MessageId off this queue, none stored since (for a status dropped by design)
    refused_ids: dict[str, datetime] = field(default_factory=dict)
    received: bool = False  # something has received or peeked from it (its new messages' bodies are not packed)


class InProcessBroker:
    """Service Bus queues in memory. Implements ``adapters.servicebus.sender.MessageSender``; the
    trigger side is ``receive(queue)`` plus ``actions`` (a ``ServiceBusMessageActions`` look-alike);
    ``deferred_store`` implements ``adapters.servicebus.deferred.DeferredMessageStore``."""

    def __init__(self, clock: Clock, *, send_faults: SendFaults | None = None) -> None:
        self._clock = clock
        self._mutex = threading.RLock()
        self._queues: dict[str, _Queue] = {}
        self._send_faults = send_faults
        self._tokens: dict[str, tuple[str, int]] = {}  # lock token -> (queue, sequence number)
        self._issued_tokens = 0
        self._issued_events = 0
        self._issued_receivers = 0
        self._generation = 0  # host incarnation; bumped by restart_host()
        self.actions = HostMessageActions(self)
        self.deferred_store = BrokerDeferredStore(self)

    # ----- setup -------------------------------------------------------------------------------

    def declare_queue(self, name: str, policy: QueuePolicy | None = None) -> None:
        with self._mutex:
            if name in self._queues:
                raise ValueError(f"queue {name!r} is already declared")
            self._queues[name] = _Queue(name, policy or QueuePolicy())

    def queue_names(self) -> tuple[str, ...]:
        with self._mutex:
            return tuple(self._queues)

    def policy(self, queue: str) -> QueuePolicy:
        with self._mutex:
            return self._queue(queue).policy

    def set_send_faults(self, faults: SendFaults | None) -> None:
        with self._mutex:
            self._send_faults = faults

    def refusing(self, queue: str, at: datetime) -> SendRefusal | None:
        """The refusal active on ``queue`` at ``at``, if any."""
        with self._mutex:
            return next((r for r in self._queue(queue).refusals if r.active(at)), None)

    def refusals(self, queue: str) -> tuple[SendRefusal, ...]:
        """Every refusal ``queue`` had or has, active or not."""
        with self._mutex:
            return tuple(self._queue(queue).refusals)

    def send_failed(self, queue: str, message_id: str) -> bool:
        """Whether an injected send failure (``SendFaults``) kept ``message_id`` off ``queue``, and no send stored it
        since."""
        with self._mutex:
            return message_id in self._queue(queue).failed_ids

    def first_refused(self, queue: str, message_id: str) -> datetime | None:
        """When a refusal (``refuse_sends``) first kept ``message_id`` off ``queue``, if no send stored it since."""
        with self._mutex:
            return self._queue(queue).refused_ids.get(message_id)

    def refuse_sends(self, queue: str, refusal: SendRefusal) -> None:
        """``queue`` refuses every send while ``refusal`` is active (see ``SendRefusal``)."""
        with self._mutex:
            self._queue(queue).refusals.append(refusal)

    # ----- sending (MessageSender) -------------------------------------------------------------

    def send(self, queue: str, message: OutgoingMessage) -> None:
        """The app's send: Service Bus's limits and the Python SDK's (``limits.check``)."""
        self._send(queue, message, python_sdk=True)

    def send_from_client(self, queue: str, message: OutgoingMessage) -> None:
        """A message from another client (a submitter, a payment provider: any AMQP client, .NET, Java),
        bound by Service Bus's limits only, not the Python SDK's encoder (it may carry a 64-bit integer
        property, for one). Injected faults and refusals apply as to ``send``."""
        self._send(queue, message, python_sdk=False)

    def _send(self, queue: str, message: OutgoingMessage, *, python_sdk: bool) -> None:
        with self._mutex:
            q = self._queue(queue)
            now = self._now()
            self._advance(q, now)
            try:
                limits.check(queue, message, python_sdk=python_sdk)
            except SendError:
                q.counters.limit_violations += 1
                raise
            refusal = next((r for r in q.refusals if r.active(now)), None)
            if refusal is not None:
                q.counters.refused_sends += 1
                q.refused_ids.setdefault(message.message_id, now)
                raise refusal.error(queue)
            fails, stored_anyway = self._send_faults.draw() if self._send_faults else (False, False)
            if fails and not stored_anyway:
                q.counters.send_failures += 1
                q.failed_ids.add(message.message_id)
                raise SendError(f"send to {queue!r} failed (injected fault)")
            self._store(q, message, now)
            q.failed_ids.discard(message.message_id)  # on the queue now (or dropped as a duplicate of one that was)
            q.refused_ids.pop(message.message_id, None)
            if fails:
                q.counters.send_failures += 1
                raise SendError(f"send to {queue!r} failed after the message was stored (injected lost ack)")

    # ----- trigger side ------------------------------------------------------------------------

    def receive(self, queue: str) -> BrokerMessage | None:
        """Peek-lock the next deliverable message (active, visible, unlocked, unexpired; lowest
        sequence number first) for the Functions host, or None. Settle it through ``actions``."""
        with self._mutex:
            q = self._queue(queue)
            q.received = True
            now = self._now()
            self._advance(q, now)
            rec = self._next_ready(q)
            if rec is None:
                return None
            heapq.heappop(q.ready)
            rec.deliveries += 1
            q.counters.delivered += 1
            self._take_lock(q, rec, HOST_OWNER, now)
            return self._snapshot(rec, locked=True)

    def ready_queues(self) -> list[str]:
        """The queues that have a message a trigger could receive right now."""
        with self._mutex:
            now = self._now()
            ready: list[str] = []
            for q in self._queues.values():
                self._advance(q, now)
                if self._next_ready(q) is not None:
                    ready.append(q.name)
            return ready

    # ----- time --------------------------------------------------------------------------------

    def next_due_time(self) -> datetime | None:
        """The earliest moment after now at which something changes on its own (a scheduled
        message becomes visible, a lock expires, an available message's TTL runs out), or None."""
        with self._mutex:
            now = self._now()
            earliest: datetime | None = None
            for q in self._queues.values():
                self._advance(q, now)
                while q.events and not self._is_live(q, q.events[0]):
                    heapq.heappop(q.events)
                if q.events and (earliest is None or q.events[0][0] < earliest):
                    earliest = q.events[0][0]
            return earliest

    def has_scheduled(self, queue: str, property_name: str) -> bool:
        """Whether ``queue`` holds a message scheduled for later that carries application property
        ``property_name`` (the runner's end-of-run check: such a message is work still to come)."""
        with self._mutex:
            q = self._queue(queue)
            self._advance(q, self._now())
            return any(
                rec.state is MessageState.SCHEDULED and property_name in rec.application_properties
                for rec in q.messages.values()
            )

    def holds(self, queue: str, state: MessageState, wanted: Callable[[str | None, bytes], bool]) -> bool:
        """Whether ``queue`` holds a message in ``state`` for which ``wanted(subject, body)`` is true (the
        runner's end-of-run check: a message the app still owes work)."""
        with self._mutex:
            q = self._queue(queue)
            self._advance(q, self._now())
            return any(rec.state is state and wanted(rec.subject, rec.body) for rec in q.messages.values())

    # ----- faults ------------------------------------------------------------------------------

    def restart_host(self) -> None:
        """The host died and came back: every receiver it had is gone and no lock it held can be
        settled or renewed any more. The service still holds those locks until they expire; then the
        messages are delivered again (delivery count + 1), as after any lock expiry."""
        with self._mutex:
            self._generation += 1
            for queue_name, seq in self._tokens.values():
                rec = self._queues[queue_name].messages.get(seq)
                if rec is not None and rec.lock is not None:
                    rec.lock.orphaned = True

    # ----- inspection --------------------------------------------------------------------------

    def contents(self, queue: str) -> list[BrokerMessage]:
        """Every message in the main queue, as ``peek`` sees them, for the runner's own report: not
        an operation of the app's, so not counted (the cost model bills the app's calls only)."""
        with self._mutex:
            q = self._queue(queue)
            self._advance(q, self._now())
            return [self._snapshot(rec, locked=False) for rec in q.messages.values()]

    def peek(self, queue: str, max_count: int, from_sequence_number: int = 0) -> list[BrokerMessage]:
        """Messages in the main queue (active, locked, deferred, scheduled) from a sequence number
        on, without locking them. Dead-lettered messages are not included. At most
        ``limits.MAX_PEEK_MESSAGES`` (250) whatever ``max_count`` asks, as the service does."""
        with self._mutex:
            q = self._queue(queue)
            q.received = True
            self._advance(q, self._now())
            q.counters.peeked += 1
            max_count = min(max_count, limits.MAX_PEEK_MESSAGES)
            found: list[BrokerMessage] = []
            for seq, rec in q.messages.items():  # insertion order is sequence order
                if len(found) >= max_count:
                    break
                if seq >= from_sequence_number:
                    found.append(self._snapshot(rec, locked=False))
            return found

    def peek_dead_letters(self, queue: str, max_count: int, from_sequence_number: int = 0) -> list[BrokerMessage]:
        """``peek`` on the queue's dead-letter subqueue (``<queue>/$deadletterqueue``), a queue of its own to a
        receiver, in sequence-number order from ``from_sequence_number``: each message keeps the sequence number it
        had on the queue (Service Bus changes a message's number only when a scheduled message becomes active:
        MicrosoftDocs/azure-docs#97032), so one dead-lettered late may be numbered before those that came earlier;
        with the ``DeadLetterReason`` and ``DeadLetterErrorDescription`` its move set. Counted as a peek."""
        with self._mutex:
            q = self._queue(queue)
            self._advance(q, self._now())
            q.counters.peeked += 1
            max_count = min(max_count, limits.MAX_PEEK_MESSAGES)
            found: list[BrokerMessage] = []
            for dead in sorted(q.dead_letters, key=lambda d: d.sequence_number):
                if len(found) >= max_count:
                    break
                if dead.sequence_number >= from_sequence_number:
                    found.append(
                        BrokerMessage(
                            body=dead.body,
                            message_id=dead.message_id,
                            sequence_number=dead.sequence_number,
                            enqueued_time_utc=dead.dead_lettered_at,
                            delivery_count=dead.delivery_count,
                            state=MessageState.ACTIVE,
                            subject=dead.subject,
                            application_properties=dead.application_properties,
                            dead_letter_reason=dead.reason,
                            dead_letter_error_description=dead.description,
                        )
                    )
            return found

    def dead_letters(self, queue: str | None = None) -> list[DeadLetteredMessage]:
        """The dead-letter queue of one queue, or of all queues (in declaration order)."""
        with self._mutex:
            now = self._now()
            queues = [self._queue(queue)] if queue is not None else list(self._queues.values())
            found: list[DeadLetteredMessage] = []
            for q in queues:
                self._advance(q, now)
                found.extend(q.dead_letters)
            return found

    def take_dead_letter(self, queue: str, sequence_number: int) -> DeadLetteredMessage | None:
        """An operator receives the dead letter numbered ``sequence_number`` from the subqueue and completes it
        (to resubmit or discard it): it leaves the subqueue. None if it is not there."""
        with self._mutex:
            q = self._queue(queue)
            for i, dead in enumerate(q.dead_letters):
                if dead.sequence_number == sequence_number:
                    return q.dead_letters.pop(i)
            return None

    def counters(self, queue: str | None = None) -> QueueCounters:
        """A copy of one queue's counters, or their sum over all queues."""
        with self._mutex:
            queues = [self._queue(queue)] if queue is not None else list(self._queues.values())
            total = QueueCounters()
            for q in queues:
                total = total.add(q.counters)
            return total

    # ----- settlement by lock token (the host's gRPC settlement endpoint) ----------------------

    def settle_lock(
        self,
        lock_token: str,
        outcome: Outcome,
        reason: str | None = None,
        description: str | None = None,
        *,
        owner: str = HOST_OWNER,
    ) -> None:
        """Settle the message whose lock ``owner`` holds as ``lock_token`` (what the host's settlement
        service does with the token a worker sends). ``MessageLockLost`` as through ``actions``."""
        self._settle(owner, _LockRef(lock_token), outcome, reason, description)

    def renew_lock(self, lock_token: str, *, owner: str = HOST_OWNER) -> datetime:
        """Renew the lock held as ``lock_token``; returns the new locked-until. ``MessageLockLost`` if gone."""
        with self._mutex:
            self._renew(owner, _LockRef(lock_token))
            queue_name, seq = self._tokens[lock_token]
            lock = self._queues[queue_name].messages[seq].lock
            assert lock is not None
            return lock.locked_until

    # ----- used by HostMessageActions and the deferred receivers -------------------------------

    def _settle(
        self,
        owner: str,
        message: Any,
        outcome: Outcome,
        reason: str | None = None,
        description: str | None = None,
    ) -> None:
        with self._mutex:
            now = self._now()
            q, rec = self._locked_record(owner, message, now)
            if outcome == "complete":
                q.counters.completed += 1
                self._remove(q, rec)
            elif outcome == "abandon":
                q.counters.abandoned += 1
                self._release(q, rec, now)
            elif outcome == "defer":
                self._defer(q, rec, now)
            else:
                self._dead_letter(q, rec, reason, description, now)

    def _renew(self, owner: str, message: Any) -> None:
        with self._mutex:
            now = self._now()
            q, rec = self._locked_record(owner, message, now)
            assert rec.lock is not None
            rec.lock.locked_until = now + q.policy.lock_duration
            self._schedule(q, rec.lock.locked_until, _Due.LOCK_EXPIRY, rec.seq, rec.lock.token)
            q.counters.lock_renewals += 1
            if isinstance(message, BrokerMessage):
                message._renewed(rec.lock.locked_until)

    def _receive_deferred(self, owner: str, queue: str, sequence_numbers: list[int]) -> list[BrokerMessage]:
        with self._mutex:
            q = self._queue(queue)
            q.received = True
            now = self._now()
            self._advance(q, now)
            found: list[BrokerMessage] = []
            for seq in dict.fromkeys(sequence_numbers):
                rec = q.messages.get(seq)
                if rec is None or rec.state != MessageState.DEFERRED or rec.lock is not None:
                    continue
                if rec.expires_at is not None and rec.expires_at <= now:
                    self._expire(q, rec, now)
                    continue
                rec.deliveries += 1
                q.counters.deferred_received += 1
                self._take_lock(q, rec, owner, now)
                # Counted as the Python SDK's receiver reports it, the receiver this stands in for:
                # ``ServiceBusReceivedMessage.delivery_count`` is the raw AMQP header's delivery-count
                # (azure-servicebus ``_common/message.py``), the attempts before this one, where the .NET
                # SDK adds 1 to it for a received message (``AmqpMessageConverter``: ``isPeeked ? count :
                # count + 1``) and the broker's own count includes this delivery.
                found.append(self._snapshot(rec, locked=True, delivery_count=rec.deliveries - 1))
            return found

    def _open_receiver(self, queue: str) -> tuple[str, int]:
        """A fresh lock owner id for a receiver on ``queue``, and the host incarnation it lives in."""
        with self._mutex:
            self._queue(queue)
            self._issued_receivers += 1
            return f"receiver-{self._issued_receivers}", self._generation

    def _is_current(self, generation: int) -> bool:
        with self._mutex:
            return generation == self._generation

    # ----- internals ---------------------------------------------------------------------------

    def _now(self) -> datetime:
        now = self._clock.now()
        if now.tzinfo is None:
            raise ValueError("the broker's clock must return timezone-aware datetimes")
        return now

    def _queue(self, name: str) -> _Queue:
        q = self._queues.get(name)
        if q is None:
            raise QueueNotFound(f"queue {name!r} does not exist (MessagingEntityNotFound)")
        return q

    def _store(self, q: _Queue, message: OutgoingMessage, now: datetime) -> None:
        window = q.policy.duplicate_detection_window
        if window is not None:
            while q.seen_order and q.seen_order[0][0] + window <= now:
                seen_at, old_id = q.seen_order.popleft()
                if q.seen_ids.get(old_id) == seen_at:
                    del q.seen_ids[old_id]
            if message.message_id in q.seen_ids:
                q.counters.duplicates_dropped += 1
                return
            q.seen_ids[message.message_id] = now
            q.seen_order.append((now, message.message_id))
        scheduled = message.scheduled_enqueue_time
        if scheduled is not None and scheduled.tzinfo is None:
            scheduled = scheduled.replace(tzinfo=UTC)
        is_future = scheduled is not None and scheduled > now
        enqueued = scheduled if is_future and scheduled is not None else now
        ttl = q.policy.default_ttl
        body = message.body if isinstance(message.body, bytes) else message.body.encode("utf-8")
        rec = _Stored(
            seq=q.next_seq,
            message_id=message.message_id,
            stored_body=body if q.received else _UNREAD_BODIES.pack(body),
            subject=_intern(message.subject),
            correlation_id=_intern(message.correlation_id),
            content_type=_intern(message.content_type),
            application_properties=dict(message.application_properties)
            if message.application_properties
            else _NO_PROPERTIES,
            enqueued_time=enqueued,
            scheduled_time=scheduled,
            ttl=ttl,
            expires_at=enqueued + ttl if ttl is not None else None,
            state=MessageState.SCHEDULED if is_future else MessageState.ACTIVE,
            packed=not q.received,
        )
        q.next_seq += 1
        q.messages[rec.seq] = rec
        q.counters.sent += 1
        if is_future:
            self._schedule(q, enqueued, _Due.VISIBLE, rec.seq)
        else:
            self._make_available(q, rec)

    def _activate(self, q: _Queue, rec: _Stored) -> None:
        """A scheduled message reaches its enqueue time. "The SequenceNumber for a scheduled message is only
        valid while the message is in this state. As the message transitions to the active state, the
        message is appended to the queue as if it had been enqueued at the current instant, which includes
        assigning a new SequenceNumber" (https://learn.microsoft.com/azure/service-bus-messaging/message-sequencing):
        it is renumbered and goes behind every message enqueued before that moment."""
        del q.messages[rec.seq]
        rec.seq = q.next_seq
        q.next_seq += 1
        rec.state = MessageState.ACTIVE
        q.messages[rec.seq] = rec  # the highest number: insertion order stays sequence order
        self._make_available(q, rec)

    def _make_available(self, q: _Queue, rec: _Stored) -> None:
        heapq.heappush(q.ready, rec.seq)
        if rec.expires_at is not None:
            self._schedule(q, rec.expires_at, _Due.TTL, rec.seq)

    def _schedule(self, q: _Queue, when: datetime, due: _Due, seq: int, token: str = "") -> None:
        self._issued_events += 1
        heapq.heappush(q.events, (when, self._issued_events, due, seq, token))

    def _is_live(self, q: _Queue, event: _Event) -> bool:
        when, _, due, seq, token = event
        rec = q.messages.get(seq)
        if rec is None:
            return False
        if due == _Due.VISIBLE:
            return rec.state == MessageState.SCHEDULED
        if due == _Due.LOCK_EXPIRY:
            return rec.lock is not None and rec.lock.token == token and rec.lock.locked_until == when
        return rec.state == MessageState.ACTIVE and rec.lock is None and rec.expires_at == when

    def _advance(self, q: _Queue, now: datetime) -> None:
        """Apply everything due at or before ``now``, each as of the moment it was due."""
        while q.events and q.events[0][0] <= now:
            event = heapq.heappop(q.events)
            if not self._is_live(q, event):
                continue
            when, _, due, seq, _token = event
            rec = q.messages[seq]
            if due == _Due.VISIBLE:
                self._activate(q, rec)
            elif due == _Due.LOCK_EXPIRY:
                q.counters.lock_expirations += 1
                self._release(q, rec, when)
            else:
                self._expire(q, rec, when)

    def _next_ready(self, q: _Queue) -> _Stored | None:
        """The deliverable message with the lowest sequence number (left on the heap), or None.
        Call after ``_advance``: an expired message has already been taken out by its TTL event."""
        while q.ready:
            rec = q.messages.get(q.ready[0])
            if rec is None or rec.state != MessageState.ACTIVE or rec.lock is not None:
                heapq.heappop(q.ready)
                continue
            return rec
        return None

    def _take_lock(self, q: _Queue, rec: _Stored, owner: str, now: datetime) -> None:
        self._issued_tokens += 1
        token = str(uuid.UUID(int=self._issued_tokens))
        rec.lock = _Lock(token, owner, now + q.policy.lock_duration)
        self._tokens[token] = (q.name, rec.seq)
        self._schedule(q, rec.lock.locked_until, _Due.LOCK_EXPIRY, rec.seq, token)

    def _locked_record(self, owner: str, message: Any, now: datetime) -> tuple[_Queue, _Stored]:
        """The record whose lock ``owner`` holds through ``message``'s lock token, or MessageLockLost."""
        token = getattr(message, "lock_token", None)
        if not token:
            raise MessageLockLost("the message holds no lock (was it peeked rather than received?)")
        where = self._tokens.get(str(token))
        if where is not None:
            self._advance(self._queues[where[0]], now)
            where = self._tokens.get(str(token))
        if where is None:
            raise MessageLockLost(f"lock {token} has expired or the message was already settled")
        q = self._queues[where[0]]
        rec = q.messages[where[1]]
        assert rec.lock is not None
        if rec.lock.orphaned:
            raise MessageLockLost(f"lock {token} belonged to a receiver that no longer exists (host restart)")
        if rec.lock.owner != owner:
            raise MessageLockLost(f"lock {token} is held by another receiver")
        return q, rec

    def _drop_lock(self, rec: _Stored) -> None:
        if rec.lock is not None:
            self._tokens.pop(rec.lock.token, None)
            rec.lock = None

    def _release(self, q: _Queue, rec: _Stored, at: datetime) -> None:
        """The lock ended without settlement (abandon, or expiry at ``at``). A message whose TTL passed
        under the lock expires now, a deferred one fetched by sequence number too: "the message is moved
        to the dead-letter queue as the lock is abandoned or expires" (message-expiration)."""
        self._drop_lock(rec)
        if rec.expires_at is not None and rec.expires_at <= at:
            self._expire(q, rec, at)
        elif rec.deliveries >= q.policy.max_delivery_count:
            self._worn_out(q, rec, at)
        elif rec.state == MessageState.ACTIVE:
            self._make_available(q, rec)
        # a deferred message stays deferred

    def _defer(self, q: _Queue, rec: _Stored, at: datetime) -> None:
        """Defer ends a delivery as abandon does, counted: the SDKs send it as the AMQP ``modified`` outcome
        with ``delivery-failed`` (azure-servicebus ``_pyamqp_transport``: ``undeliverable_here`` too), which
        obliges the service to count the delivery (AMQP 1.0, 3.4.5). Deferred on its last allowed delivery, a
        message is dead-lettered ``MaxDeliveryCountExceeded`` instead (Azure/azure-service-bus#375: with
        MaxDeliveryCount 1 every defer dead-letters), whether it came to a trigger or was fetched deferred."""
        self._drop_lock(rec)
        if rec.deliveries >= q.policy.max_delivery_count:
            self._worn_out(q, rec, at)
            return
        q.counters.deferred += 1
        rec.state = MessageState.DEFERRED

    def _worn_out(self, q: _Queue, rec: _Stored, at: datetime) -> None:
        """Its last allowed delivery ended unsettled (abandoned, its lock lapsed, or deferred)."""
        self._dead_letter(
            q,
            rec,
            MAX_DELIVERY_COUNT_EXCEEDED,
            f"Message could not be consumed after {q.policy.max_delivery_count} delivery attempts.",
            at,
        )

    def _expire(self, q: _Queue, rec: _Stored, at: datetime) -> None:
        q.counters.expired += 1
        if q.policy.dead_letter_on_expiration:
            self._dead_letter(q, rec, TTL_EXPIRED, "The message expired and was dead lettered.", at)
        else:
            self._remove(q, rec)

    def _dead_letter(self, q: _Queue, rec: _Stored, reason: str | None, description: str | None, at: datetime) -> None:
        self._remove(q, rec)
        q.counters.dead_lettered += 1
        q.dead_letters.append(
            DeadLetteredMessage(
                queue=q.name,
                sequence_number=rec.seq,
                message_id=rec.message_id,
                reason=reason,
                description=description,
                body=rec.body,
                dead_lettered_at=at,
                delivery_count=rec.deliveries,
                subject=rec.subject,
                application_properties=dict(rec.application_properties),
            )
        )

    def _remove(self, q: _Queue, rec: _Stored) -> None:
        self._drop_lock(rec)
        del q.messages[rec.seq]

    @staticmethod
    def _snapshot(rec: _Stored, *, locked: bool, delivery_count: int | None = None) -> BrokerMessage:
        return BrokerMessage(
            body=rec.body,
            message_id=rec.message_id,
            sequence_number=rec.seq,
            enqueued_time_utc=rec.enqueued_time,
            delivery_count=rec.deliveries if delivery_count is None else delivery_count,
            state=rec.state,
            subject=rec.subject,
            correlation_id=rec.correlation_id,
            content_type=rec.content_type,
            application_properties=rec.application_properties,
            scheduled_enqueue_time_utc=rec.scheduled_time,
            expires_at_utc=rec.expires_at,
            time_to_live=rec.ttl,
            lock_token=rec.lock.token if locked and rec.lock is not None else None,
            locked_until_utc=rec.lock.locked_until if locked and rec.lock is not None else None,
        )


def _intern(text: str | None) -> str | None:
    """One string for equal subjects, correlation ids (an order's id) and content types."""
    return None if text is None else sys.intern(text)
