"""What a ``PaymentNotification`` means for its order: pure decisions over the state record and the
order, no I/O, no clock.

A notification is applied by writing it onto the state record (``payment``); the scheduler's payment
step of a prepaid order reads it there (``begin_step`` returns it) or, if the step is already
waiting, receives it as the ``PaymentNotified`` event. Both sides write the same document with a
conditional replace, so one of them always sees the other: either the notification is on the record
when the step begins, or the step is on the record when the notification is written.

A notification is the same as another (a repeat, completed as a duplicate) only when everything that
matters of it is the same: its ``notificationId``, amount, currency and provider reference. The same id
saying anything else is a conflict (``ConflictingNotification``): dead-lettered with an alert, never
taken for a repeat, as an ``OrderSubmitted`` under a known order id with other data is
(``ConflictingOrderData``)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal, Protocol

from domain.records import PAYMENT_NOTIFIED, PaymentReceived, StateRecord
from domain.states import ProcessState, StepStatus
from domain.workflow import prepaid_step

SUBMISSION = "submission"
# States in which a payment can still be used: the order has not finished and was not undone.
_PAYABLE = frozenset({ProcessState.PENDING, ProcessState.PROCESSING, ProcessState.ERROR})


def money(amount_cents: int, currency: str) -> str:
    """An amount in minor units as an operator reads it: ``158208, "EUR"`` -> ``1582.08 EUR`` (the app's
    amounts are hundredths of the currency, as the console shows ``totalCents``)."""
    return f"{Decimal(amount_cents).scaleb(-2):.2f} {currency}"


def _total_text(total: Any, currency: Any) -> str:
    """The order's total as ``money`` shows it (as stored, should the order say something else)."""
    if isinstance(total, int) and not isinstance(total, bool) and isinstance(currency, str):
        return money(total, currency)
    return f"{total} {currency}"


# The dead-letter reason (and alert kind) of a notification under the id of one already applied, or already
# waiting, that says something else.
CONFLICTING_NOTIFICATION = "ConflictingNotification"


class NotificationFields(Protocol):
    """What makes two payment notifications the same one (a ``PaymentNotification`` and the
    ``PaymentReceived`` applied from one both have these fields)."""

    @property
    def notification_id(self) -> str: ...

    @property
    def amount_cents(self) -> int: ...

    @property
    def currency(self) -> str: ...

    @property
    def provider_reference(self) -> str: ...


class PaymentFacts(NotificationFields, Protocol):
    """What the rules read of a payment notification (``contracts.messages.PaymentNotification`` has
    these fields; the domain does not import the message contract)."""

    @property
    def order_id(self) -> str: ...


@dataclass(frozen=True)
class PaymentDecision:
    kind: Literal["apply", "duplicate", "reject"]
    reason: str = ""  # the dead-letter reason of a rejection (a short code)
    description: str = ""
    details: dict[str, Any] = field(default_factory=dict)  # for the alert and the log event of a rejection


def fields_of(note: NotificationFields) -> dict[str, Any]:
    """What is compared of a notification, by its names in the message."""
    return {
        "notificationId": note.notification_id,
        "amountCents": note.amount_cents,
        "currency": note.currency,
        "providerReference": note.provider_reference,
    }


def notification_digest(note: NotificationFields) -> str:
    """A fixed-size fingerprint of ``fields_of(note)``: equal exactly when the notifications are the same
    one. Kept on a deferral entry (``domain.deferral.DeferredEntry.notification_digest``) to tell a copy
    of a notification from another notification under the same id."""
    text = json.dumps(list(fields_of(note).values()), ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:32]


def differences(applied: NotificationFields, note: NotificationFields) -> dict[str, tuple[Any, Any]]:
    """The fields in which ``note`` differs from ``applied``: name -> (applied, note). Empty: the same."""
    ours, theirs = fields_of(applied), fields_of(note)
    return {name: (ours[name], theirs[name]) for name in ours if ours[name] != theirs[name]}


