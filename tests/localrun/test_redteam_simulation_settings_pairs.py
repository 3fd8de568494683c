"""Red team of the settings pair check (``CIRCUIT_HEALTH_CACHE_SECONDS`` at most half of ``CIRCUIT_COOLDOWN_SECONDS``)
in the runner: a run's overrides go on top of its profile's settings, so they are checked together,
not each against the defaults (a pair each half of which is set in a different place)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

import pytest

from localrun import simulation
from localrun.profile import Profile
from localrun.simulation import SimulationConfig, run_simulation
from settings import Settings, SettingsError


class SettingsAccepted(Exception):
    """Raised by the first step after the run's settings are checked: nothing is simulated."""


@pytest.fixture
def stop_after_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise SettingsAccepted

    monkeypatch.setattr(simulation, "TaskScheduler", refuse)


@pytest.mark.usefixtures("stop_after_settings")
def test_an_override_is_checked_with_the_profile_settings_it_goes_on_top_of():
    profile = Profile.parse({"settings": {"CIRCUIT_HEALTH_CACHE_SECONDS": "1", "CIRCUIT_COOLDOWN_SECONDS": "3"}})
    config = SimulationConfig(orders=1, seed=1, profile=profile, settings={"CIRCUIT_COOLDOWN_SECONDS": "2"})
    with pytest.raises(SettingsAccepted):  # before: refused, the override checked against the default cache (5 s)
        run_simulation(config)


@pytest.mark.usefixtures("stop_after_settings")
def test_an_override_that_breaks_the_pair_is_still_refused():
    profile = Profile.parse({"settings": {"CIRCUIT_HEALTH_CACHE_SECONDS": "1", "CIRCUIT_COOLDOWN_SECONDS": "3"}})
    config = SimulationConfig(orders=1, seed=1, profile=profile, settings={"CIRCUIT_HEALTH_CACHE_SECONDS": "3"})
    with pytest.raises(SettingsError, match=r"CIRCUIT_HEALTH_CACHE_SECONDS='3'.*CIRCUIT_COOLDOWN_SECONDS"):
        run_simulation(config)


@pytest.mark.usefixtures("stop_after_settings")
def test_an_unknown_override_is_still_refused():
    config = SimulationConfig(orders=1, seed=1, settings={"NO_SUCH_SETTING": "1"})
    with pytest.raises(SettingsError, match="NO_SUCH_SETTING"):
        run_simulation(config)


def _settings_of_run(monkeypatch: pytest.MonkeyPatch, config: SimulationConfig) -> Settings:
    """The app settings ``run_simulation(config)`` runs with (nothing is simulated)."""
    seen: list[Settings] = []
    from_env = Settings.from_env

    def record(env: Mapping[str, str] | None = None, **overrides: str) -> Settings:
        seen.append(from_env(env, **overrides))
        return seen[-1]

    monkeypatch.setattr(Settings, "from_env", record)
    with pytest.raises(SettingsAccepted):
        run_simulation(config)
    return seen[-1]


@pytest.mark.usefixtures("stop_after_settings")
def test_a_profile_sets_the_review_timeout_the_runner_otherwise_shortens(monkeypatch: pytest.MonkeyPatch) -> None:
    default = _settings_of_run(monkeypatch, SimulationConfig(orders=1, seed=1))
    assert default.review_timeout == timedelta(seconds=600)  # no operator in a simulation: 10 minutes, not a day
    profile = Profile.parse({"settings": {"REVIEW_TIMEOUT_SECONDS": "45"}})
    # before: the runner's 600 s went on top of the profile's settings, which then did nothing
    assert _settings_of_run(monkeypatch, SimulationConfig(orders=1, seed=1, profile=profile)).review_timeout == (
        timedelta(seconds=45)
    )
