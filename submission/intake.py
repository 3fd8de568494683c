"""Order intake: what happens to one message from the ``orders`` queue.

``handle_orders_message`` parses the body and hands the contract to the handler registered for its
``type`` in ``HANDLERS`` (one module per message type). ``submit_order`` is the handler of
``OrderSubmitted``: two idempotent writes keyed by the order id, in this order: the order (create-or-verify in
``orders``), then its state record (create in ``state``). They are not one transaction; a crash
between them leaves an order without a state record, and the redelivery of the same message
finds the identical order and creates the missing record. Nothing is ever overwritten."""

from __future__ import annotations

import logging
from typing import Any

from adapters.cosmos.errors import AlreadyExists, StoreUnavailable
from adapters.cosmos.order_store import CreateOutcome
from adapters.servicebus.sender import SendError
from adapters.servicebus.settlement import ReceivedMessage, Settlement, body_bytes
from contracts.messages import CancelOrder, Contract, OrderSubmitted, PaymentNotification, RetryDeferred
from contracts.parsing import InvalidMessage, parse
from deferral.recovery import recover_for_order, release_for_rejected_order
from dependencies import AppContext
from domain import transitions
from domain.records import StateRecord
from domain.states import ProcessState
from notifications.alerts import raise_alert, raise_alert_after_write
from notifications.status import publish_status_or_owe
from observability.events import app_event, state_transition
from orchestrators.starter import try_claim
from submission.cancellation import cancel_order
from submission.payments import payment_notification
from submission.result import Handler, IntakeResult
from submission.retry_deferred import retry_deferred

log = logging.getLogger(__name__)


def _order_submitted(ctx: AppContext, contract: Any, message: ReceivedMessage) -> IntakeResult:
    return submit_order(ctx, contract)


# Message type -> (contract, handler). A type not listed here is dead-lettered as UnknownType.
HANDLERS: dict[str, tuple[type[Contract], Handler]] = {
    "OrderSubmitted": (OrderSubmitted, _order_submitted),
    "PaymentNotification": (PaymentNotification, payment_notification),
    "RetryDeferred": (RetryDeferred, retry_deferred),
    "CancelOrder": (CancelOrder, cancel_order),
}


def handle_orders_message(ctx: AppContext, message: ReceivedMessage) -> IntakeResult:
    accepted = {kind: contract for kind, (contract, _) in HANDLERS.items()}
    try:
        contract = parse(body_bytes(message), accepted)
    except InvalidMessage as bad:
        app_event(
            "DeadLettered",
            f"orders message {message.message_id}: {bad}",
            logging.WARNING,
            messageId=message.message_id,
            reason=bad.reason,
        )
        return IntakeResult(Settlement.deadletter(bad.reason, bad.description))
    _, handler = HANDLERS[contract.type]  # type: ignore[attr-defined]
    try:
        return handler(ctx, contract, message)
    except (StoreUnavailable, SendError) as exc:
        # Nothing is half-done that a redelivery cannot finish: abandon and let Service Bus retry.
        log.warning("%s %s: %s; abandoning for redelivery", contract.type, message.message_id, exc)  # type: ignore[attr-defined]
        return IntakeResult(Settlement.abandon(str(exc)))


def submit_order(ctx: AppContext, order: OrderSubmitted) -> IntakeResult:
    now = ctx.clock.now()
    state = ctx.states.get(order.order_id)
    if state is None and _pending_full(ctx) and ctx.orders.get(order.order_id) is None:
        owed = publish_status_or_owe(
            ctx.sender,
            reply_to=order.reply_to,
            order_id=order.order_id,
            status="Rejected",
            attempt=0,
            at=now,
            reason=f"too many pending orders (MAX_PENDING={ctx.settings.max_pending}); submit again later",
        )
        app_event("OrderRejected", f"order {order.order_id} rejected: pending cap", orderId=order.order_id)
        raise_alert_after_write(
            ctx.sender,
            kind="OrderRejected",
            summary=f"order {order.order_id} rejected: {ctx.settings.max_pending} orders pending (MAX_PENDING)",
            at=now,
            order_id=order.order_id,
            severity="warning",
        )
        release_for_rejected_order(ctx, order.order_id)  # its waiting notifications: dead-lettered, alerted
        return IntakeResult(Settlement.complete(), owed=(owed,) if owed else ())

    outcome = ctx.orders.create_or_verify(order.order_document())
    if outcome is CreateOutcome.CONFLICT:
        description = f"order {order.order_id} exists with different data; the stored order is kept unchanged"
        raise_alert(
            ctx.sender,
            kind="ConflictingOrderData",
            summary=description,
            at=now,
            order_id=order.order_id,
            severity="warning",
            discriminator=order.order_id,
        )
        return IntakeResult(Settlement.deadletter("ConflictingOrderData", description))

    if state is None:
        state = _create_state(ctx, order)
        created = state.attempt == 0 and state.process_state is ProcessState.PENDING
    else:
        created = False
        log.info("order %s: duplicate submission, nothing written", order.order_id)
    # PaymentNotifications that arrived before this order were deferred: fetch and apply them now.
    recovered = recover_for_order(ctx, order.order_id)
    if recovered.applied:
        state = ctx.states.get(order.order_id) or state
    owed = None
    if state.process_state is ProcessState.PENDING and state.attempt == 0:
        # (Re)announce: a redelivery repeats it; MessageId collapses duplicates. A failed send never
        # abandons the accepted order: the status goes to the courier instead.
        owed = publish_status_or_owe(
            ctx.sender, reply_to=state.reply_to, order_id=order.order_id, status="Received", attempt=0, at=now
        )
    claim = try_claim(ctx, state) if created else None
    return IntakeResult(Settlement.complete(), claim, recovered.events, owed=(owed,) if owed else ())


def _pending_full(ctx: AppContext) -> bool:
    return ctx.counts.get(ProcessState.PENDING) >= ctx.settings.max_pending


def _create_state(ctx: AppContext, order: OrderSubmitted) -> StateRecord:
    record = transitions.new_record(order.order_id, order.reply_to, ctx.clock.now())
    try:
        written = ctx.states.create(record)
    except AlreadyExists:
        # A concurrent delivery of the same message created it first.
        existing = ctx.states.get(order.order_id)
        if existing is None:  # gone again between the two calls: let a redelivery start over
            raise StoreUnavailable(f"order {order.order_id}: the create found a record the read did not") from None
        return existing
    state_transition(None, written)
    ctx.counts.bump(ProcessState.PENDING, +1)
    return written
