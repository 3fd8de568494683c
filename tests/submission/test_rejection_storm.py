"""Red team (alert-noise-2): ``OrderRejected`` paged once per refused message. A producer re-sending the same order
the pending cap refuses (the same content, a new MessageId and sequence number each time) every minute raised one
alert per message, each its own id (the message's sequence number): one page each, 180 in three hours. The refusal
is one problem per order and refused content (a digest of the order as it would be stored and the reason, as
``ConflictingOrderData``'s): one alert, its repeats held by an alert mark (``notifications/repeats.py``); another
content of the order, or another order, pages at once. The submitter still hears ``Rejected`` for every message
(its contract), each under its own MessageId, and every message is completed.

Driven through the registered ``submit_order`` trigger, over the real Cosmos SDK (the local protocol server)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from contracts.names import OPERATOR_ALERTS_QUEUE
from settings import Settings
from tests.contexts import context_with
from tests.fakes import RecordingSender
from tests.infra.log_alerts import LogRule
from tests.observability.exported import exported
from tests.submission.corpus import order
from tests.submission.test_redteam47_conflict_storm import _submit

pytestmark = pytest.mark.cosmos


def test_a_producer_resending_one_refused_order_every_minute_pages_once(
    functions: dict[str, Any], app_context: Any, sender: RecordingSender, clock: ManualClock
) -> None:
    ctx = context_with(app_context, settings=Settings.from_env({}, MAX_PENDING="1", MAX_IN_FLIGHT="1"))
    _submit(functions, order(orderId="a"))  # claimed: Processing (in flight 1 of 1)
    _submit(functions, order(orderId="b"))  # Pending: the pending cap is reached
    ctx.counts.clear()
    events: list[tuple[float, str, dict[str, str]]] = []
    refused = [order(orderId="c")] * 180 + [order(orderId="c", shipTo="2 Other St"), order(orderId="d")]
    for minute, body in enumerate(refused, start=1):  # one new message a minute, three hours long
        clock.advance(timedelta(minutes=1))
        with exported() as rows:
            kind, _ = _submit(functions, body).only
        assert kind == "complete"  # every message settled
        events.extend((float(minute), row.table, row.properties) for row in rows)
    assert ctx.states.get("c") is None and ctx.states.get("d") is None  # refused, every time
    # before: 182 alerts, 182 distinct ids, 182 pages
    pages = LogRule.of("operatorAlertRaised").pages(events, until=int(events[-1][0]) + 30)
    assert len(pages) == 3, len(pages)
    alerts = [a for a in sender.bodies(OPERATOR_ALERTS_QUEUE) if a["kind"] == "OrderRejected"]
    assert [a["orderId"] for a in alerts] == ["c", "c", "d"], len(alerts)
    assert len({a["alertId"] for a in alerts}) == 3
    held = [e[2] for e in events if e[2].get("event") == "AlertRepeatHeld"]
    assert len(held) == 179 and {h["alertKind"] for h in held} == {"OrderRejected"}
    # the submitter heard Rejected for each message, each under its own MessageId
    rejected = [m.message_id for q, m in sender.sent if q == "client-statuses" and '"Rejected"' in str(m.body)]
    assert len(rejected) == len(set(rejected)) == len(refused)
    logged = [e for e in events if e[2].get("event") == "OrderRejected"]
    assert len(logged) == len(refused)  # every refusal logged, with its message


def test_the_same_refusal_after_hours_without_one_pages_again(
    functions: dict[str, Any], app_context: Any, sender: RecordingSender, clock: ManualClock
) -> None:
    """Never a first occurrence held back: the producer stopped for three hours (the problem was over)."""
    ctx = context_with(app_context, settings=Settings.from_env({}, MAX_PENDING="1", MAX_IN_FLIGHT="1"))
    _submit(functions, order(orderId="a"))
    _submit(functions, order(orderId="b"))
    ctx.counts.clear()
    _submit(functions, order(orderId="c"))
    clock.advance(timedelta(minutes=1))
    _submit(functions, order(orderId="c"))
    clock.advance(timedelta(hours=3))
    ctx.counts.clear()
    _submit(functions, order(orderId="c"))
    assert [a["orderId"] for a in sender.bodies(OPERATOR_ALERTS_QUEUE) if a["kind"] == "OrderRejected"] == ["c", "c"]
