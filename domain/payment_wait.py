"""A prepaid order's wait for its payment notification, as the supervisor reads an expired attempt.
Pure: no I/O, no clock.

A prepaid order's payment step does not charge: it captures against the provider's
``PaymentNotification``, and waits for it until the step's deadline (``orchestrators/payment_wait.py``).
A notification held up on its way (a store-retry copy behind a queue's backlog after a Cosmos DB
outage, a handler that raised its event after the deadline) is neither the service's failure nor the
order's: the supervisor releases such an attempt without counting it (``transitions.wait_for_payment``:
``Pending`` again, ``failureCount`` unchanged), up to ``PAYMENT_WAIT_MINUTES`` from the moment the
step first waited (``paymentWaitSince``, on the record), then gives the order up saying so, through
the usual escalation (compensation before the pivot, else ``Error`` and an alert)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from domain.records import PAYMENT_NOTIFIED, StateRecord, last_move_at
from domain.states import StepStatus
from domain.timefmt import to_text
from domain.transitions import STEP_STARTED
from domain.workflow import prepaid_step

WAITING_FOR_PAYMENT = "waiting for the payment notification"
PAID_LATE = "payment notification applied after the payment step began waiting; retried at once"
PAYMENT_WAIT_BOUND = "PAYMENT_WAIT_MINUTES"
PAYMENT_NOT_RECEIVED = "payment not received"  # how the lastError of an order the bound gave up begins


def awaited_payment(record: StateRecord) -> bool:
    """Whether the attempt holding ``record`` ended waiting for the payment notification: its last move
    is the start of the prepaid payment step (it reported nothing since: no transient failure, no review
    pause), and no notification was on the record when that step began (none yet, or one applied after
    the start, whose event came after the deadline or never reached the attempt). The caller checks
    that the order is prepaid: a charged order's payment step is started the same way."""
    name = prepaid_step().name
    state = record.steps.get(name)
    if (
        record.current_step != name
        or state is None
        or state.status is not StepStatus.IN_PROGRESS
        or state.attempt != record.attempt
    ):
        return False
    index = last_move_at(record)
    if index is None:
        return False
    last = record.history[index]
    if last.event != STEP_STARTED or last.by != record.locked_by:
        return False
    # history order, not timestamps: the step's start and the notification are writes of one document
    return record.payment is None or any(h.event == PAYMENT_NOTIFIED for h in record.history[index + 1 :])


@dataclass(frozen=True)
class PaymentWait:
    """The supervisor's verdict on an attempt that waited for its payment notification."""

    since: datetime  # the payment step first waited for the notification
    until: datetime  # not claimed again before
    bound: timedelta  # PAYMENT_WAIT_MINUTES
    paid: bool  # the notification is on the record now (applied after the step began): retried at once
    exceeded: bool  # no notification within the bound: the order is given up

    @property
    def reason(self) -> str:
        """The released order's ``lastError``."""
        return PAID_LATE if self.paid else WAITING_FOR_PAYMENT

    def gave_up(self, now: datetime) -> str:
        """The ``lastError`` of the order the bound gives up: what happened and what to check."""
        waited = (now - self.since).total_seconds() / 60
        return (
            f"{PAYMENT_NOT_RECEIVED}: no payment notification within {PAYMENT_WAIT_BOUND}="
            f"{self.bound.total_seconds() / 60:g} (waited {waited:.0f} min since {to_text(self.since)}); "
            "check with the payment provider whether the customer paid"
        )


def payment_wait(
    record: StateRecord, now: datetime, bound: timedelta, base: timedelta, cap: timedelta, jitter: float
) -> PaymentWait:
    """The verdict on an attempt that ``awaited_payment``: when its order is claimed again, or that the
    wait is over. The wait began when the payment step first waited (the step's start the first time,
    then ``paymentWaitSince``). Released orders come back after half the time waited so far, between
    ``base`` and ``cap``, times ``jitter`` (in [0.5, 1]: waiting orders spread out), never past the
    bound's end, so the order is given up about one step deadline after it; a notification applied
    meanwhile makes the order claimable at once (``domain.payments.with_payment``)."""
    started = record.steps[prepaid_step().name].started_at
    since = record.payment_wait_since or started
    if record.payment is not None:
        return PaymentWait(since, now, bound, paid=True, exceeded=False)
    waited = now - since
    delay = min(cap, max(base, waited / 2)) * jitter
    until = max(now, min(now + delay, since + bound))
    return PaymentWait(since, until, bound, paid=False, exceeded=waited >= bound)
