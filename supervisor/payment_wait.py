"""Waiting for a prepaid order's payment notification: the supervisor's side (``domain/payment_wait.py``
decides, ``domain.transitions.wait_for_payment`` moves the record).

An expired attempt whose prepaid payment step waited for the notification is released without
counting it (``SupervisorPaymentWait``), until ``PAYMENT_WAIT_MINUTES`` have passed since the step first
waited; then the order is given up through the usual escalation, with a ``lastError`` saying that no
payment notification came (``SupervisorPaymentWaitExceeded``). The submitter hears "waiting for the
payment notification" once per wait, from the write that began it."""

from __future__ import annotations

import logging
from datetime import datetime

from dependencies import AppContext
from domain.payment_wait import PaymentWait, awaited_payment, payment_wait
from domain.records import StateRecord
from domain.timefmt import text_or_none, to_text
from observability.events import app_event
from supervisor.outage import say_waiting


def payment_verdict(ctx: AppContext, record: StateRecord, now: datetime) -> PaymentWait | None:
    """None when the expired attempt did not wait for a payment notification, or waiting is off
    (``PAYMENT_WAIT_MINUTES=0``); else when to claim the order again, or that the wait is over. Reads the
    order (one point read, only for an attempt that ended at the start of the payment step): a charged
    order's step looks the same on the record. A read that fails raises: the record is left to the next
    run, uncounted."""
    settings = ctx.settings
    if not settings.payment_wait or not awaited_payment(record):
        return None
    order = ctx.orders.get(record.order_id)
    if order is None or not order.get("prepaid"):
        return None
    jitter = ctx.rng.uniform(0.5, 1.0)
    return payment_wait(
        record, now, settings.payment_wait, settings.retry_backoff_base, settings.retry_backoff_max, jitter
    )


def released(
    ctx: AppContext, before: StateRecord, written: StateRecord, expired: str | None, wait: PaymentWait
) -> None:
    """Logs the release and, when ``written`` began the wait (``before`` was not waiting yet) and the
    notification is still missing, tells the submitter once."""
    app_event(
        "SupervisorPaymentWait",
        f"order {written.order_id}: {wait.reason}; retry not before {text_or_none(written.complete_by)}, "
        "not counted as a failure",
        orderId=written.order_id,
        instanceId=expired,
        attempt=written.attempt,
        failureCount=written.failure_count,
        notBefore=to_text(wait.until),
        waitingSince=to_text(wait.since),
        paid=wait.paid,
    )
    if before.payment_wait_since is None and not wait.paid:
        say_waiting(ctx, written, "Processing", wait.reason)


def gave_up(written: StateRecord, expired: str | None, wait: PaymentWait) -> None:
    """Logs that the bound gave the order up (before the escalation's own event)."""
    app_event(
        "SupervisorPaymentWaitExceeded",
        f"order {written.order_id}: {written.last_error}",
        logging.WARNING,
        orderId=written.order_id,
        instanceId=expired,
        attempt=written.attempt,
        waitingSince=to_text(wait.since),
        state=str(written.process_state),
    )
