"""Applying one deferred message fetched by sequence number on a receiver, and settling it on that
same receiver. Used by submission (when the order arrives), by ``RetryDeferred`` and by the peek sweep.

The outcome is written to the deferral document BEFORE the message is settled: if the settlement is
lost (lock lost, crash) the message stays deferred, and the peek sweep later finds a deferred message
whose entry is already resolved and settles it again (applying is idempotent)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from adapters.cosmos.errors import StoreError
from adapters.servicebus.deferred import DeferredReceiver
from adapters.servicebus.sender import SendError
from adapters.servicebus.settlement import body_bytes, dead_letter_text
from contracts.messages import PaymentNotification
from contracts.names import QUEUE_MAX_DELIVERY_COUNT
from contracts.parsing import InvalidMessage, parse
from deferral.errors import DependencyUnavailable
from deferral.payment import MESSAGE_TYPE, apply_notification
from deferral.retry import schedule_retry
from deferral.tracking import record_deferred, resolve
from dependencies import AppContext
from domain.deferral import DeferralReason, EntryStatus, TooManyWaiting
from notifications.alerts import raise_alert_after_write
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


def _last_allowed_delivery(message: Any) -> bool:
    """One more abandon would let Service Bus dead-letter it (MaxDeliveryCountExceeded) on its own."""
    count = getattr(message, "delivery_count", None) or 0
    return int(count) + 1 >= QUEUE_MAX_DELIVERY_COUNT


def process_fetched(ctx: AppContext, receiver: DeferredReceiver, message: Any, *, round_number: int) -> Processed:
    """Applies ``message`` (locked to ``receiver``) and settles it. ``round_number`` is the retry round
    this is (0: not a RetryDeferred round). A store or send failure abandons the message (it stays
    deferred) and propagates."""
    seq: int = message.sequence_number
    try:
        note = parse(body_bytes(message), DEFERRABLE)
    except InvalidMessage as bad:
        _dead_letter(receiver, message, bad.reason, bad.description)
        app_event("DeadLettered", f"deferred message #{seq}: {bad}", logging.WARNING, sequenceNumber=seq)
        return Processed("dead-lettered", None)
    try:
        return _apply(ctx, receiver, message, note, round_number)
    except TooManyWaiting as exc:  # untracked, and its order has too many waiting: not kept
        dead_letter_not_kept(receiver, message, note.order_id, exc)
        return Processed("dead-lettered", note.order_id)
    except (StoreError, SendError, DependencyUnavailable):
        _abandon_quietly(receiver, message)
        raise


def _apply(
    ctx: AppContext, receiver: DeferredReceiver, message: Any, note: PaymentNotification, round_number: int
) -> Processed:
    seq: int = message.sequence_number
    order_id = note.order_id
    try:
        outcome = apply_notification(ctx, note, seq)
    except DependencyUnavailable as exc:
        return _still_unavailable(ctx, receiver, message, order_id, round_number, str(exc))
    if outcome.kind == "order-missing":
        doc = record_deferred(ctx, order_id, message, MESSAGE_TYPE, DeferralReason.ORDER_NOT_SUBMITTED)
        if doc.rejected_at is not None:  # its order was refused by admission control: it is not coming
            reason, description = rejected_order(ctx, order_id, seq)
            _dead_letter(receiver, message, reason, description)
            return Processed("dead-lettered", order_id)
        receiver.abandon(message)  # stays deferred, waiting for its order
        return Processed("waiting", order_id)
    if outcome.kind == "rejected":
        resolve(ctx, order_id, seq, EntryStatus.DEAD_LETTERED, f"{outcome.reason}: {outcome.description}")
        _dead_letter(receiver, message, outcome.reason, outcome.description)
        app_event(
            "DeadLettered", f"deferred #{seq}: {outcome.reason}", logging.WARNING, orderId=order_id, sequenceNumber=seq
        )
        return Processed("dead-lettered", order_id)
    resolve(ctx, order_id, seq, EntryStatus.APPLIED, outcome.kind)
    receiver.complete(message)
    return Processed("applied", order_id, outcome.events)


def _still_unavailable(
    ctx: AppContext, receiver: DeferredReceiver, message: Any, order_id: str, round_number: int, why: str
) -> Processed:
    seq: int = message.sequence_number
    if round_number >= ctx.settings.defer_max_rounds or _last_allowed_delivery(message):
        description = f"a dependency stayed unavailable through {round_number} retry rounds: {why}"
        resolve(ctx, order_id, seq, EntryStatus.DEAD_LETTERED, description)
        _dead_letter(receiver, message, "DependencyUnavailable", description)
        raise_alert_after_write(
            ctx.sender,
            kind="DeferredMessageGaveUp",
            summary=f"order {order_id}: deferred message #{seq} dead-lettered after {round_number} rounds",
            at=ctx.clock.now(),
            order_id=order_id,
            discriminator=seq,
            details={"sequenceNumber": seq, "rounds": round_number, "error": why},
        )
        return Processed("dead-lettered", order_id)
    next_round = round_number + 1
    record_deferred(ctx, order_id, message, MESSAGE_TYPE, DeferralReason.DEPENDENCY_UNAVAILABLE, rounds=next_round)
    schedule_retry(ctx, order_id, seq, message.message_id or "", next_round)
    receiver.abandon(message)  # stays deferred until the next round
    return Processed("retry-scheduled", order_id)


ORDER_REJECTED = "OrderRejected"


def rejected_order(ctx: AppContext, order_id: str, seq: int) -> tuple[str, str]:
    """A deferred notification whose order submission rejected (admission control): resolved as
    dead-lettered, with an alert (after the write). Returns the dead-letter reason and description
    for the caller to settle the message with."""
    description = f"order {order_id} was rejected by admission control (MAX_PENDING); nothing to apply the payment to"
    resolve(ctx, order_id, seq, EntryStatus.DEAD_LETTERED, f"{ORDER_REJECTED}: {description}")
    raise_alert_after_write(
        ctx.sender,
        kind="NotificationForRejectedOrder",
        summary=f"order {order_id}: payment notification #{seq} dead-lettered, its order was rejected",
        at=ctx.clock.now(),
        order_id=order_id,
        discriminator=seq,
        details={"sequenceNumber": seq},
    )
    app_event(
        "DeadLettered", f"deferred #{seq}: {ORDER_REJECTED}", logging.WARNING, orderId=order_id, sequenceNumber=seq
    )
    return ORDER_REJECTED, description


def _abandon_quietly(receiver: DeferredReceiver, message: Any) -> None:
    try:
        receiver.abandon(message)
    except Exception as exc:  # the lock will expire on its own; the message stays deferred
        log.info("could not release deferred message #%s: %s", message.sequence_number, exc)


def account_for_absent(ctx: AppContext, receiver: DeferredReceiver, order_id: str, seq: int) -> str:
    """A tracked, still-waiting sequence number that fetching did not return. Returns
    ``"present"`` (still on the queue: locked by someone, or not deferred yet), ``"applied"`` (it was
    applied, only the tracking missed it) or ``"expired"`` (gone: TTL or delivery count moved it to
    the dead-letter queue), which is recorded and alerted once: the entry is resolved, never retried."""
    peeked = receiver.peek(1, seq)
    if peeked and peeked[0].sequence_number == seq:
        return "present"
    record = ctx.states.get(order_id)
    if record is not None and record.payment is not None and record.payment.sequence_number == seq:
        resolve(ctx, order_id, seq, EntryStatus.APPLIED, "applied (found on the state record)")
        return "applied"
    resolve(ctx, order_id, seq, EntryStatus.EXPIRED, "not on the queue when fetched (expired or dead-lettered)")
    raise_alert_after_write(
        ctx.sender,
        kind="DeferredMessageExpired",
        summary=f"order {order_id}: deferred message #{seq} expired before it could be applied",
        at=ctx.clock.now(),
        order_id=order_id,
        severity="warning",
        discriminator=seq,
        details={"sequenceNumber": seq},
    )
    app_event("DeferredExpired", f"order {order_id}: deferred #{seq} expired", orderId=order_id, sequenceNumber=seq)
    return "expired"


def dead_letter_not_kept(receiver: DeferredReceiver, message: Any, order_id: str, exc: TooManyWaiting) -> None:
    """A deferred message its order's document cannot track (``WAITING_LIMIT``): dead-lettered."""
    seq = message.sequence_number
    _dead_letter(receiver, message, exc.reason, str(exc))
    app_event("DeadLettered", f"deferred #{seq}: {exc}", logging.WARNING, orderId=order_id, sequenceNumber=seq)


def _dead_letter(receiver: DeferredReceiver, message: Any, reason: str, description: str) -> None:
    receiver.dead_letter(message, *dead_letter_text(reason, description))
