"""A refusal by the pending cap tells its submitter ``Rejected`` and then sends the ``OrderRejected`` alert, a
send that must succeed. A failed send abandoned the message, and every delivery counts: an alert queue
failing on five deliveries in a row (the harsh refusal profile, 150 orders, seed 8, with a send failure rate
of 0.2 and lost locks) dead-lettered the ``OrderSubmitted`` ``MaxDeliveryCountExceeded`` with the refusal
never alerted (``silent_failures``: red team on 1e5441b). The refusal is written before anyone is told, so a
copy of the message finishes it as a redelivery does: the alert's failed send now hands the message to
``submission.store_outage`` (10 s, 30 s, then a minute apart, about an hour), abandoned only if the copy cannot
be sent either. Through the registered trigger, the in-process broker and the Cosmos protocol server."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE, QUEUE_MAX_DELIVERY_COUNT
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import context_with
from tests.deferral.support import alerts, deliver, order, send
from tests.deferral.test_refusal_written_first import Cap, SendsFailing, told

pytestmark = pytest.mark.cosmos


def test_a_refusal_whose_alert_fails_on_more_deliveries_than_the_queue_allows_is_still_alerted(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    cap = Cap(monkeypatch, full=True)
    failing = context_with(ctx, sender=SendsFailing(broker, OPERATOR_ALERTS_QUEUE, times=QUEUE_MAX_DELIVERY_COUNT))
    send(broker, order())
    for delay in (None, *STORE_RETRY_DELAYS[: QUEUE_MAX_DELIVERY_COUNT - 1]):
        if delay is not None:
            clock.advance(delay)
        assert deliver(functions, broker)  # the refusal finished again, its alert's send failing
    assert broker.dead_letters(ORDERS_QUEUE) == []  # not worn out
    assert alerts(broker) == []

    context_with(failing, sender=broker)
    cap.full = False  # room by now: the refusal stands all the same
    clock.advance(STORE_RETRY_DELAYS[QUEUE_MAX_DELIVERY_COUNT - 1])
    assert deliver(functions, broker)
    assert [a["kind"] for a in alerts(broker)] == ["OrderRejected"]
    assert told(broker) == ["Rejected"]
    assert ctx.states.get("p1") is None
    assert broker.dead_letters(ORDERS_QUEUE) == []
