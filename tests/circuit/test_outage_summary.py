"""The report's outages section from the app's events and the audited transitions."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from domain.states import ProcessState
from localrun.audit import Transition
from localrun.outages import outage_summary

T0 = datetime.fromisoformat("2026-03-01T12:00:00+00:00")


def t(seconds: float, order: str, event: str) -> Transition:
    return Transition(T0 + timedelta(seconds=seconds), order, None, ProcessState.PENDING, event, "supervisor", None)


def test_opened_closed_orders_waited_and_the_longest_wait():
    events: list[dict[str, Any]] = [
        {"event": "DependencyOutage", "dependency": "shipping"},
        {"event": "SupervisorOutageWait", "dependency": "shipping", "orderId": "a"},
        {"event": "SupervisorOutageWait", "dependency": "shipping", "orderId": "a"},
        {"event": "SupervisorOutageWait", "dependency": "shipping", "orderId": "b"},
        {"event": "DependencyRecovered", "dependency": "shipping", "outageSeconds": 600.0},
        {"event": "DependencyOutage", "dependency": "payment"},
        {"event": "SupervisorRecovered", "orderId": "c"},  # no dependency: ignored
    ]
    transitions = [
        t(0, "a", "StepStarted"),
        t(60, "a", "OutageWait"),
        t(90, "a", "Claimed"),
        t(91, "a", "StepStarted"),
        t(92, "a", "StepTransientFailure"),
        t(120, "a", "OutageWait"),
        t(700, "a", "StepSucceeded"),  # waited 640 s
        t(100, "b", "OutageWait"),
        t(200, "b", "StepSucceeded"),  # 100 s
    ]
    summary = outage_summary(events, transitions)
    assert summary == {
        "payment": {"opened": 1, "closed": 0, "longest_outage_s": 0.0, "orders_waited": 0, "max_wait_s": 0.0},
        "shipping": {"opened": 1, "closed": 1, "longest_outage_s": 600.0, "orders_waited": 2, "max_wait_s": 640.0},
    }
