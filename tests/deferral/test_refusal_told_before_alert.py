"""A refused order's submitter is told ``Rejected`` before the ``OrderRejected`` alert is sent
(submission/intake.py ``_reject``): the status does not depend on the alert queue (a failed status send
goes to the courier), so an alert queue failing on every delivery (a Service Bus blip of a few seconds:
Service Bus redelivers at once, and 5 deliveries are soon used up) cannot leave the refused order's
submitter untold. Found by a red team: the alert went first, and the message was dead-lettered
``MaxDeliveryCountExceeded`` with nobody told."""

from __future__ import annotations

import pytest

from contracts.names import ORDERS_QUEUE
from tests.deferral.support import deliver, order
from tests.deferral.test_refusal_written_first import Cap, submit, told

pytestmark = pytest.mark.cosmos


def test_a_refused_order_is_told_rejected_though_its_alert_cannot_be_sent(functions, ctx, broker, monkeypatch):
    """Input: p1 refused (cap full) while sends to ``operator-alerts`` fail (a Service Bus blip of a few
    seconds: 5 failures in a row); sends to the submitter's status queue work.

    Expected (an order nobody was told about is never silently dropped; the refusal is written, so it stands):
    the submitter is told ``Rejected`` (the status does not depend on the alert queue; the courier covers a
    failed status send), the alert follows when the send works.
    Actual: ``_reject`` sends the alert before the status and abandons when it fails; Service Bus redelivers
    at once, so the 5 deliveries are used up in the blip and the OrderSubmitted is dead-lettered
    ``MaxDeliveryCountExceeded``: refusal written, waiting notifications dead-lettered, the submitter told
    nothing, no ``OrderRejected`` alert (only the dead-letter queue's)."""
    from contracts.names import OPERATOR_ALERTS_QUEUE
    from tests.contexts import context_with
    from tests.deferral.test_refusal_written_first import SendsFailing

    Cap(monkeypatch, full=True)
    context_with(ctx, sender=SendsFailing(broker, OPERATOR_ALERTS_QUEUE, times=5))
    submit(broker, order())
    deliveries = 0
    while deliver(functions, broker):
        deliveries += 1
    dead = [d.reason for d in broker.dead_letters(ORDERS_QUEUE)]
    assert ctx.deferrals.get("p1").rejected_at is not None  # the refusal is written
    assert told(broker) == ["Rejected"], f"{deliveries} deliveries, orders dead letters {dead}, told {told(broker)}"
