"""Applying a ``PaymentNotification`` to its order's state record: the one step both the ``orders``
queue handler (``submission/payments.py``, when the notification arrives) and the deferred paths
(``deferral/apply.py``, when a deferred notification is fetched again) take. The rules it applies
are ``domain/payments.py``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from adapters.cosmos.errors import ConcurrencyExhausted, EtagMismatch, StoreUnavailable
from adapters.cosmos.mapping import to_document
from adapters.cosmos.state_store import update_once
from adapters.servicebus.settlement import Settlement
from contracts.messages import PaymentNotification
from contracts.names import PAYMENT_NOTIFIED_EVENT
from deferral.errors import DependencyUnavailable
from dependencies import AppContext
from domain.payments import decide_payment, notification_digest, received, waiting_instance, with_payment
from domain.records import StateRecord
from domain.states import ProcessState
from notifications.alerts import OwedAlert, raise_alert_owing
from observability.events import app_event
from orchestrators.raise_events import RaiseEvent

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
    return (RaiseEvent(instance, PAYMENT_NOTIFIED_EVENT, to_document(record.payment)),)


def apply_notification(
    ctx: AppContext, note: PaymentNotification, sequence_number: int | None, *, owed: list[OwedAlert] | None
) -> PaymentOutcome:
    """Applies ``note`` to its order's state record (conditional replace, re-decided on a lost race).
    Raises ``StoreUnavailable`` (state store down) or ``DependencyUnavailable`` (order database down).

    A rejected notification's alert (its ``reason``) whose send fails is added to ``owed``, the list the
    message's trigger hands to the alert courier before it settles the message (``raise_alert_owing``): raised,
    it abandoned the message in hand (the notification itself, or the ``OrderSubmitted`` or ``RetryDeferred``
    that fetched it deferred), and five failed sends in a row dead-lettered it ``MaxDeliveryCountExceeded``, the
    alert never sent. None (the peek sweep's timer): a failed send raises."""
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
            details = {"notificationId": note.notification_id, "sequenceNumber": sequence_number, **decision.details}
            app_event(
                "PaymentRejected",
                f"order {note.order_id}: payment notification {note.notification_id}: {decision.reason}",
                logging.WARNING,
                orderId=note.order_id,
                notificationId=note.notification_id,
                sequenceNumber=sequence_number,
                reason=decision.reason,
            )
            raise_alert_owing(
                owed,
                ctx.sender,
                kind=decision.reason,
                summary=decision.description,
                at=now,
                order_id=note.order_id,
                # one alert per distinct notification (a redelivery collapses), not one per notification id:
                # another notification under the same id is alerted on its own
                discriminator=f"{note.notification_id}:{notification_digest(note)}",
                details=details,
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
            # an order released to wait for it (domain.payment_wait) is claimable at once
            releasedFromWait=record.process_state is ProcessState.PENDING and record.payment_wait_since is not None,
        )
        return PaymentOutcome("applied", _events(written))
    raise ConcurrencyExhausted(f"order {note.order_id}: the payment notification kept losing races")
