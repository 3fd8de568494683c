"""What a ``PaymentNotification`` means for its order: pure decisions over the state record and the
order, no I/O, no clock.

A notification is applied by writing it onto the state record (``payment``); the scheduler's payment
step of a prepaid order reads it there (``begin_step`` returns it) or, if the step is already
waiting, receives it as the ``PaymentNotified`` event. Both sides write the same document with a
conditional replace, so one of them always sees the other: either the notification is on the record
when the step begins, or the step is on the record when the notification is written."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from domain.records import PaymentReceived, StateRecord
from domain.states import ProcessState, StepStatus
from domain.workflow import prepaid_step

SUBMISSION = "submission"
# States in which a payment can still be used: the order has not finished and was not undone.
_PAYABLE = frozenset({ProcessState.PENDING, ProcessState.PROCESSING, ProcessState.ERROR})


class PaymentFacts(Protocol):
    """What the rules read of a payment notification (``contracts.messages.PaymentNotification`` has
    these fields; the domain does not import the message contract)."""

    @property
    def order_id(self) -> str: ...

    @property
    def notification_id(self) -> str: ...

    @property
    def amount_cents(self) -> int: ...

    @property
    def currency(self) -> str: ...

    @property
    def provider_reference(self) -> str: ...


@dataclass(frozen=True)
class PaymentDecision:
    kind: Literal["apply", "duplicate", "reject"]
    reason: str = ""  # the dead-letter reason of a rejection (a short code)
    description: str = ""


def decide_payment(record: StateRecord, order: dict[str, Any], note: PaymentFacts) -> PaymentDecision:
    """Apply it, or it is a repeat of the one already applied, or reject it (dead-letter + alert)."""
    if record.payment is not None:
        if record.payment.notification_id == note.notification_id:
            return PaymentDecision("duplicate")
        return PaymentDecision(
            "reject",
            "PaymentAlreadyReceived",
            f"order {note.order_id} already has payment notification {record.payment.notification_id}; "
            f"{note.notification_id} ({note.amount_cents} {note.currency}) is a second payment to refund",
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
            f"notification {note.notification_id} says {note.amount_cents} {note.currency}; "
            f"order {note.order_id} totals {total} {currency}",
        )
    if record.process_state not in _PAYABLE:
        return PaymentDecision(
            "reject",
            "OrderClosed",
            f"order {note.order_id} is {record.process_state.value}; notification {note.notification_id} "
            "cannot be used and must be refunded",
        )
    return PaymentDecision("apply")


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
    """The record with the payment applied; nothing else changes (``processState`` stays, not fenced)."""
    return record.with_changes(
        now,
        "PaymentNotified",
        SUBMISSION,
        f"{payment.notification_id} ({payment.amount_cents} {payment.currency})",
        payment=payment,
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
