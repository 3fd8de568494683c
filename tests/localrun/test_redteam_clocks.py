"""Red team (clocks), in the runner: the supervisor's host clock 8 s ahead of the orchestrations' (profile
``host.clock_skew_s``), and inventory answering 54-59.5 s into its 60 s step, every reply in time (now 6-9.9 s
into a 12 s step: a call is given up after the client's 10 s, ``settings.REMOTE_CALL_TIMEOUT``). Without a
grace (``SUPERVISOR_GRACE_SECONDS`` 0, the local default) the supervisor took live attempts at their deadlines
by its own clock and counted them failed: retries of orders none of whose steps failed (seed 1: 6 in 40 orders;
25 in 100). With the grace the Bicep deploys (15 s), none (docs/supervisor.md, "Clocks"). Since the supervisor leaves
an attempt whose instance still runs (``SUPERVISOR_BACKEND_WAIT_SECONDS``, supervisor/backend_wait.py), none without
the grace either: the grace alone is shown with that wait off."""

from __future__ import annotations

from typing import Any

from localrun.profile import Profile
from localrun.report import build_report
from localrun.simulation import SimulationConfig, run_simulation
from settings import SETTINGS

SKEWED = {
    "host": {"clock_skew_s": {"supervisor": 8}},
    "remote": {"inventory": {"latency_ms": [6000, 9900]}},
}
DEPLOYED = next(s.written for s in SETTINGS if s.name == "SUPERVISOR_GRACE_SECONDS")


def _report(grace: str, backend_wait: str = "0") -> dict[str, Any]:
    settings = {"SUPERVISOR_GRACE_SECONDS": grace, "STEP_TIMEOUT_SECONDS": "12"}
    config = SimulationConfig(
        orders=40,
        seed=1,
        profile=Profile.parse(SKEWED),
        settings={**settings, "SUPERVISOR_BACKEND_WAIT_SECONDS": backend_wait},
    )
    return build_report(run_simulation(config))


def test_a_supervisor_clock_ahead_takes_no_live_attempt_with_the_deployed_grace() -> None:
    report = _report(DEPLOYED)
    assert report["recoveries"]["supervisor_retries"] == 0
    assert report["injected_faults"]["clock_skewed_invocations"] > 0
    assert not any(report["invariants"].values())


def test_without_the_grace_the_same_run_retries_orders_whose_replies_came_in_time() -> None:
    """What the grace is for: the runner shows the supervisor taking live attempts (no invariant counts it)."""
    assert _report("0")["recoveries"]["supervisor_retries"] > 0


def test_without_the_grace_the_backend_wait_leaves_the_live_attempts_too() -> None:
    """A live attempt's instance is still Running when a supervisor whose clock runs ahead finds it due: left."""
    report = _report("0", backend_wait="600")
    assert report["recoveries"]["supervisor_retries"] == 0
    assert not any(report["invariants"].values())
