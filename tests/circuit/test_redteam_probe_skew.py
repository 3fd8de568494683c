"""Red team of ``probeAfter`` dated by a clock running ahead (``domain.circuit.DependencyHealth.probe_due``): an agent
whose clock runs an hour ahead opens a circuit (or fails its probe), writing ``probeAfter`` a cool-down after its
clock, an hour into the other agents' future. Before, they failed fast for the hour (unless that agent probed): a
dependency held open for the length of the skew, its orders waiting it out. So did a ``probeAfter`` edited by hand
far into the future, for ever. Now the first agent to read it re-dates it a cool-down from its own clock, never
further than the longest cool-down, and says so (``DependencyProbeRedated``).

The agents' gates against the Cosmos protocol server, each with its own clock."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.health_store import CosmosHealthStore, read_health, update_health
from contracts.names import STATE_CONTAINER
from domain.circuit import CircuitState
from order_agents.circuit_gate import DependencyGate
from tests.agents.support import START
from tests.circuit.support import POLICY

pytestmark = pytest.mark.cosmos
AHEAD = timedelta(hours=1)  # the skewed agent's clock against the others'


@pytest.fixture
def store(cosmos_db: Any) -> CosmosHealthStore:
    return CosmosHealthStore(cosmos_db.get_container_client(STATE_CONTAINER))


def redated(caplog: Any) -> list[dict[str, Any]]:
    return [r.__dict__ for r in caplog.records if getattr(r, "event", "") == "DependencyProbeRedated"]


def test_an_opening_by_an_agent_whose_clock_runs_an_hour_ahead_holds_the_others_back_one_cool_down_not_the_hour(
    store, caplog
):
    caplog.set_level(logging.INFO)
    fast, clock = ManualClock(START + AHEAD), ManualClock(START)
    ahead, other = DependencyGate(store, fast, POLICY), DependencyGate(store, clock, POLICY)
    for _ in range(POLICY.threshold):
        ahead.failed("payment")
    assert read_health(store, "payment", START).probe_after == START + AHEAD + POLICY.cooldown
    assert not other.admit("payment")  # open: fails fast, and re-dates the probe by its clock
    doc = read_health(store, "payment", START)
    assert doc.state is CircuitState.OPEN and doc.probe_after == START + POLICY.cooldown
    assert [r["aheadSeconds"] for r in redated(caplog)] == [(AHEAD + POLICY.cooldown).total_seconds()]
    clock.advance(POLICY.cooldown - timedelta(seconds=1))
    assert not other.admit("payment")  # still cooling down: nothing re-dated again
    assert len(redated(caplog)) == 1
    clock.advance(timedelta(seconds=1))
    assert other.admit("payment")  # the probe, a cool-down after it first read the opening (before: an hour)
    assert read_health(store, "payment", clock.now()).state is CircuitState.HALF_OPEN


def test_a_failed_probe_by_an_agent_whose_clock_runs_ahead_holds_the_others_back_no_longer_than_the_cap(store):
    fast, clock = ManualClock(START + AHEAD), ManualClock(START)
    ahead, other = DependencyGate(store, fast, POLICY), DependencyGate(store, clock, POLICY)
    for _ in range(POLICY.threshold):
        other.failed("payment")
    fast.advance(POLICY.cooldown)
    clock.advance(POLICY.cooldown)
    assert ahead.admit("payment")  # its probe (its clock is past the cool-down anyway)
    ahead.failed("payment")  # open again, probeAfter a doubled cool-down after its clock
    assert read_health(store, "payment", clock.now()).probe_after == fast.now() + POLICY.cooldown_after(1)
    clock.advance(POLICY.cooldown_max)
    assert not other.admit("payment")  # re-dated by this clock
    clock.advance(POLICY.cooldown_after(1))
    assert other.admit("payment")


def test_a_probe_after_edited_by_hand_to_the_year_9998_holds_the_circuit_open_one_cool_down(store):
    """Before, every agent failed fast until the year 9998: the circuit held open for ever."""
    clock = ManualClock(START)
    gate = DependencyGate(store, clock, POLICY)
    for _ in range(POLICY.threshold):
        gate.failed("inventory")
    far = datetime.fromisoformat("9998-12-31T00:00:00+00:00")
    update_health(store, "inventory", lambda h: (replace(h, probe_after=far), None), START)
    assert read_health(store, "inventory", START).probe_after == far
    assert not gate.admit("inventory")
    assert read_health(store, "inventory", START).probe_after == START + POLICY.cooldown
    clock.advance(POLICY.cooldown)
    assert gate.admit("inventory")


def test_a_probe_after_within_the_cap_of_a_clock_a_little_ahead_is_kept_as_written(store, caplog):
    """Clocks a few seconds apart (NTP): the opener's cool-down stands, nothing is written or logged."""
    caplog.set_level(logging.INFO)
    fast, clock = ManualClock(START + timedelta(seconds=5)), ManualClock(START)
    ahead, other = DependencyGate(store, fast, POLICY), DependencyGate(store, clock, POLICY)
    for _ in range(POLICY.threshold):
        ahead.failed("shipping")
    before = read_health(store, "shipping", START)
    assert not other.admit("shipping")
    after = read_health(store, "shipping", START)
    assert after.version == before.version and after.probe_after == START + timedelta(seconds=5) + POLICY.cooldown
    assert redated(caplog) == []
    clock.advance(POLICY.cooldown)
    assert not other.admit("shipping")
    clock.advance(timedelta(seconds=5))
    assert other.admit("shipping")


def test_a_probe_granted_by_an_agent_whose_clock_runs_ahead_and_never_reported_lapses_a_cool_down_after_it_is_read(
    store, caplog
):
    """The agent an hour ahead took the probe and died before reporting it: before, the grant lapsed an hour late by
    the others' clocks, every call refused meanwhile (half-open, its one probe outstanding)."""
    caplog.set_level(logging.INFO)
    fast, clock = ManualClock(START + AHEAD), ManualClock(START)
    ahead, other = DependencyGate(store, fast, POLICY), DependencyGate(store, clock, POLICY)
    for _ in range(POLICY.threshold):
        other.failed("shipping")
    clock.advance(POLICY.cooldown)
    assert ahead.admit("shipping")  # granted, never reported
    assert not other.admit("shipping")  # its grant outstanding: re-dated by this clock
    assert [r["state"] for r in redated(caplog)] == [CircuitState.HALF_OPEN]
    clock.advance(POLICY.cooldown - timedelta(seconds=1))
    assert not other.admit("shipping")
    clock.advance(timedelta(seconds=1))
    assert other.admit("shipping")  # the lapsed grant's probe taken over
