"""Red team (fence41): orders cancelled after their charge, whose refunds meet a payment outage alone (its circuit
never opens: ``CIRCUIT_FAILURE_THRESHOLD`` 500), wait it out (``fail_compensation`` releases each round, no success of
the service since) until ``MAX_OUTAGE_WAIT_MINUTES`` and then fail the compensation. Their ``lastError`` did not say
the bound failed them (the undo's error alone), so the runner counted them ``outage_only_failures`` (2 of 4 here)."""

from __future__ import annotations

import pytest

from localrun.profile import Profile
from localrun.report import build_report
from localrun.simulation import SimulationConfig, run_simulation

pytestmark = pytest.mark.cosmos

UNDO_ALONE_IN_AN_OUTAGE = {
    "orders": {"cancel_rate": 1.0},
    "remote": {
        "payment": {"latency_ms": [50, 100], "outages": [{"start_s": 8, "duration_s": 3600}]},
        "shipping": {"latency_ms": [5000, 9000]},
    },
    "settings": {"MAX_OUTAGE_WAIT_MINUTES": "5", "CIRCUIT_FAILURE_THRESHOLD": "500", "MAX_FAILURES": "2"},
}


def test_refunds_alone_in_an_outage_fail_by_the_bound_and_say_so() -> None:
    result = run_simulation(SimulationConfig(orders=4, seed=1, profile=Profile.parse(UNDO_ALONE_IN_AN_OUTAGE)))
    report = build_report(result)
    assert report["final_states"].get("CompensationFailed", 0) >= 1  # the case is met: the bound failed some
    assert {k: v for k, v in report["invariants"].items() if v} == {}, report["invariant_examples"]
