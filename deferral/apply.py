"""Applying one deferred message fetched by sequence number on a receiver, and settling it on that
same receiver. Used by submission (when the order arrives), by ``RetryDeferred`` and by the peek sweep.

The outcome is written to the deferral document BEFORE the message is settled: if the settlement is
lost (lock lost, crash) the message stays deferred, and the peek sweep later finds a deferred message
whose entry is already resolved and settles it again (applying is idempotent).

Also what is done with a tracked message found gone (``account_for_absent``), and, when an order's
document is full, looking for every waiting message on the queue before a new one is refused
(``record_making_room``)."""

from __future__ import annotations

import logging
import re
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from adapters.cosmos.deferral_store import update_deferrals
from adapters.cosmos.errors import StoreError
from adapters.servicebus.deferred import DeferredReceiver
from adapters.servicebus.sender import SendError
from adapters.servicebus.settlement import ReceivedMessage, Settlement, body_bytes
from contracts.messages import PaymentNotification
from contracts.names import ORDERS_QUEUE, QUEUE_MAX_DELIVERY_COUNT
from contracts.parsing import InvalidMessage, parse
from contracts.store_retry import is_copy
from deferral.errors import DependencyUnavailable
from deferral.payment import MESSAGE_TYPE, PaymentOutcome, apply_notification
from deferral.retry import schedule_look_again, schedule_round
from deferral.tracking import (
    record_deferred,
    resolve,
    resolve_decided,
    resolve_gone,
    resolve_refused,
    settle_decided,
)
from dependencies import AppContext
from domain.deferral import (
    DeferralDocument,
    DeferralReason,
    DeferredEntry,
    EntryStatus,
    TooManyWaiting,
    absent_checked,
)
from domain.ids import alert_id
from domain.payments import notification_digest
from domain.records import PaymentReceived
from notifications.alerts import OwedAlert, raise_alert_after_write
from notifications.repeats import raise_once_per_problem
from observability.events import app_event
from orchestrators.raise_events import RaiseEvent

log = logging.getLogger(__name__)

# The message types that may be deferred on the orders queue.
DEFERRABLE: dict[str, type[PaymentNotification]] = {MESSAGE_TYPE: PaymentNotification}

Result = Literal["applied", "dead-lettered", "waiting", "retry-scheduled"]


@dataclass(frozen=True)
class Processed:
    result: Result
    order_id: str | None
    events: tuple[RaiseEvent, ...] = ()


_DEFERRED_STATE = 1  # ServiceBusMessageState.DEFERRED (the broker's MessageState uses the same value)
# A message this close to its time to live is fetched before it is decided (the old way, under its lock):
# decided unlocked, it could expire meanwhile, and a second processor's fetch would then find it gone and
# report it expired while the first applies it. Also covers the app's clock running behind the broker's.
EXPIRY_MARGIN = timedelta(minutes=10)


def _last_allowed_delivery(message: Any) -> bool:
    """One more abandon would let Service Bus dead-letter it (MaxDeliveryCountExceeded) on its own."""
    count = getattr(message, "delivery_count", None) or 0
    return int(count) + 1 >= QUEUE_MAX_DELIVERY_COUNT


def is_deferred(message: Any) -> bool:
    state = getattr(message, "state", None)
    return state is not None and int(state) == _DEFERRED_STATE


def has_expired(message: Any, now: datetime) -> bool:
    expires = getattr(message, "expires_at_utc", None)
    return expires is not None and expires <= now


def peek_at(receiver: DeferredReceiver, seq: int) -> Any | None:
    """Message ``seq`` as a peek shows it (no lock, no delivery counted), or None when it is not on the queue
    (a peek from ``seq`` returns the next message on, which is not it)."""
    peeked = next(iter(receiver.peek(1, seq)), None)
    return peeked if peeked is not None and int(peeked.sequence_number) == seq else None


