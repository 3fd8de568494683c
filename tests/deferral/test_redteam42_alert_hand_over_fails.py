"""Red team (notifications, session 42): an alert owed by an ``OrderSubmitted`` whose hand-over to the alert courier
fails. The docs (docs/design.md, "Submission has no durable timer of its own") promise that an alert's hand-over that
fails "fails the trigger, so the message is redelivered and raises it again under the same id". A deferred payment
notification that the submission fetches and dead-letters (``PaymentAmountMismatch``) is settled while the
submission is handled: the redelivery found it gone, decided, and raised nothing; the alert was lost, with nothing
but a WARNING (``AlertOwed``) in the log. Now such an alert (``OwedAlert.raised_again`` False) is sent once more by
the trigger when Durable does not take it, and logged ``AlertUndelivered`` (ERROR, the alertsUndelivered log rule
pages on it) when that send fails too.

Through the registered ``submit_order`` trigger, the in-process broker and the Cosmos protocol server."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE
from orchestrators.names import DELIVER_ALERT
from tests.contexts import context_with
from tests.deferral.support import DurableClientStub, alerts, deferred_sequence_numbers, deliver, order, send
from tests.deferral.test_refusal_written_first import SendsFailing
from tests.deferral.test_rejected_payment_alert_owed import MISMATCH, WRONG, mismatch_alert_id

pytestmark = pytest.mark.cosmos


class DurableDown(DurableClientStub):
    """Durable's client, except that the alert courier cannot be started (the task hub unreachable)."""

    async def start_new(
        self, orchestration_function_name: str, instance_id: str | None = None, client_input: Any | None = None
    ) -> str:
        if orchestration_function_name == DELIVER_ALERT:
            raise RuntimeError("the task hub cannot be reached")
        return await super().start_new(orchestration_function_name, instance_id, client_input)

    async def get_status(self, instance_id: str) -> Any:
        raise RuntimeError("the task hub cannot be reached")


def _submitted_while_the_alert_fails(functions: Any, ctx: Any, broker: Any, sends_failing: int) -> int:
    """n-1 (2499 cents) deferred before order p1; p1 delivered while the alert courier cannot be started and the
    first ``sends_failing`` sends to ``operator-alerts`` fail. Returns n-1's sequence number."""
    send(broker, WRONG)
    assert deliver(functions, broker)
    [seq] = deferred_sequence_numbers(broker)
    context_with(ctx, sender=SendsFailing(broker, OPERATOR_ALERTS_QUEUE, times=sends_failing))
    send(broker, order())
    assert deliver(functions, broker, DurableDown())
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert (dead.sequence_number, dead.reason) == (seq, MISMATCH)  # n-1 settled while the submission was handled
    return seq


def test_a_deferred_notifications_alert_durable_does_not_take_is_sent_by_the_trigger(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """Input: as above, the send failing once (the handler's own).

    Expected: the trigger sends the ``PaymentAmountMismatch`` alert of n-1 itself, under its id, and completes the
    ``OrderSubmitted``. Before: the trigger failed for a redelivery that raised nothing: the alert never sent."""
    _submitted_while_the_alert_fails(functions, ctx, broker, sends_failing=1)

    assert [a["alertId"] for a in alerts(broker)] == [mismatch_alert_id()]
    assert not [m for m in broker.peek(ORDERS_QUEUE, 10) if m.subject != "RetryDeferred"]  # the order completed
    clock.advance(ctx.settings.start_grace)
    while deliver(functions, broker):  # nothing delivered again raises it a second time
        pass
    assert [a["alertId"] for a in alerts(broker)] == [mismatch_alert_id()]


def test_a_deferred_notifications_alert_neither_sent_nor_handed_over_is_logged_undelivered(
    functions: Any, ctx: Any, broker: Any, caplog: Any
) -> None:
    """Input: as above, every send to ``operator-alerts`` failing.

    Expected: ``AlertUndelivered`` (ERROR) with the alert's id, kind, order and summary: a log alert rule pages."""
    caplog.set_level(logging.INFO, logger="orders")
    _submitted_while_the_alert_fails(functions, ctx, broker, sends_failing=99)

    assert alerts(broker) == []
    [undelivered] = [r for r in caplog.records if getattr(r, "event", None) == "AlertUndelivered"]
    assert undelivered.levelno == logging.ERROR
    assert (undelivered.alertId, undelivered.alertKind, undelivered.orderId) == (mismatch_alert_id(), MISMATCH, "p1")
