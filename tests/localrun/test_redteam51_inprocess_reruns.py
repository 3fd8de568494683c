"""Red team (s51): the in-process inventory agent is a Durable activity, run at least once: a worker that died after
sending its result runs it again 5 minutes later (``host.activity_rerun_rate``). A run past the step's deadline is
dropped unread (``order_agents.runtime``), but by the agent's own clock: one running behind (here 400 s) calls the
service anyway, after the order's cancellation released the reservation. The release fenced the forward key
(docs/compensation.md), so that reserve is refused and the order stays balanced. Checked: the fence removed from the
undo (``fences_key=None`` in ``order_agents/runtime.py``), this run keeps a reservation (``ord-00039``: reserved at
08:05:35, 4 minutes after its release) and fails ``unbalanced_compensations`` and ``kept_after_compensation``. No
other invariant test ran an in-process agent again after its undo."""

from __future__ import annotations

import pytest

from localrun.profile import Profile
from localrun.report import build_report
from localrun.simulation import SimulationConfig, run_simulation

pytestmark = pytest.mark.cosmos

RERUNS_BEHIND_CANCELS = {
    "host": {"activity_rerun_rate": 0.5, "clock_skew_s": {"agents": -400}},
    "remote": {"inventory": {"transient_error_rate": 0.5, "latency_ms": [500, 4000]}},
    "operator": {"cancel_rate": 1.0, "cancel_after_s": [0, 20]},
}


def test_an_in_process_reservation_run_again_after_its_release_takes_no_effect() -> None:
    config = SimulationConfig(orders=40, seed=56, profile=Profile.parse(RERUNS_BEHIND_CANCELS))
    report = build_report(run_simulation(config))
    assert {k: v for k, v in report["invariants"].items() if v} == {}, report["invariant_examples"]
    assert report["injected_faults"]["activities_rerun_late"] > 100
    assert report["recoveries"]["fenced_forward_calls"] > 0  # forward calls after their undo: the case happened
    assert report["final_states"].get("Compensated", 0) >= 5, report["final_states"]