def process_deferred(
    ctx: AppContext,
    receiver: DeferredReceiver,
    seq: int,
    *,
    round_number: int,
    order_id: str | None = None,
    owed: list[OwedAlert] | None,
) -> Processed | None:
    """Processes deferred message ``seq``: read by peeking (no lock, no delivery counted), decided and
    written in Cosmos DB, and only then fetched, to be settled as decided; a message left waiting is not
    fetched at all. Every fetch counts as a delivery: fetched first, each store or send failure (an
    abandon) wore the message out into ``MaxDeliveryCountExceeded``, applied or not (fault red team on
    3737d51). A message near its time to live (``EXPIRY_MARGIN``) is fetched first and decided under its
    lock (``process_fetched``).

    ``round_number``: the retry round this is (0: not a RetryDeferred round). ``order_id``: the order whose
    document tracks it, if the caller knows (to resolve its entry if its body no longer parses). A store
    or send failure propagates, the message untouched. None: the message is not on the queue deferred
    (gone, expired, or not deferred yet): the caller accounts for it (``account_for_absent``).

    ``owed``: the list of the alerts owed by the message the caller's trigger has in hand (an ``OrderSubmitted``,
    a ``RetryDeferred``), handed to the alert courier before that message is settled: a rejected notification's
    alert whose send fails goes there (``apply_notification``), and this message is settled as decided all the
    same. None (the peek sweep's timer): that send failure propagates, the message untouched."""
    peeked = peek_at(receiver, seq)
    if peeked is None or not is_deferred(peeked):
        return None
    if has_expired(peeked, ctx.clock.now() + EXPIRY_MARGIN):
        fetched = receiver.receive_deferred([seq])  # an expired message moves to the dead-letter queue
        return (
            process_fetched(ctx, receiver, fetched[0], round_number=round_number, order_id=order_id, owed=owed)
            if fetched
            else None
        )
    done, settle = _decide(ctx, peeked, round_number, order_id, fetched=False, owed=owed)
    if settle is not None:
        _settle(receiver, seq, settle)
    return done


def process_fetched(
    ctx: AppContext,
    receiver: DeferredReceiver,
    message: Any,
    *,
    round_number: int,
    order_id: str | None = None,
    owed: list[OwedAlert] | None,
) -> Processed:
    """``process_deferred`` for a message already fetched (locked to ``receiver``): settled as decided,
    abandoned if it is to wait (or if a store or send failure propagates)."""
    try:
        done, settle = _decide(ctx, message, round_number, order_id, fetched=True, owed=owed)
    except (StoreError, SendError, DependencyUnavailable):
        _abandon_quietly(receiver, message)
        raise
    if settle is None:
        receiver.abandon(message)  # stays deferred (dead-lettered if its time to live passed under the lock)
    else:
        _settled(receiver, message, settle)
    return done


def _decide(
    ctx: AppContext,
    message: Any,
    round_number: int,
    order_id: str | None,
    *,
    fetched: bool,
    owed: list[OwedAlert] | None,
) -> tuple[Processed, Settlement | None]:
    """What becomes of ``message`` (written to Cosmos DB first) and how it is to be settled (None: it
    stays deferred). ``fetched``: it is locked to this processor (a wait then spends a delivery)."""
    seq: int = message.sequence_number
    try:
        note = parse(body_bytes(message), DEFERRABLE)
    except InvalidMessage as bad:  # e.g. deferred before a contract rule it now breaks
        if order_id is not None:  # its entry is resolved, not left waiting (an expiry alert, the limit)
            resolve(ctx, order_id, seq, EntryStatus.DEAD_LETTERED, str(bad))
        app_event(
            "DeadLettered", f"deferred message #{seq}: {bad}", logging.WARNING, orderId=order_id, sequenceNumber=seq
        )
        return Processed("dead-lettered", order_id), Settlement.deadletter(bad.reason, bad.description)
    try:
        return _apply(ctx, message, note, round_number, fetched, owed)
    except TooManyWaiting as exc:  # untracked, and its order has too many waiting: not kept
        not_kept(ctx, seq, note.order_id, exc)
        return Processed("dead-lettered", note.order_id), Settlement.deadletter(exc.reason, str(exc))


