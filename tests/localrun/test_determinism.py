"""A simulation is a pure function of its seed and profile: two runs give the same report, apart
from the wall time (the runner's speed-ups — reused task threads, the timer heap, the lighter Cosmos
transport, the SDK speed-ups — must not change any outcome)."""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from adapters.clock import ManualClock
from localrun.durable.engine import DurableEngine
from localrun.durable.extension_api.handlers import Answer
from localrun.durable.http_api import DurableExtensionApi
from localrun.durable.registry import registered_orchestrators
from localrun.profile import Profile
from localrun.report import build_report
from localrun.simulation import SimulationConfig, run_simulation
from tests.localrun.durable_samples import FUNCTIONS
from tests.localrun.real_durable_client import RealDurableClient

SAMPLE = "reply_or_deadline_orchestrator"  # its first action: an activity given the input
ALL_FAULTS = Path(__file__).resolve().parents[2] / "examples" / "profiles" / "all-faults.json"


def _report(seed: int, orders: int = 30, profile: Profile | None = None) -> dict[str, Any]:
    """The run's report without its wall time, and how its Durable backend ended: each instance's execution number
    (its creation order), status and history length, which give away a run that took another path to the same
    outcomes."""
    profile = profile if profile is not None else Profile.load(ALL_FAULTS)
    result = run_simulation(SimulationConfig(orders=orders, seed=seed, profile=profile))
    report = build_report(result)
    assert isinstance(report.pop("wall_s"), float)
    report["backend"] = [
        (instance.instance_id, instance.execution, instance.status.value, len(instance.history))
        for instance in result.host.engine.instances()
    ]
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


# Orders held Pending by a small in-flight cap: the starter's sweeps then start several at once, and the Durable
# backend's delays are drawn in the order the starts settle.
STARTS_AT_ONCE: dict[str, Any] = {
    "admission": {"max_pending": 40, "max_in_flight": 3},
    "durable": {"delivery_delay_rate": 0.3, "delivery_delay_ms": [1000, 30000]},
}


# The same, some of those starts recorded late (``durable.late_start_rate``: drawn per instance id, due in order)
LATE_STARTS_AT_ONCE = {
    **STARTS_AT_ONCE,
    "durable": {**STARTS_AT_ONCE["durable"], "late_start_rate": 0.3, "late_start_ms": [1000, 90000]},
}


@pytest.mark.parametrize("profile", [STARTS_AT_ONCE, LATE_STARTS_AT_ONCE], ids=["delays", "late-starts"])
def test_a_run_is_the_same_whatever_order_its_concurrent_durable_requests_arrive_in(
    monkeypatch: pytest.MonkeyPatch, profile: dict[str, Any]
) -> None:
    """The same run twice, the second with every other POST to the Durable HTTP API held 10 ms on its thread
    before it is handled (as a busy machine can hold it): the starts one sweep makes at once reach the backend in
    another order. Before, that alone made both the backend's history and the report differ."""
    first = _report(seed=2, orders=20, profile=Profile.parse(profile))
    assert profile is STARTS_AT_ONCE or first["injected_faults"]["durable_starts_recorded_late"] > 0
    posts = itertools.count(1)
    answer = DurableExtensionApi._before_answer

    def held_every_other_post(api: DurableExtensionApi, method: str, path: str) -> Answer | None:
        if method == "POST" and next(posts) % 2:
            time.sleep(0.01)
        return answer(api, method, path)

    monkeypatch.setattr(DurableExtensionApi, "_before_answer", held_every_other_post)
    assert _report(seed=2, orders=20, profile=Profile.parse(profile)) == first
    assert next(posts) > 20  # the POSTs went through the hook
    assert first["final_states"]["Processed"] == 20
