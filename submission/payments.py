"""``PaymentNotification``: the payment provider says a prepaid order was paid. It may arrive

* before its order exists: it is deferred, its sequence number recorded under the order id, and
  ``OrderSubmitted`` fetches and applies it later (``deferral.recovery``);
* after the order exists, before the payment step: it is written onto the state record, where the
  payment step finds it;
* while the payment step waits: written onto the state record AND raised to the waiting
  orchestration as the ``PaymentNotified`` event.

A notification that does not match its order (amount, currency, not prepaid, a second payment, a
closed order) is dead-lettered with a reason and an operator alert. If the order database cannot be
read (a dependency, not the state store) the message is deferred and retried by ``RetryDeferred``;
if the state store is down the message is abandoned for redelivery."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from adapters.cosmos.errors import ConcurrencyExhausted, EtagMismatch, StoreUnavailable
from adapters.cosmos.state_store import update_once
from adapters.servicebus.settlement import ReceivedMessage, Settlement
from contracts.messages import PaymentNotification
from contracts.names import PAYMENT_NOTIFIED_EVENT
from deferral.errors import DependencyUnavailable
from deferral.retry import ORDER_LOOK_AGAIN, schedule_retry
from deferral.tracking import DeferralUnavailable, record_deferred, resolve
from dependencies import AppContext
from domain.deferral import DeferralReason, EntryStatus
from domain.payments import decide_payment, event_data, received, waiting_instance, with_payment
from domain.records import StateRecord
from notifications.alerts import raise_alert
from observability.events import app_event
from submission.result import IntakeResult, RaiseEvent

log = logging.getLogger(__name__)

MESSAGE_TYPE = "PaymentNotification"


@dataclass(frozen=True)
class PaymentOutcome:
    kind: Literal["applied", "duplicate", "order-missing", "rejected"]
    events: tuple[RaiseEvent, ...] = ()
    reason: str = ""
    description: str = ""

    def settlement(self) -> Settlement:
        if self.kind == "rejected":
            return Settlement.deadletter(self.reason, self.description)
        return Settlement.complete()


def _order(ctx: AppContext, order_id: str) -> dict[str, Any] | None:
    try:
        return ctx.orders.get(order_id)
    except StoreUnavailable as exc:
        raise DependencyUnavailable(f"order database unavailable: {exc}") from exc


def _events(record: StateRecord) -> tuple[RaiseEvent, ...]:
    instance = waiting_instance(record)
    if instance is None or record.payment is None:
        return ()
    return (RaiseEvent(instance, PAYMENT_NOTIFIED_EVENT, event_data(record.payment)),)


def apply_notification(ctx: AppContext, note: PaymentNotification, sequence_number: int | None) -> PaymentOutcome:
    """Applies ``note`` to its order's state record (conditional replace, re-decided on a lost race).
    Raises ``StoreUnavailable`` (state store down) or ``DependencyUnavailable`` (order database down)."""
    now = ctx.clock.now()
    for _ in range(5):
        record = ctx.states.get(note.order_id)
        if record is None:
            return PaymentOutcome("order-missing")
        order = _order(ctx, note.order_id)
        if order is None:  # a state record without its order cannot be: the order is written first
            return PaymentOutcome("order-missing")
        decision = decide_payment(record, order, note)
        if decision.kind == "duplicate":
            return PaymentOutcome("duplicate", _events(record))
        if decision.kind == "reject":
            raise_alert(
                ctx.sender,
                kind=decision.reason,
                summary=decision.description,
                at=now,
                order_id=note.order_id,
                discriminator=note.notification_id,
                details={"notificationId": note.notification_id, "sequenceNumber": sequence_number},
            )
            return PaymentOutcome("rejected", reason=decision.reason, description=decision.description)
        try:
            written = update_once(
                ctx.states, record, lambda r: with_payment(r, received(note, sequence_number, now), now)
            )
        except EtagMismatch:
            continue  # the orchestration (or another delivery) wrote first: decide again
        app_event(
            "PaymentApplied",
            f"order {note.order_id}: payment notification {note.notification_id} applied",
            orderId=note.order_id,
            notificationId=note.notification_id,
            sequenceNumber=sequence_number,
            waiting=waiting_instance(written) is not None,
        )
        return PaymentOutcome("applied", _events(written))
    raise ConcurrencyExhausted(f"order {note.order_id}: the payment notification kept losing races")


def payment_notification(ctx: AppContext, note: PaymentNotification, message: ReceivedMessage) -> IntakeResult:
    """The handler registered for ``PaymentNotification`` on the ``orders`` queue."""
    try:
        try:
            outcome = apply_notification(ctx, note, message.sequence_number)
        except DependencyUnavailable as exc:
            return defer_for_retry(ctx, note.order_id, message, str(exc))
        if outcome.kind == "order-missing":
            return _defer_until_order(ctx, note, message)
    except DeferralUnavailable as exc:
        log.warning("%s %s: %s; abandoning", MESSAGE_TYPE, message.message_id, exc)
        return IntakeResult(Settlement.abandon(str(exc)))
    return IntakeResult(outcome.settlement(), events=outcome.events)


def defer_for_retry(ctx: AppContext, order_id: str, message: ReceivedMessage, why: str) -> IntakeResult:
    """Round 1 of retrying a message whose dependency is down: record, schedule RetryDeferred, defer.
    The retry is sent before the message is deferred: if the send fails the message is abandoned."""
    if message.sequence_number is None:
        return IntakeResult(Settlement.abandon(why))
    record_deferred(ctx, order_id, message, MESSAGE_TYPE, DeferralReason.DEPENDENCY_UNAVAILABLE, rounds=1)
    schedule_retry(ctx, order_id, message.sequence_number, message.message_id or "", 1)
    log.warning("%s %s deferred for a retry: %s", MESSAGE_TYPE, message.message_id, why)
    return IntakeResult(Settlement.defer())


def _defer_until_order(ctx: AppContext, note: PaymentNotification, message: ReceivedMessage) -> IntakeResult:
    """The order does not exist yet: record the sequence number, then look once more (the order may
    have been submitted meanwhile, and its submission may have looked for deferred messages before
    this one was recorded); still missing -> defer."""
    if message.sequence_number is None:
        return IntakeResult(Settlement.abandon("no sequence number to defer by"))
    doc = record_deferred(ctx, note.order_id, message, MESSAGE_TYPE, DeferralReason.ORDER_NOT_SUBMITTED)
    try:
        outcome = apply_notification(ctx, note, message.sequence_number)
    except DependencyUnavailable as exc:
        return defer_for_retry(ctx, note.order_id, message, str(exc))
    if outcome.kind == "order-missing":
        if doc.rejected_at is not None:
            from deferral.apply import rejected_order

            return IntakeResult(Settlement.deadletter(*rejected_order(ctx, note.order_id, message.sequence_number)))
        # One look again shortly: an order submitted concurrently may have looked for deferred
        # messages before this one was deferred (then only the peek sweep, minutes later, would find it).
        schedule_retry(ctx, note.order_id, message.sequence_number, message.message_id or "", 1, ORDER_LOOK_AGAIN)
        return IntakeResult(Settlement.defer())
    status = EntryStatus.DEAD_LETTERED if outcome.kind == "rejected" else EntryStatus.APPLIED
    resolve(ctx, note.order_id, message.sequence_number, status, outcome.reason)
    return IntakeResult(outcome.settlement(), events=outcome.events)
