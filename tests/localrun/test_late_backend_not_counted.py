"""The Durable backend late (a tenth of its messages 10-300 s late: starts, timers, activity work items and results,
agents' replies) on a happy path: the supervisor took every attempt whose instance the backend had not run by its
deadline as failed, and three in a row ended an order ``Error`` (or compensated, before the pivot). Seed 2, 40
orders: 30 ``Processed``, 42 retries counted. An attempt whose instance is still ``Pending`` or ``Running`` is now
left to it (``SUPERVISOR_BACKEND_WAIT_SECONDS``, supervisor/backend_wait.py): 39 ``Processed``, 15 retries (those
whose timer won over a reply the backend held: the instance ended the attempt itself, which is counted as before)."""

from __future__ import annotations

import pytest

from localrun.profile import Profile
from localrun.report import build_report
from localrun.simulation import SimulationConfig, run_simulation

pytestmark = pytest.mark.cosmos

LATE_BACKEND = {
    "remote": {
        "inventory": {"latency_ms": [20, 200]},
        "payment": {"latency_ms": [50, 400]},
        "shipping": {"latency_ms": [50, 400]},
    },
    "durable": {"delivery_delay_rate": 0.1, "delivery_delay_ms": [10000, 300000]},
}


def test_a_late_backend_is_not_counted_as_the_orders_failure() -> None:
    report = build_report(run_simulation(SimulationConfig(orders=40, seed=2, profile=Profile.parse(LATE_BACKEND))))
    assert report["injected_faults"]["durable_deliveries_delayed"] > 50
    assert report["final_states"]["Processed"] >= 37, report["final_states"]
    assert report["recoveries"]["supervisor_retries"] <= 25
    assert {k: v for k, v in report["invariants"].items() if v} == {}, report["invariant_examples"]
