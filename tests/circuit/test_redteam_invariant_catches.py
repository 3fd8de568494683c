"""Red team: the invariant ``outage_only_failures`` can fail. Break the outage policy on purpose and
the runner reports it (the pattern of tests/e2e/test_invariants_catch_bugs.py), over the
dependency-outages profile (outages far shorter than MAX_OUTAGE_WAIT_MINUTES)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from localrun.profile import Profile
from localrun.report import build_report
from localrun.simulation import SimulationConfig, run_simulation

pytestmark = pytest.mark.e2e
PROFILE = Path(__file__).resolve().parents[2] / "examples" / "profiles" / "dependency-outages.json"
ORDERS = 60


def run() -> dict[str, Any]:
    return build_report(run_simulation(SimulationConfig(orders=ORDERS, seed=11, profile=Profile.load(PROFILE))))


def patch_verdict(monkeypatch: pytest.MonkeyPatch, verdict: Any) -> None:
    from supervisor import compensation_rounds, recovery

    monkeypatch.setattr(recovery, "outage_verdict", verdict)
    monkeypatch.setattr(compensation_rounds, "outage_verdict", verdict)


def test_without_waiting_outages_out_the_outage_only_failures_are_reported(monkeypatch):
    """The supervisor counts every attempt that failed on an open dependency (as before circuits):
    orders burn their retries in the outage. Most of them never made a remote call (the agents fail
    fast), so only the runner's view of those refusals makes them visible."""
    patch_verdict(monkeypatch, lambda *args, **kwargs: None)
    report = run()
    assert report["invariants"]["outage_only_failures"] > ORDERS // 3, report["operator_actions_needed"]


def test_a_bound_that_escalates_early_is_not_excused_by_its_reason(monkeypatch):
    """The supervisor escalates at the first wait, saying MAX_OUTAGE_WAIT_MINUTES was passed (as a
    stale outageWaitSince made it do): the reason alone must not make it "by design"."""
    from supervisor.outage import outage_verdict

    def early(*args: Any, **kwargs: Any) -> Any:
        verdict = outage_verdict(*args, **kwargs)
        return None if verdict is None else dataclasses.replace(verdict, exceeded=True)

    patch_verdict(monkeypatch, early)
    report = run()
    assert report["invariants"]["outage_only_failures"] > 0, report["operator_actions_needed"]
