"""Red team of the settings pair check (``CIRCUIT_HEALTH_CACHE_SECONDS`` at most half of ``CIRCUIT_COOLDOWN_SECONDS``)
in the runner: a run's overrides go on top of its profile's settings, so they are checked together,
not each against the defaults (a pair each half of which is set in a different place)."""

from __future__ import annotations

import pytest

from localrun import simulation
from localrun.profile import Profile
from localrun.simulation import SimulationConfig, run_simulation
from settings import SettingsError


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