def _apply(
    ctx: AppContext,
    message: Any,
    note: PaymentNotification,
    round_number: int,
    fetched: bool,
    owed: list[OwedAlert] | None,
) -> tuple[Processed, Settlement | None]:
    seq: int = message.sequence_number
    order_id = note.order_id
    # its alert, if owed, is this message's, settled here, not the one the trigger has in hand: handling that one
    # again (a redelivery, a copy) does not raise it again (notifications.alerts.hand_alerts_to_courier)
    mine: list[OwedAlert] | None = None if owed is None else []
    try:
        outcome = apply_notification(ctx, note, seq, owed=mine)
    except DependencyUnavailable as exc:
        return _still_unavailable(ctx, message, note, round_number, str(exc), fetched)
    finally:
        if owed is not None and mine:
            owed.extend(replace(item, raised_again=False) for item in mine)
    if outcome.kind == "order-missing":
        doc = record_deferred(
            ctx,
            order_id,
            message,
            MESSAGE_TYPE,
            DeferralReason.ORDER_NOT_SUBMITTED,
            note=note,
        )
        if doc.rejected_at is not None:  # its order was refused by admission control: it is not coming
            dead = rejected_order(ctx, note, seq, copy=is_copy(message.application_properties))
            if dead is not None:
                return Processed("dead-lettered", order_id), Settlement.deadletter(*dead)
            schedule_look_again(ctx, doc, seq)  # the refusal withdrawn meanwhile: its order is being accepted
        return Processed("waiting", order_id), None  # stays deferred, waiting for its order
    # a store-retry copy's originals (the same notification under other numbers) take its outcome in that write
    now = resolve_decided(ctx, note, seq, outcome, copy=is_copy(message.application_properties))
    if outcome.kind == "rejected":
        if now is EntryStatus.APPLIED:  # another processor applied it first: that outcome stands
            return Processed("applied", order_id), Settlement.complete()
        app_event(
            "DeadLettered", f"deferred #{seq}: {outcome.reason}", logging.WARNING, orderId=order_id, sequenceNumber=seq
        )
        return Processed("dead-lettered", order_id), Settlement.deadletter(outcome.reason, outcome.description)
    return Processed("applied", order_id, outcome.events), Settlement.complete()


def _still_unavailable(
    ctx: AppContext, message: Any, note: PaymentNotification, round_number: int, why: str, fetched: bool
) -> tuple[Processed, Settlement | None]:
    seq: int = message.sequence_number
    order_id = note.order_id
    # a message only peeked spends no delivery by waiting: its delivery count is no reason to give up
    if round_number >= ctx.settings.defer_max_rounds or (fetched and _last_allowed_delivery(message)):
        description = f"a dependency stayed unavailable through {round_number} retry rounds: {why}"
        gave_up = PaymentOutcome("rejected", reason=GAVE_UP, description=description)
        # a store-retry copy's originals take its give-up in that write, as any decision of a copy
        now = resolve_decided(ctx, note, seq, gave_up, copy=is_copy(message.application_properties))
        if now is EntryStatus.APPLIED:  # another processor applied it first: that outcome stands
            return Processed("applied", order_id), Settlement.complete()
        _alert_gave_up(ctx, order_id, seq, round_number, why)
        return Processed("dead-lettered", order_id), Settlement.deadletter(GAVE_UP, description)
    next_round = round_number + 1
    doc = record_deferred(
        ctx,
        order_id,
        message,
        MESSAGE_TYPE,
        DeferralReason.DEPENDENCY_UNAVAILABLE,
        rounds=next_round,
        note=note,
    )
    schedule_round(ctx, doc, seq)
    return Processed("retry-scheduled", order_id), None  # stays deferred until the next round


def settle_as_recorded(receiver: DeferredReceiver, entry: DeferredEntry) -> bool:
    """A resolved entry whose message is still deferred (its settlement was lost): settled as recorded,
    never decided again (a second decision could contradict the outcome operators were told of).
    ``Applied`` completes it, ``DeadLettered`` dead-letters it with the recorded reason. False: it is
    not resolved so (``Deferred``, or ``Expired``, which a message still here contradicts: decide it)."""
    settle = recorded_settlement(entry)
    if settle is None:
        return False
    _settle(receiver, entry.sequence_number, settle)
    return True