def decide_payment(record: StateRecord, order: dict[str, Any], note: PaymentFacts) -> PaymentDecision:
    """Apply it, or it is a repeat of the one already applied (every field the same), or reject it
    (dead-letter + alert): another notification id is a second payment, the same id saying something
    else a conflict."""
    if record.payment is not None:
        if record.payment.notification_id == note.notification_id:
            changed = differences(record.payment, note)
            if not changed:
                return PaymentDecision("duplicate")
            return _conflict(record.payment, note, changed)
        return PaymentDecision(
            "reject",
            "PaymentAlreadyReceived",
            f"order {note.order_id} already has payment notification {record.payment.notification_id}; "
            f"{note.notification_id} ({money(note.amount_cents, note.currency)}) is a second payment to refund",
        )
    if not order.get("prepaid", False):
        return PaymentDecision(
            "reject",
            "OrderNotPrepaid",
            f"order {note.order_id} is not prepaid; its payment step charges, so notification "
            f"{note.notification_id} is not expected",
        )
    total, currency = order.get("totalCents"), order.get("currency")
    if note.amount_cents != total or note.currency != currency:
        return PaymentDecision(
            "reject",
            "PaymentAmountMismatch",
            f"notification {note.notification_id} says {money(note.amount_cents, note.currency)}; "
            f"order {note.order_id} totals {_total_text(total, currency)}",
        )
    if record.process_state not in _PAYABLE:
        return PaymentDecision(
            "reject",
            "OrderClosed",
            f"order {note.order_id} is {record.process_state.value}; notification {note.notification_id} "
            "cannot be used and must be refunded",
        )
    return PaymentDecision("apply")


def _conflict(applied: PaymentReceived, note: PaymentFacts, changed: dict[str, tuple[Any, Any]]) -> PaymentDecision:
    said = ", ".join(f"{name} {theirs!r} (applied: {ours!r})" for name, (ours, theirs) in changed.items())
    return PaymentDecision(
        "reject",
        CONFLICTING_NOTIFICATION,
        f"order {note.order_id}: payment notification {note.notification_id} was applied already and this one "
        f"under the same id says otherwise: {said}; not a repeat (if it is a payment, it is a second one to "
        "find at the provider and refund)",
        {
            "notificationId": note.notification_id,
            "differences": {name: {"applied": ours, "received": theirs} for name, (ours, theirs) in changed.items()},
            "applied": {**fields_of(applied), "sequenceNumber": applied.sequence_number},
        },
    )


def received(note: PaymentFacts, sequence_number: int | None, now: datetime) -> PaymentReceived:
    return PaymentReceived(
        notification_id=note.notification_id,
        amount_cents=note.amount_cents,
        currency=note.currency,
        provider_reference=note.provider_reference,
        received_at=now,
        sequence_number=sequence_number,
    )


def with_payment(record: StateRecord, payment: PaymentReceived, now: datetime) -> StateRecord:
    """The record with the payment applied (``processState`` stays, not fenced). An order the supervisor
    released to wait for this notification (``Pending``, ``paymentWaitSince``) becomes claimable at once:
    its not-before time is pulled to now, so it is not left waiting out the rest of its backoff."""
    waiting = record.process_state is ProcessState.PENDING and record.payment_wait_since is not None
    due = record.complete_by
    if waiting and record.locked_by is None and due is not None and due > now:
        due = now
    return record.with_changes(
        now,
        PAYMENT_NOTIFIED,
        SUBMISSION,
        f"{payment.notification_id} ({money(payment.amount_cents, payment.currency)})",
        payment=payment,
        complete_by=due,
    )


def waiting_instance(record: StateRecord) -> str | None:
    """The orchestration instance whose payment step is in flight (it waits for the notification),
    or None."""
    step = record.steps.get(prepaid_step().name)
    if (
        record.process_state is ProcessState.PROCESSING
        and record.locked_by is not None
        and record.current_step == prepaid_step().name
        and step is not None
        and step.status is StepStatus.IN_PROGRESS
    ):
        return record.locked_by
    return None
