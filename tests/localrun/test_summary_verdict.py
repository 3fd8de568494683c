"""The summary ends with a verdict: a new user running ``python3 dev.py demo`` saw ``Error 6`` and
``DeadLettered 11`` at the top of a hundred-line summary and the invariants in its middle, and had to
know the README's "exit code 1 if an invariant is violated" to tell a good run from a bad one."""

from __future__ import annotations

from typing import Any

import pytest

from localrun.report import build_report, summary
from localrun.simulation import SimulationConfig, run_simulation


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return build_report(run_simulation(SimulationConfig(orders=3, seed=1)))


def test_a_clean_run_ends_saying_every_invariant_holds_and_how_the_orders_ended(report: dict[str, Any]) -> None:
    last = summary(report).splitlines()[-1]
    assert last.startswith(f"verdict: all {len(report['invariants'])} invariants hold"), last
    assert f"{report['final_states']['Processed']} of 3 orders Processed" in last, last


def test_a_run_with_other_endings_names_them_as_outcomes(report: dict[str, Any]) -> None:
    ended = {"Processed": 1, "Error": 2, "Compensated": 0, "Rejected": 0, "DeadLettered": 4}
    chaos = {**report, "final_states": {**report["final_states"], **ended}}
    last = summary(chaos).splitlines()[-1]
    assert "1 of 3 orders Processed, Error 2: how the app ended them under the injected faults" in last, last
    assert "Rejected" not in last and "Compensated" not in last  # a state no order ended in is not named
    # dead letters are messages on `orders`, beside the run's orders: not counted among them
    assert last.endswith("; 4 messages on orders dead-lettered (reasons above)"), last


def test_one_dead_letter_is_one_message(report: dict[str, Any]) -> None:
    """``demo --orders 50`` ended "1 messages on orders dead-lettered": found walking through the README."""
    one = {**report, "final_states": {**report["final_states"], "DeadLettered": 1}}
    assert summary(one).splitlines()[-1].endswith("; 1 message on orders dead-lettered (reasons above)")


def test_a_violated_invariant_is_the_verdict(report: dict[str, Any]) -> None:
    broken = {**report, "invariants": {**report["invariants"], "lost": 1, "stale_writes": 2}}
    last = summary(broken).splitlines()[-1]
    assert last.startswith(f"verdict: 2 of {len(report['invariants'])} invariants VIOLATED (lost 1, stale_writes 2)")
    assert "hold" not in last
