"""Deciding one deferred message by sequence number, and settling it on the same receiver.

Used by submission (when the order arrives), by ``RetryDeferred`` and by the peek sweep.

The outcome is written to the deferral document BEFORE the message is settled. If the settlement is lost (lock
lost, crash) the message stays deferred; the peek sweep later finds it with its entry resolved and settles it as
recorded (``settle_as_recorded``), never deciding it again.

Also here: what to do with a tracked message found gone (``account_for_absent``), and, when an order's document
is full, looking for its waiting messages on the queue before a new one is refused (``record_making_room``)."""

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
from contracts.messages import DeferredPaymentNotification, PaymentNotification
from contracts.names import ORDERS_QUEUE, QUEUE_MAX_DELIVERY_COUNT
from contracts.parsing import InvalidMessage, named_order_id, parse
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

# The message types that may be deferred on the orders queue, as a deferred one is read: by the rules of the release
# that deferred it, where a later one only forbids what the app stores and reads anyway
# (``contracts.messages.DeferredPaymentNotification``).
DEFERRABLE: dict[str, type[PaymentNotification]] = {MESSAGE_TYPE: DeferredPaymentNotification}

Result = Literal["applied", "dead-lettered", "waiting", "retry-scheduled"]


@dataclass(frozen=True)
class Processed:
    result: Result
    order_id: str | None
    events: tuple[RaiseEvent, ...] = ()


_DEFERRED_STATE = 1  # ServiceBusMessageState.DEFERRED (the broker's MessageState uses the same value)
# A message this close to its time to live is fetched and decided under its lock: decided unlocked, it could
# expire meanwhile and another processor would report it expired while this one applies it. Also covers the
# app's clock running behind the broker's.
EXPIRY_MARGIN = timedelta(minutes=10)


def _last_allowed_delivery(message: Any) -> bool:
    """One more abandon would let Service Bus dead-letter it (MaxDeliveryCountExceeded) on its own."""
    count = getattr(message, "delivery_count", None) or 0
    return int(count) + 1 >= QUEUE_MAX_DELIVERY_COUNT


def is_deferred(message: Any) -> bool:
    """True if the broker shows ``message`` as deferred."""
    state = getattr(message, "state", None)
    return state is not None and int(state) == _DEFERRED_STATE


def has_expired(message: Any, now: datetime) -> bool:
    expires = getattr(message, "expires_at_utc", None)
    return expires is not None and expires <= now


def peek_at(receiver: DeferredReceiver, seq: int) -> Any | None:
    """Returns message ``seq`` as a peek shows it (no lock, no delivery counted), or None if it is not on the queue.

    A peek from ``seq`` returns the next message on, hence the sequence-number check."""
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
    """Decides deferred message ``seq`` and settles it; None if it is not on the queue deferred.

    The message is peeked, decided and written to Cosmos DB, and only then fetched to be settled. A message left
    waiting is never fetched. Every fetch counts as a delivery, so peeking first keeps store and send failures
    from wearing it out into ``MaxDeliveryCountExceeded`` (tests/deferral/test_rounds_spend_no_deliveries.py).
    A message within ``EXPIRY_MARGIN`` of its time to live is fetched first and decided under its lock
    (``process_fetched``).

    - ``round_number``: the retry round (0: not a ``RetryDeferred`` round).
    - ``order_id``: the order whose document tracks it, if known, to resolve its entry if its body no longer
      parses.
    - ``owed``: the alerts owed by the message the caller's trigger has in hand; a rejected notification's alert
      whose send fails goes there and this message is settled all the same. None (the peek sweep): that send
      failure propagates.

    A store or send failure propagates with the message untouched. On None (gone, expired, not deferred yet) the
    caller accounts for it (``account_for_absent``)."""
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
    """``process_deferred`` for a message already fetched (locked to ``receiver``).

    Settled as decided; abandoned if it is to wait, or if a store or send failure propagates."""
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
    """Decides ``message``, writing the outcome to Cosmos DB, and returns how to settle it (None: stays deferred).

    ``fetched``: it is locked to this processor, so a wait spends a delivery."""
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
    """Applies a parsed notification: applied, rejected, or left waiting for its order."""
    seq: int = message.sequence_number
    order_id = note.order_id
    # An owed alert belongs to this message, settled here, not to the trigger's: handling that one again must not
    # raise it again (notifications.alerts.hand_alerts_to_courier).
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
    """Schedules the next retry round, or gives up after ``DEFER_MAX_ROUNDS`` (or the last allowed delivery)."""
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
    """Settles a resolved entry's still-deferred message as recorded; False if the entry is not so resolved.

    Never decided again: a second decision could contradict what operators were told. ``Expired`` returns False,
    since a message still here contradicts it and must be decided."""
    settle = recorded_settlement(entry)
    if settle is None:
        return False
    _settle(receiver, entry.sequence_number, settle)
    return True