def recorded_settlement(entry: DeferredEntry) -> Settlement | None:
    """How a message whose entry is resolved is settled as recorded: ``Applied`` completed, ``DeadLettered``
    dead-lettered with the recorded reason; None for an entry not resolved so (``Deferred``, ``Expired``)."""
    if entry.status is EntryStatus.APPLIED:
        return Settlement.complete()
    if entry.status is EntryStatus.DEAD_LETTERED:
        code, _, rest = entry.detail.partition(": ")
        reason = code if re.fullmatch(r"[A-Z][A-Za-z]{2,63}", code) else "DeadLettered"
        return Settlement.deadletter(reason, rest if reason == code else entry.detail)
    return None


def finish_in_hand(ctx: AppContext, order_id: str, entry: DeferredEntry) -> Settlement | None:
    """A delivery of the message of ``entry``, resolved already (an earlier delivery decided it and its settlement
    was lost), met a store failure before deciding it again: it is settled as recorded where it is, its alert sent
    again under the same id (collapsed if it went out), needing neither the store nor a send that must succeed. A
    refused copy's originals took its outcome in its own write (``rejected_order``). None: not resolved so."""
    settle = recorded_settlement(entry)
    if settle is None:
        return None
    code, _, why = entry.detail.partition(": ")
    if entry.status is EntryStatus.DEAD_LETTERED and code == ORDER_REJECTED:
        _alert_rejected_order(ctx, order_id, entry.sequence_number, entry.notification_digest)
    elif entry.status is EntryStatus.DEAD_LETTERED and code == GAVE_UP:
        _alert_gave_up(ctx, order_id, entry.sequence_number, entry.rounds, why)
    return settle


def _settle(receiver: DeferredReceiver, seq: int, settle: Settlement) -> None:
    """Fetches ``seq`` to settle it as decided. Not returned (locked by another processor deciding the
    same, or gone meanwhile): its entry is resolved already, and the peek sweep settles a resolved entry
    whose message is still deferred."""
    fetched = receiver.receive_deferred([seq])
    if not fetched:
        log.info("deferred #%s: decided (%s) but not fetched to settle; left to the peek sweep", seq, settle.kind)
        return
    _settled(receiver, fetched[0], settle)


def _settled(receiver: DeferredReceiver, message: Any, settle: Settlement) -> None:
    if settle.kind == "complete":
        receiver.complete(message)
    else:
        receiver.dead_letter(message, settle.reason or "", settle.description or "")


ORDER_REJECTED = "OrderRejected"
GAVE_UP = "DependencyUnavailable"  # the dead-letter reason of a message whose retry rounds ran out


def rejected_order(ctx: AppContext, note: PaymentNotification, seq: int, *, copy: bool) -> tuple[str, str] | None:
    """A deferred notification whose order submission rejected (admission control): resolved as
    dead-lettered and listed among the notifications dead-lettered under the refusal (one write,
    ``resolve_refused``: flagged again if a later submission of the order is accepted), with an alert (after
    the write). For a store-retry ``copy``, its original's entry (the same notification under another number,
    recorded and never deferred) takes that outcome too, as for any decision of a copy (``settle_decided``), in
    the same write: left waiting for a message that is gone, it was reported expired once a later submission of
    the order was accepted, or once found gone when a store failure came between the two writes. Returns the
    dead-letter reason and description for the caller to settle the message with,
    or None if the write found the refusal withdrawn (a submission of the order accepted since the caller
    read it): nothing written, no alert; the caller lets the message wait for its order, with a look again."""
    order_id = note.order_id
    description = f"order {order_id} was rejected by admission control (MAX_PENDING); nothing to apply the payment to"
    if not resolve_refused(ctx, order_id, seq, f"{ORDER_REJECTED}: {description}", copy_of=note if copy else None):
        log.info(
            "deferred #%s: order %s's refusal was withdrawn before the write; it waits for the order", seq, order_id
        )
        return None
    _alert_rejected_order(ctx, order_id, seq, notification_digest(note))
    app_event(
        "DeadLettered", f"deferred #{seq}: {ORDER_REJECTED}", logging.WARNING, orderId=order_id, sequenceNumber=seq
    )
    return ORDER_REJECTED, description


