"""A simulation is a pure function of its seed and profile: two runs give the same report, apart
from the wall time (the runner's speed-ups — reused task threads, the timer heap, the lighter Cosmos
transport, the SDK speed-ups — must not change any outcome)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from adapters.clock import ManualClock
from localrun.durable.engine import DurableEngine
from localrun.durable.registry import registered_orchestrators
from localrun.profile import Profile
from localrun.report import build_report
from localrun.simulation import SimulationConfig, run_simulation
from tests.localrun.durable_samples import FUNCTIONS
from tests.localrun.real_durable_client import RealDurableClient

SAMPLE = "reply_or_deadline_orchestrator"  # its first action: an activity given the input
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


def _backend_order(arrival: list[str]) -> tuple[list[str], dict[str, int]]:
    """Starts one instance per id in ``arrival`` (the order the requests reached the Durable extension's HTTP API)
    through the SDK's own client, as the requests of one invocation arrive before the runner drives the engine
    again, then runs the engine: the order the instances' first activities ran, and each one's execution
    number (its creation order, which orders timers due at the same moment)."""
    clock = ManualClock(datetime(2026, 3, 1, 8, 0, tzinfo=UTC))
    ran: list[str] = []

    def activity(name: str, value: Any) -> Any:
        ran.append(value["orderId"])
        return "prepared"

    engine = DurableEngine(registered_orchestrators(FUNCTIONS), activity, clock)
    with RealDurableClient(engine) as real:
        for instance_id in arrival:
            real.run(real.client.start_new(SAMPLE, instance_id, {"orderId": instance_id}))
        engine.run_until_idle()
        return ran, {instance.instance_id: instance.execution for instance in engine.instances()}


def test_the_order_concurrent_requests_reach_the_backend_in_decides_nothing() -> None:
    """The starter's and the supervisor's phases make ``PARALLEL_CALLS`` Durable client calls at once: each reaches
    the runner's HTTP API on a thread of its own, in the order the operating system runs those threads. Before,
    the backend queued each start as it came, so which instance ran first, its execution number and the delays it
    drew depended on that order: ``all-faults`` seed 1 at 300 orders ended with 278, 279 or 280 orders Processed
    from one run to the next. Now the starts settle in instance id order, whatever order they came in."""
    ids = ["ord-00003:1", "ord-00001:1", "ord-00002:1"]
    one_way = _backend_order(ids)
    assert _backend_order(list(reversed(ids))) == one_way
    assert _backend_order(sorted(ids)) == one_way
    assert one_way == (sorted(ids), {instance_id: n for n, instance_id in enumerate(sorted(ids), 1)})
