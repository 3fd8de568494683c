"""Red team (rt-alert-noise): ``ConflictingOrderData`` paged once per conflicting message. A producer bug resending
the same conflicting order again and again (new messages, new sequence numbers) raised one alert per message, each
its own alert id: one page each (the ``operatorAlertRaised`` rule is one alert per alert id). The conflict is one
problem per conflicting content: one alert for it (its id the content's digest, an alert mark holding the repeats:
``notifications/repeats.py``), and another content of the same order is another alert at once.

Driven through the registered ``submit_order`` trigger, over the real Cosmos SDK (the local protocol server)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from contracts.names import OPERATOR_ALERTS_QUEUE
from tests.fakes import FakeReceivedMessage, RecordingActions, RecordingClient, RecordingSender
from tests.infra.log_alerts import LogRule
from tests.observability.exported import exported
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos


def _submit(functions: dict[str, Any], body: Any) -> RecordingActions:
    actions = RecordingActions()
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=FakeReceivedMessage.of(body), message_actions=actions, client=RecordingClient()))
    return actions


def test_a_producer_resending_one_conflicting_order_pages_once_and_another_conflict_pages_too(
    functions: dict[str, Any], app_context: Any, sender: RecordingSender, clock: ManualClock
) -> None:
    _submit(functions, order())
    events: list[tuple[float, str, dict[str, str]]] = []
    conflicting = [order(shipTo="2 Other St")] * 30 + [order(replyTo="other-statuses")]
    for minute, body in enumerate(conflicting):  # one new message every 6 minutes, three hours long
        clock.advance(timedelta(minutes=6))
        with exported() as rows:
            kind, details = _submit(functions, body).only
        assert (kind, details["reason"]) == ("deadletter", "ConflictingOrderData")  # every copy dead-lettered
        events.extend((minute * 6.0 + 6, row.table, row.properties) for row in rows)
    alerts = [a for a in sender.bodies(OPERATOR_ALERTS_QUEUE) if a["kind"] == "ConflictingOrderData"]
    # before: 31 alerts, 31 distinct ids, 31 pages
    assert len(alerts) == 2 and alerts[0]["alertId"] != alerts[1]["alertId"]
    pages = LogRule.of("operatorAlertRaised").pages(events, until=int(events[-1][0]) + 30)
    assert len(pages) == 2, pages
    held = [e[2] for e in events if e[2].get("event") == "AlertRepeatHeld"]
    assert len(held) == 29


def test_the_same_conflict_sent_again_after_it_stopped_for_hours_pages_again(
    functions: dict[str, Any], app_context: Any, sender: RecordingSender, clock: ManualClock
) -> None:
    """Never a first occurrence held back: the producer stopped for three hours (the problem was over)."""
    _submit(functions, order())
    _submit(functions, order(shipTo="2 Other St"))
    clock.advance(timedelta(hours=3))
    _submit(functions, order(shipTo="2 Other St"))
    assert [a["kind"] for a in sender.bodies(OPERATOR_ALERTS_QUEUE)] == ["ConflictingOrderData"] * 2