def recorded_settlement(entry: DeferredEntry) -> Settlement | None:
    """Returns the settlement ``entry`` records: ``Applied`` completes, ``DeadLettered`` dead-letters; else None."""
    if entry.status is EntryStatus.APPLIED:
        return Settlement.complete()
    if entry.status is EntryStatus.DEAD_LETTERED:
        code, _, rest = entry.detail.partition(": ")
        reason = code if re.fullmatch(r"[A-Z][A-Za-z]{2,63}", code) else "DeadLettered"
        return Settlement.deadletter(reason, rest if reason == code else entry.detail)
    return None


def finish_in_hand(ctx: AppContext, order_id: str, entry: DeferredEntry) -> Settlement | None:
    """Settles the message in hand as ``entry`` records, when a store failure stops it being decided again.

    Used when an earlier delivery decided the message but its settlement was lost. Needs neither the store nor a
    send that must succeed: the alert is sent again under the same id, collapsing if it went out. None if the
    entry is not resolved."""
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
    """Fetches ``seq`` and settles it as decided.

    If the fetch returns nothing (another processor holds it, or it is gone), the entry is already resolved and
    the peek sweep settles it."""
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
    """Dead-letters a notification whose order was refused; returns the dead-letter reason and description.

    One write (``resolve_refused``) resolves the entry and lists it under the refusal, so it is flagged again if a
    later submission is accepted; the alert follows the write. For a store-retry ``copy``, its original's entry
    takes the outcome in the same write (``settle_decided``), or it would wait for a message that is gone and be
    reported expired. None if the write found the refusal withdrawn: nothing written, and the caller lets the
    message wait for its order."""
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
    """Raises ``NotificationForRejectedOrder``, once per notification rather than per message.

    The alert is keyed by the notification's ``digest`` when known, so copies of it (a provider's resend, a
    store-retry copy) are one alert and an alert mark holds the later ones (``notifications/repeats.py``).
    Without a digest (an older entry, a message found gone), by its number. ``gone``: the message had already
    left the queue (``account_for_absent``)."""
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


def is_entrys_message(order_id: str, entry: DeferredEntry, message: Any) -> bool:
    """Whether ``message``, found at ``entry``'s sequence number, is the one ``entry`` recorded for ``order_id``: its
    body names the order and, where the entry kept the notification's digest, carries that notification (a body that
    no longer parses, deferred before a rule it now breaks, by its order alone).

    A sequence number names one message only while its queue lives: ``orders`` deleted and created again numbers its
    messages from 1 again (docs/deploy.md), while the deferral documents keep the old numbers, and a hand edit may
    change one. Settled as an entry records it without this check, another order's waiting payment was dead-lettered
    by an operator's discard of this order's, or completed, unapplied, as this order's ``Applied`` (red team
    hostile62: tests/deferral/test_redteam62_sequence_number_reused.py)."""
    try:
        body = body_bytes(message)
    except InvalidMessage:
        return False
    if named_order_id(body) != order_id:
        return False
    if not entry.notification_digest:
        return True
    try:
        note = parse(body, DEFERRABLE)
    except InvalidMessage:
        return True
    return notification_digest(note) == entry.notification_digest