def _alert_rejected_order(ctx: AppContext, order_id: str, seq: int, digest: str = "", *, gone: bool = False) -> None:
    """``gone``: the message was no longer on the queue when its order's refusal looked for it (``account_for_absent``):
    in the dead-letter queue already, or a store-retry copy of it to be dead-lettered ``OrderRejected`` (with an alert
    of its own, under its own number) when it comes.

    One alert per notification, not per message: under the notification's digest (``digest``, what it says, its id
    included) when known, so two copies of it (the provider's resend past duplicate detection, a store-retry copy)
    are one alert, and an alert mark holds the later one (``notifications/repeats.py``: two deferred copies paged
    twice). Without a digest (an entry recorded before digests were kept, a message found gone), its number."""
    summary = f"order {order_id}: payment notification #{seq} dead-lettered, its order was rejected"
    if gone:
        summary = (
            f"order {order_id}: payment notification #{seq}, its order rejected, left the queue before it could be "
            "dead-lettered OrderRejected: see the orders dead-letter queue (expired or MaxDeliveryCountExceeded, "
            "or a copy of it dead-lettered OrderRejected)"
        )
    discriminator = f"n:{digest}" if digest else seq
    raise_once_per_problem(  # the alert's own id is its problem: two copies of one notification
        ctx.alert_marks,
        ctx.sender,
        alert_id("NotificationForRejectedOrder", order_id, discriminator),
        kind="NotificationForRejectedOrder",
        summary=summary,
        at=ctx.clock.now(),
        order_id=order_id,
        discriminator=discriminator,
        details={"sequenceNumber": seq},
    )


def _alert_gave_up(ctx: AppContext, order_id: str, seq: int, rounds: int, why: str) -> None:
    raise_alert_after_write(
        ctx.sender,
        kind="DeferredMessageGaveUp",
        summary=f"order {order_id}: deferred message #{seq} dead-lettered after {rounds} rounds",
        at=ctx.clock.now(),
        order_id=order_id,
        discriminator=seq,
        details={"sequenceNumber": seq, "rounds": rounds, "error": why},
    )


def finish_as_recorded(ctx: AppContext, receiver: DeferredReceiver, order_id: str, entry: DeferredEntry) -> bool:
    """A resolved entry (``Applied``, ``DeadLettered``) whose message is still deferred on the queue: the
    processor that decided it wrote the outcome and then failed before the message was settled, and perhaps
    before what follows the write (its response lost, the write landed, or a store failure after it: the
    processor handled again later finds the entry resolved). For a store-retry copy, its original's entry
    takes the recorded outcome (``settle_decided``, as when the copy is decided). The alert the recorded
    outcome owes is sent again, under the same id (collapsed if it went out within duplicate detection's 10
    minutes: ``NotificationForRejectedOrder``, ``DeferredMessageGaveUp``), and the message is settled as
    recorded (``settle_as_recorded``, never decided again). Returns whether the message was found deferred so."""
    if entry.status not in (EntryStatus.APPLIED, EntryStatus.DEAD_LETTERED):
        return False
    seq = entry.sequence_number
    peeked = peek_at(receiver, seq)
    if peeked is None or not is_deferred(peeked):
        return False
    code, _, why = entry.detail.partition(": ")
    rejected = entry.status is EntryStatus.DEAD_LETTERED
    if is_copy(peeked.application_properties):  # its original's entry takes its outcome, as on its decision
        try:
            note = parse(body_bytes(peeked), DEFERRABLE)
        except InvalidMessage:
            pass
        else:
            outcome = (
                PaymentOutcome("rejected", reason=code, description=why) if rejected else PaymentOutcome("applied")
            )
            settle_decided(ctx, note, seq, outcome, copy=True)
    if rejected and code == ORDER_REJECTED:
        _alert_rejected_order(ctx, order_id, seq, entry.notification_digest)
    elif rejected and code == GAVE_UP:
        _alert_gave_up(ctx, order_id, seq, entry.rounds, why)
    return settle_as_recorded(receiver, entry)


def _abandon_quietly(receiver: DeferredReceiver, message: Any) -> None:
    try:
        receiver.abandon(message)
    except Exception as exc:  # the lock will expire on its own; the message stays deferred
        log.info("could not release deferred message #%s: %s", message.sequence_number, exc)


