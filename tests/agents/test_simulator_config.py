"""Simulator configs from fault-profile entries (what the local runner passes)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from adapters.remote.simulators.config import Outage, SimulatorConfig
from tests.agents.support import START


def test_a_profile_entry_becomes_a_config():
    config = SimulatorConfig.from_profile(
        {
            "latency_ms": [20, 80],
            "transient_error_rate": 0.25,
            "permanent_error_rate": 0.05,
            "outages": [{"start_s": 30, "duration_s": 12.5}],
        },
        origin=START,
    )
    assert config.latency_ms == (20.0, 80.0)
    assert config.transient_error_rate == 0.25
    assert config.permanent_error_rate == 0.05
    assert config.response_loss_rate == 0.0
    assert config.outages == (Outage(timedelta(seconds=30), timedelta(seconds=12.5)),)
    assert config.origin == START


def test_an_empty_profile_entry_is_a_perfect_service():
    assert SimulatorConfig.from_profile({}) == SimulatorConfig()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"transient_eror_rate": 0.1}, "unknown simulator setting"),
        ({"transient_error_rate": 1.5}, "within"),
        ({"transient_error_rate": 0.6, "permanent_error_rate": 0.6}, "must not exceed"),
        ({"latency_ms": [50, 10]}, "latency_ms"),
        ({"latency_ms": [10]}, "latency_ms"),
        ({"outages": [{"start_s": -1, "duration_s": 5}]}, "negative"),
    ],
)
def test_a_bad_profile_entry_is_refused(entry, message):
    with pytest.raises(ValueError, match=message):
        SimulatorConfig.from_profile(entry)