def finish_as_recorded(ctx: AppContext, receiver: DeferredReceiver, order_id: str, entry: DeferredEntry) -> bool:
    """Finishes a resolved entry whose message is still deferred; returns whether it was found so.

    The processor that decided it wrote the outcome, then failed before settling, perhaps before the steps after
    the write. So this redoes them: a store-retry copy's original takes the outcome (``settle_decided``), the
    owed alert is sent again under the same id (``NotificationForRejectedOrder``, ``DeferredMessageGaveUp``), and
    the message is settled as recorded (``settle_as_recorded``)."""
    if entry.status not in (EntryStatus.APPLIED, EntryStatus.DEAD_LETTERED):
        return False
    seq = entry.sequence_number
    peeked = peek_at(receiver, seq)
    if peeked is None or not is_deferred(peeked):
        return False
    if not is_entrys_message(order_id, entry, peeked):
        log.warning(
            "deferred #%s is not the message order %s recorded under it: not settled as recorded", seq, order_id
        )
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
    """Accounts for a tracked, waiting sequence number that fetching did not return.

    Returns ``"present"`` (still on the queue: locked, or not deferred yet), ``"applied"`` (applied, only the
    tracking missed it), ``"expired"`` (gone to the dead-letter queue: recorded and alerted once, never retried),
    or ``"resolved"`` (another processor resolved it meanwhile).

    ``young``: the entry changed less than ``PEEK_SWEEP_AGE_MINUTES`` ago, so a store-retry copy of its message
    (a new sequence number) may be on the way to decide it. Gone, it returns ``"young"`` and is left waiting,
    rather than raising a false ``DeferredMessageExpired``."""
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
    """Records a new deferred ``PaymentNotification``, making room first if its order's document is full.

    On ``TooManyWaiting``, ``make_room`` accounts for waiting entries whose message has left the queue; if it
    resolved any, the notification is recorded after all, else ``TooManyWaiting`` propagates."""

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
    """Resolves waiting entries of a full document whose message has left the queue; True if any was resolved.

    An entry can wait with no message behind it (expired, or dead-lettered before it was deferred), and nothing
    else would resolve it. So each waiting entry's message is peeked by sequence number and, if absent, accounted
    for (``account_for_absent``: ``Applied`` or ``Expired`` with an alert).

    - Only entries at least ``PEEK_SWEEP_AGE_MINUTES`` old: a younger one may have a store-retry copy on the way.
    - At most once per ``PEEK_SWEEP_AGE_MINUTES`` per order, stamped (``absent_checked_at``) once the look is
      over, so a flood costs ``WAITING_LIMIT`` peeks a period. A store or send failure propagates without using
      the period up; a receiver failure is logged and the new message refused."""
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
    """True if the payment on the state record came from this tracked message or a copy of it.

    A copy (``submission.store_outage``) has a new sequence number, so it matches on the notification's id and
    digest. Another notification under the same id does not match."""
    if payment.sequence_number == seq:
        return True
    doc = ctx.deferrals.get(order_id)
    entry = doc.entry(seq) if doc is not None else None
    return entry is not None and entry.carries(payment.notification_id, notification_digest(payment))


def dead_letter_not_kept(
    ctx: AppContext, receiver: DeferredReceiver, message: Any, order_id: str, exc: TooManyWaiting
) -> None:
    """Dead-letters a deferred message its order's document cannot track (``WAITING_LIMIT``)."""
    not_kept(ctx, message.sequence_number, order_id, exc)
    _settled(receiver, message, Settlement.deadletter(exc.reason, str(exc)))


def not_kept(ctx: AppContext, seq: int | None, order_id: str, exc: TooManyWaiting) -> None:
    """Logs and alerts a message dead-lettered ``TooManyDeferred``; the real payment may be among them.

    One alert id per order, so duplicate detection keeps one every 10 minutes."""
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