def account_for_absent(
    ctx: AppContext, receiver: DeferredReceiver, order_id: str, seq: int, *, young: bool = False
) -> str:
    """A tracked, still-waiting sequence number that fetching did not return. Returns
    ``"present"`` (still on the queue: locked by someone, or not deferred yet), ``"applied"`` (it was
    applied, only the tracking missed it) or ``"expired"`` (gone: TTL or delivery count moved it to
    the dead-letter queue), which is recorded and alerted once: the entry is resolved, never retried.

    ``young``: its entry changed less than ``PEEK_SWEEP_AGE_MINUTES`` ago. A delivery of it may then have met a
    store failure after recording it and handed it over as a store-retry copy (a new sequence number, this
    one completed), due within a minute, whose outcome settles this entry: gone, it is ``"young"``, left
    waiting (the copy decides it, or the caller's ``RetryDeferred`` accounts for it once it is old: the peek
    sweep walks the queue's messages and never finds it), not reported expired and then corrected (a false
    ``DeferredMessageExpired`` alert; the RetryDeferred and ``make_room`` paths wait as long)."""
    if peek_at(receiver, seq) is not None:
        return "present"
    record = ctx.states.get(order_id)
    if record is not None and record.payment is not None and _applied_as(ctx, order_id, seq, record.payment):
        resolve(ctx, order_id, seq, EntryStatus.APPLIED, "applied (found on the state record)")
        return "applied"
    if young:
        log.info(
            "deferred #%s of order %s: not on the queue, its entry young: left for its copy or the sweep", seq, order_id
        )
        return "young"
    now_status, refused = resolve_gone(ctx, order_id, seq, "not on the queue when fetched (expired or dead-lettered)")
    if now_status is not EntryStatus.EXPIRED:  # another processor applied or dead-lettered it meanwhile
        return "applied" if now_status is EntryStatus.APPLIED else "resolved"
    if refused:  # its order refused: nothing to apply it to, as for the notifications dead-lettered under it
        _alert_rejected_order(ctx, order_id, seq, gone=True)
        app_event(
            "DeferredExpired",
            f"order {order_id}: deferred #{seq} gone, its order refused",
            orderId=order_id,
            sequenceNumber=seq,
            refused=True,
        )
        return "expired"
    raise_alert_after_write(
        ctx.sender,
        kind="DeferredMessageExpired",
        summary=(
            f"order {order_id}: deferred message #{seq} left the queue before it could be applied "
            "(expired, or dead-lettered: see the orders dead-letter queue)"
        ),
        at=ctx.clock.now(),
        order_id=order_id,
        severity="warning",
        discriminator=seq,
        details={"sequenceNumber": seq},
    )
    app_event("DeferredExpired", f"order {order_id}: deferred #{seq} expired", orderId=order_id, sequenceNumber=seq)
    return "expired"


def record_making_room(
    ctx: AppContext,
    order_id: str,
    message: ReceivedMessage,
    reason: DeferralReason,
    *,
    note: PaymentNotification,
    rounds: int = 0,
    recorded_by: str = "submission",
    receiver: DeferredReceiver | None = None,
) -> DeferralDocument:
    """``record_deferred`` of a new ``PaymentNotification``; if its order's document is full
    (``TooManyWaiting``), the waiting entries whose message has left the queue are accounted for first
    (``make_room``, on ``receiver`` or one of its own) and, if that resolved any, it is recorded after all.
    ``TooManyWaiting`` otherwise."""

    def record() -> DeferralDocument:
        return record_deferred(
            ctx, order_id, message, MESSAGE_TYPE, reason, note=note, rounds=rounds, recorded_by=recorded_by
        )

    try:
        return record()
    except TooManyWaiting:
        if not make_room(ctx, order_id, receiver):
            raise
    return record()


