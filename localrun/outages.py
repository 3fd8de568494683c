"""The report's ``outages`` section: what the circuits (``domain/circuit.py``) did during a run.

Per dependency: ``opened`` (``DependencyOutage`` events: a closed circuit opened), ``closed``
(``DependencyRecovered``), ``longest_outage_s`` (the longest open-to-closed span the app measured),
``orders_waited`` (orders the supervisor rescheduled at least once to wait for it:
``SupervisorOutageWait``) and ``max_wait_s``: the longest an order waited, from its first
``OutageWait`` to the next write that was neither a wait nor a new attempt or round starting (a step
result, an undo, a terminal state), in true simulated time from the audited transitions."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from localrun.audit import Transition

WAIT = "OutageWait"
# Writes that happen while an order is still waiting (a new attempt or round reaching the open circuit)
STILL_WAITING = {WAIT, "Claimed", "StepStarted", "StepTransientFailure", "CompensationClaimed", "UndoStarted"}


def _longest_waits(transitions: Iterable[Transition]) -> dict[str, float]:
    by_order: dict[str, list[Transition]] = defaultdict(list)
    for t in transitions:
        by_order[t.order_id].append(t)
    longest: dict[str, float] = {}
    for order_id, seen in by_order.items():
        began: datetime | None = None
        for t in sorted(seen, key=lambda t: t.at):
            if t.event == WAIT and began is None:
                began = t.at
            elif began is not None and t.event not in STILL_WAITING:
                waited = (t.at - began).total_seconds()
                longest[order_id] = max(longest.get(order_id, 0.0), waited)
                began = None
    return longest


def outage_summary(events: list[dict[str, Any]], transitions: Iterable[Transition]) -> dict[str, dict[str, Any]]:
    summary: dict[str, dict[str, Any]] = {}

    def entry(dependency: str) -> dict[str, Any]:
        return summary.setdefault(
            dependency, {"opened": 0, "closed": 0, "longest_outage_s": 0.0, "orders_waited": 0, "max_wait_s": 0.0}
        )

    waited: dict[str, set[str]] = defaultdict(set)
    for event in events:
        dependency = event.get("dependency")
        if not isinstance(dependency, str):
            continue
        if event["event"] == "DependencyOutage":
            entry(dependency)["opened"] += 1
        elif event["event"] == "DependencyRecovered":
            row = entry(dependency)
            row["closed"] += 1
            row["longest_outage_s"] = max(row["longest_outage_s"], float(event.get("outageSeconds") or 0.0))
        elif event["event"] == "SupervisorOutageWait" and isinstance(event.get("orderId"), str):
            waited[dependency].add(event["orderId"])
    longest = _longest_waits(transitions)
    for dependency, orders in waited.items():
        row = entry(dependency)
        row["orders_waited"] = len(orders)
        row["max_wait_s"] = round(max((longest.get(o, 0.0) for o in orders), default=0.0), 1)
    return dict(sorted(summary.items()))
