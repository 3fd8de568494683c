"""The lower bound of the Flex Consumption GB-s (``function_gb_s_shared``, docs/cost.md) through a small simulation:
the host folds every invocation into its scaling group's activity periods, and the report costs them. Checked against
the union of the invocations' intervals worked out here from the worker's own calls, grouped by trigger type as
Flex's per-function scaling groups them."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from localrun.host import LocalHost
from localrun.prices import billed_seconds
from localrun.profile import Profile
from localrun.report import build_report
from localrun.simulation import SimulationConfig, run_simulation
from localrun.worker.process import FunctionsWorker

HAPPY_PATH = Path(__file__).resolve().parents[2] / "examples" / "profiles" / "happy-path.json"
SHARED = {"httpTrigger": "http", "blobTrigger": "blob"} | dict.fromkeys(
    ("orchestrationTrigger", "activityTrigger", "entityTrigger"), "durable"
)


def _union_billed(intervals: list[tuple[float, float]]) -> tuple[int, float]:
    """(periods, billed seconds) of the union of ``intervals``, merged by sorting (touching ones merge)."""
    periods: list[list[float]] = []
    for start, end in sorted(intervals):
        if periods and start <= periods[-1][1]:
            periods[-1][1] = max(periods[-1][1], end)
        else:
            periods.append([start, end])
    return len(periods), sum(billed_seconds(end - start) for start, end in periods)


def test_the_report_costs_each_scaling_groups_activity_periods(monkeypatch: pytest.MonkeyPatch) -> None:
    hosts: list[LocalHost] = []
    intervals: dict[str, list[tuple[float, float]]] = {}
    original_init = LocalHost.__init__
    original_invoke = FunctionsWorker.invoke

    def init(self: LocalHost, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        hosts.append(self)

    def invoke(self: FunctionsWorker, indexed: Any, *args: Any, **kwargs: Any) -> Any:
        host = hosts[-1]
        start: datetime = host.clock.now()
        try:
            return original_invoke(self, indexed, *args, **kwargs)
        finally:
            trigger = host.functions[indexed.name].trigger_type
            group = SHARED.get(trigger, indexed.name)
            base = host.started_at
            interval = ((start - base).total_seconds(), (host.clock.now() - base).total_seconds())
            intervals.setdefault(group, []).append(interval)

    monkeypatch.setattr(LocalHost, "__init__", init)
    monkeypatch.setattr(FunctionsWorker, "invoke", invoke)
    result = run_simulation(SimulationConfig(orders=8, seed=1, profile=Profile.load(HAPPY_PATH)))
    report = build_report(result)
    assert len(hosts) == 1

    # the remote calls take simulated time, and invocations of a group overlap or touch
    assert any(end > start for spans in intervals.values() for start, end in spans)
    assert len(intervals["durable"]) > 2 * _union_billed(intervals["durable"])[0]
    by_group = {group: _union_billed(spans) for group, spans in intervals.items()}
    assert "durable" in by_group and len(by_group) >= 3  # the Durable triggers, and Service Bus-triggered functions
    expected = sum(billed for _, billed in by_group.values())
    assert result.host.activity_periods.billed_seconds() == pytest.approx(expected, abs=1e-6)
    assert result.host.activity_periods.periods() == sum(n for n, _ in by_group.values())
    # every invocation was one of the intervals
    assert sum(len(spans) for spans in intervals.values()) == len(result.host.execution_seconds)

    cost = report["cost_per_1m_orders_usd"]
    units = cost["units_per_order"]
    gb = cost["assumptions"]["instance_memory_mb"] / 1024
    assert units["function_gb_s_shared"] == pytest.approx(expected * gb / 8, abs=0.001)
    # the orders' invocations overlap, so sharing instances bills far less than billing each alone
    assert units["function_gb_s_shared"] < units["function_gb_s"] / 2
    assert cost["total_low"] < cost["total"] and cost["total_with_dts_low"] < cost["total_with_dts"]
    difference = cost["parts"]["function_gb_s"] - cost["parts"]["function_gb_s_shared"]
    assert cost["total"] - cost["total_low"] == pytest.approx(difference, abs=0.02)