def make_room(ctx: AppContext, order_id: str, receiver: DeferredReceiver | None = None) -> bool:
    """The order's document has ``WAITING_LIMIT`` entries waiting. An entry can wait with no message behind
    it, which nothing else would ever resolve: its message left the queue (its time to live; or dead-lettered
    ``MaxDeliveryCountExceeded``, abandoned on every delivery before it was ever deferred) with no retry in
    flight and no submission of its order to come, or it was left so before a notification decided on
    delivery settled its own entry. So every waiting entry's message is looked for by its sequence number
    (a peek: no lock, no delivery counted), and one not on the queue is accounted for as everywhere else
    (``account_for_absent``: ``Applied`` if the state record shows it applied, else ``Expired`` with an
    alert). Only entries recorded at least ``PEEK_SWEEP_AGE_MINUTES`` ago, as the peek sweep looks only at
    messages that old: a younger one may have a store-retry copy of its message on the way (its original
    completed), which would be reported expired and then applied. At most once per
    ``PEEK_SWEEP_AGE_MINUTES`` per order, stamped on the document once the look is over
    (``absent_checked_at``): a flood of notifications for one order costs ``WAITING_LIMIT`` peeks a period,
    not a message, and a look cut short by a store or send failure (which propagates) does not use the
    period up. A receiver failure is logged (nothing resolved by it: the message is refused as before).
    Returns whether an entry was resolved."""
    now = ctx.clock.now()
    age = ctx.settings.peek_sweep_age
    doc = ctx.deferrals.get(order_id)
    if doc is None or not doc.absent_check_due(now, age):
        return False
    waiting = [e.sequence_number for e in doc.waiting() if e.updated_at <= now - age]
    resolved: list[int] = []
    try:
        opened = nullcontext(receiver) if receiver is not None else ctx.deferred.open(ORDERS_QUEUE)
        with opened as looking:
            for seq in waiting:
                if account_for_absent(ctx, looking, order_id, seq) != "present":
                    resolved.append(seq)
    except (StoreError, SendError):
        raise
    except Exception as exc:
        log.warning("order %s: waiting messages not looked for (%s); the new one is refused", order_id, exc)
    update_deferrals(ctx.deferrals, order_id, lambda d: absent_checked(d, now), now)
    app_event(
        "DeferredLookedFor",
        f"order {order_id}: {len(waiting)} waiting messages looked for on the queue, "
        f"{len(resolved)} no longer there: {resolved}",
        orderId=order_id,
        lookedFor=len(waiting),
        resolved=len(resolved),
    )
    return bool(resolved)


def _applied_as(ctx: AppContext, order_id: str, seq: int, payment: PaymentReceived) -> bool:
    """Whether the payment on the state record is this tracked message's: applied under its sequence
    number, or, the same notification (its id and digest), from a copy of it (``submission.store_outage``:
    a message handled again later gets a new sequence number, e.g. a redelivery of one already recorded
    here). Another notification under the same id is not this one: found gone, it is reported expired."""
    if payment.sequence_number == seq:
        return True
    doc = ctx.deferrals.get(order_id)
    entry = doc.entry(seq) if doc is not None else None
    return entry is not None and entry.carries(payment.notification_id, notification_digest(payment))


def dead_letter_not_kept(
    ctx: AppContext, receiver: DeferredReceiver, message: Any, order_id: str, exc: TooManyWaiting
) -> None:
    """A deferred message its order's document cannot track (``WAITING_LIMIT``): dead-lettered."""
    not_kept(ctx, message.sequence_number, order_id, exc)
    _settled(receiver, message, Settlement.deadletter(exc.reason, str(exc)))


def not_kept(ctx: AppContext, seq: int | None, order_id: str, exc: TooManyWaiting) -> None:
    """Logs and alerts a message dead-lettered ``TooManyDeferred`` (one alert id per order: Service Bus keeps
    one every duplicate-detection window, 10 minutes): the real payment may be among those refused, to be
    found in the dead-letter queue."""
    app_event("DeadLettered", f"message #{seq}: {exc}", logging.WARNING, orderId=order_id, sequenceNumber=seq)
    raise_alert_after_write(
        ctx.sender,
        kind=exc.reason,
        summary=f"order {order_id}: payment notifications dead-lettered, too many deferred for it already",
        at=ctx.clock.now(),
        order_id=order_id,
        severity="warning",
        discriminator=order_id,  # one id per order: duplicate detection keeps one every 10 minutes
        details={"sequenceNumber": seq},
    )
