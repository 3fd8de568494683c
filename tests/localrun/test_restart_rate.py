"""``host.restart_every_s`` is reached whatever its size. Before, the runner looked for a due restart only when its
clock stopped at something else due (an arrival, a timer, a message, a task's wake): the clock went past the
restarts planned in between, and they came as one, late. A mean of 0.5 s gave 23 restarts in 29.5 simulated seconds,
not about 59 (30 orders, seed 1). Values too small to run are refused when the profile is read."""

from __future__ import annotations

import pytest

from localrun.profile import MIN_RESTART_EVERY_S, Profile, ProfileError
from localrun.report import build_report
from localrun.simulation import SimulationConfig, run_simulation


@pytest.mark.parametrize("every_s", [0.5, 0.05])
def test_restarts_come_at_their_rate_below_the_gaps_between_events(every_s: float) -> None:
    report = build_report(
        run_simulation(
            SimulationConfig(orders=30, seed=1, profile=Profile.parse({"host": {"restart_every_s": every_s}}))
        )
    )
    expected = report["simulated_s"] / every_s
    assert 0.8 * expected < report["recoveries"]["host_restarts"] < 1.2 * expected, (report["simulated_s"], expected)
    assert not any(report["invariants"].values()), report["invariants"]


def test_a_restart_period_below_the_least_is_refused_with_the_least_named() -> None:
    assert Profile.parse({"host": {"restart_every_s": MIN_RESTART_EVERY_S}}).restart_every_s == MIN_RESTART_EVERY_S
    with pytest.raises(ProfileError, match=r"host\.restart_every_s must be a number of seconds from 0\.01 to "):
        Profile.parse({"host": {"restart_every_s": 0.001}})
