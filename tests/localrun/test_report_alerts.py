"""The runner's report reads ``operator-alerts``, where anyone with send rights may put anything: a
body that is not an ``OperatorAlert`` is counted as such, never a ``KeyError`` that loses the report."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from contracts.names import OPERATOR_ALERTS_QUEUE
from localrun.outages import outage_summary
from localrun.report import NOT_AN_ALERT, _alert_bodies, _alert_kind

ALERT = '{"type": "OperatorAlert", "kind": "DependencyOutage", "details": {"dependency": "payment"}}'
FOREIGN = [
    '{"type": "StatusUpdate", "orderId": "o1", "status": "Received"}',  # no kind
    '{"type": "OperatorAlert", "kind": 7}',
    '{"kind": "Forged"}',  # no type
    "[1, 2]",
    "not json",
    '{"type": "OperatorAlert", "kind": "DependencyOutage", "details": ["payment"]}',
]


def _result(bodies: list[str]) -> Any:
    def contents(queue: str) -> list[str]:
        assert queue == OPERATOR_ALERTS_QUEUE
        return bodies

    return SimpleNamespace(broker=SimpleNamespace(contents=contents))


def test_foreign_bodies_on_operator_alerts_are_counted_as_not_alerts():
    bodies = _alert_bodies(_result([ALERT, *FOREIGN]))
    kinds = [_alert_kind(body) for body in bodies]
    assert kinds == ["DependencyOutage", *[NOT_AN_ALERT] * 5, "DependencyOutage"]
    # the outage summary takes them too (a ``details`` that is not an object names no dependency)
    summary = outage_summary([], [], bodies, {}, {})
    assert summary["payment"]["alerts_opened"] == 1
