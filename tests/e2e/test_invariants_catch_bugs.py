"""The invariants are not decoration: break the app on purpose and the runner reports it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from localrun.profile import Profile
from localrun.report import build_report
from localrun.simulation import SimulationConfig, run_simulation

pytestmark = pytest.mark.e2e
PROFILES = Path(__file__).resolve().parents[2] / "examples" / "profiles"


def run(profile: str, orders: int = 100) -> dict[str, Any]:
    config = SimulationConfig(orders=orders, seed=11, profile=Profile.load(PROFILES / f"{profile}.json"))
    return build_report(run_simulation(config))


def test_without_idempotency_keys_a_crashed_agent_charges_twice(monkeypatch):
    """Each retry of a call gets a new key: the agent-crash profile's redeliveries then repeat
    side effects, and the ledger check counts them."""
    import itertools

    from order_agents import runtime

    counter = itertools.count()
    real = runtime.RemoteCall  # type: ignore[attr-defined]

    def fresh_key(*args: Any, **kwargs: Any) -> Any:
        call = real(*args, **kwargs)
        return real(**{**call.__dict__, "idempotency_key": f"{call.idempotency_key}#{next(counter)}"})

    monkeypatch.setattr(runtime, "RemoteCall", fresh_key)
    report = run("agent-crash")
    assert report["invariants"]["duplicate_side_effects"] > 0
