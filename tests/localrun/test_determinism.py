"""A simulation is a pure function of its seed and profile: two runs give the same report, apart
from the wall time (the runner's speed-ups — reused task threads, the timer heap, the lighter Cosmos
transport, the SDK speed-ups — must not change any outcome)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from localrun.profile import Profile
from localrun.report import build_report
from localrun.simulation import SimulationConfig, run_simulation

ALL_FAULTS = Path(__file__).resolve().parents[2] / "examples" / "profiles" / "all-faults.json"


def _report(seed: int) -> dict[str, Any]:
    config = SimulationConfig(orders=30, seed=seed, profile=Profile.load(ALL_FAULTS))
    report = build_report(run_simulation(config))
    assert isinstance(report.pop("wall_s"), float)
    return report


@pytest.fixture(scope="module")
def seed_3() -> dict[str, Any]:
    return _report(seed=3)


def test_the_same_seed_and_profile_give_the_same_report_twice(seed_3: dict[str, Any]) -> None:
    assert _report(seed=3) == seed_3
    assert seed_3["orders"] == 30
    assert sum(seed_3["injected_faults"].values()) > 0  # the profile's faults did happen


def test_another_seed_gives_another_run(seed_3: dict[str, Any]) -> None:
    assert _report(seed=4) != seed_3


def test_reading_a_run_for_its_report_is_not_billed_to_it() -> None:
    """The report reads the queues (alerts, statuses, deferred messages); those reads are the
    runner's, not Service Bus operations of the app's, so a second report of the same run costs the
    same as the first."""
    result = run_simulation(SimulationConfig(orders=10, seed=5, profile=Profile.load(ALL_FAULTS)))
    first, second = build_report(result), build_report(result)
    assert first["cost_per_1m_orders_usd"] == second["cost_per_1m_orders_usd"]
    assert first["cost_per_1m_orders_usd"]["units_per_order"]["servicebus_operations"] > 0
