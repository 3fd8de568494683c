"""Red team of ``RecentHealth.forget``: a write sent before the forgetting, whose response comes back
after it, is as old as a read that began before it (its write may have landed before the failed
request's, which the forgetting stands for): it must stay out too (against the Cosmos protocol server)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.errors import StoreUnavailable
from adapters.cosmos.health_store import CosmosHealthStore, RecentHealth, read_health
from contracts.names import STATE_CONTAINER
from domain.circuit import CircuitPolicy, CircuitState, DependencyHealth
from order_agents.circuit_gate import DependencyGate
from tests.agents.support import START
from tests.circuit.support import SlowHealthStore

pytestmark = pytest.mark.cosmos
POLICY = CircuitPolicy(threshold=3, cooldown=timedelta(seconds=30), cooldown_max=timedelta(seconds=120), probes=1)
TTL = timedelta(seconds=5)


class LostResponse(SlowHealthStore):
    """Every write lands, and its response is lost: the caller sees the store unavailable."""

    def save(self, doc: DependencyHealth) -> DependencyHealth:
        self.inner.save(doc)
        raise StoreUnavailable("the response to the health write was lost")


@pytest.fixture
def store(cosmos_db: Any) -> SlowHealthStore:
    return SlowHealthStore(CosmosHealthStore(cosmos_db.get_container_client(STATE_CONTAINER)))


def test_a_write_that_landed_before_a_lost_write_stays_out_though_its_response_comes_after_the_forgetting(store):
    clock = ManualClock(START)
    shared = RecentHealth(TTL)
    first = DependencyGate(store, clock, POLICY, shared)
    lost = DependencyGate(LostResponse(store.inner), clock, POLICY, shared)
    for _ in range(POLICY.threshold - 2):
        first.failed("payment")
    # the next failure lands (closed, one short of the threshold); before its response comes back,
    # another invocation's failure lands on top of it (open) and its response is lost: forgotten
    store.after_next_save = lambda: lost.failed("payment")
    first.failed("payment")
    assert read_health(store.inner, "payment", clock.now()).state is CircuitState.OPEN
    clock.advance(timedelta(seconds=1))
    # before: the closed view written before the opening came back after the forgetting, and was kept
    assert not DependencyGate(store, clock, POLICY, shared).admit("payment")


def test_a_write_sent_before_the_forgetting_does_not_replace_a_read_begun_after_it(store):
    clock = ManualClock(START)
    shared = RecentHealth(TTL)
    first = DependencyGate(store, clock, POLICY, shared)
    lost = DependencyGate(LostResponse(store.inner), clock, POLICY, shared)
    reader = DependencyGate(store, clock, POLICY, shared)
    for _ in range(POLICY.threshold - 2):
        first.failed("payment")

    def meanwhile() -> None:
        lost.failed("payment")  # opens it, response lost: forgotten
        assert not reader.admit("payment")  # reads it open after the forgetting, remembers it open

    store.after_next_save = meanwhile
    first.failed("payment")  # wrote closed before all that; its response comes back last
    clock.advance(timedelta(seconds=1))
    assert not DependencyGate(store, clock, POLICY, shared).admit("payment")


def test_a_write_answered_after_a_later_write_does_not_replace_it(store):
    """No forgetting needed: two invocations of one process write in turn, the first one's response
    comes back last. Its view (closed) is older than the second's (open), though its answer is later."""
    clock = ManualClock(START)
    shared = RecentHealth(TTL)
    first = DependencyGate(store, clock, POLICY, shared)
    second = DependencyGate(store, clock, POLICY, shared)
    for _ in range(POLICY.threshold - 2):
        first.failed("payment")
    store.after_next_save = lambda: second.failed("payment")  # reads the first's write, opens it
    first.failed("payment")
    assert read_health(store.inner, "payment", clock.now()).state is CircuitState.OPEN
    clock.advance(timedelta(seconds=1))
    assert not DependencyGate(store, clock, POLICY, shared).admit("payment")


def test_forgetting_keeps_out_a_write_sent_before_it_whatever_comes_after():
    recent = RecentHealth(TTL)
    sent = recent.reading(START)  # a write is sent
    recent.forget("payment", START)  # another request fails
    began = recent.reading(START)  # a read begins after it
    newer = DependencyHealth.fresh("payment", START)
    recent.remember(newer, began)
    recent.remember(DependencyHealth.fresh("payment", START), recent.landed(sent))  # back last
    assert recent.fresh("payment", START) is None  # which is newer is unknown: read again


def test_reads_alone_keep_the_view_read_last_as_before():
    recent = RecentHealth(TTL)
    first, second = recent.reading(START), recent.reading(START)
    older, newer = DependencyHealth.fresh("payment", START), DependencyHealth.fresh("payment", START)
    recent.remember(older, first)
    recent.remember(newer, second)
    assert recent.fresh("payment", START) is newer
    sent = recent.reading(START)  # one update: a write sent after both, and answered
    written = DependencyHealth.fresh("payment", START)
    recent.remember(written, recent.landed(sent))
    assert recent.fresh("payment", START) is written


def test_a_slow_answer_does_not_stretch_the_window_past_the_cool_down(store):
    """The window shorter than the cool-down (settings refuse otherwise) is meant to end before any
    opening it missed lets probes through. A write's view was trusted from when its answer came back:
    an opening by another instance that landed after the write, before the slow answer, then reached
    half-open while the closed view was still trusted, and this instance called past ``CIRCUIT_PROBES``."""
    clock = ManualClock(START)
    window = POLICY.cooldown - timedelta(seconds=1)  # the longest the settings accept
    mine = DependencyGate(store, clock, POLICY, RecentHealth(window))
    other = DependencyGate(store.inner, clock, POLICY, RecentHealth(window))  # another instance
    for _ in range(POLICY.threshold - 2):
        mine.failed("payment")
    opened = clock.now()

    def meanwhile() -> None:  # this instance's write landed (closed, one short); its answer is slow
        other.failed("payment")  # another instance's failure opens it
        clock.advance(timedelta(seconds=2))

    store.after_next_save = meanwhile
    mine.failed("payment")
    clock.advance(opened + POLICY.cooldown + timedelta(milliseconds=500) - clock.now())
    assert other.admit("payment")  # half-open: the one probe is granted
    assert not mine.admit("payment")  # before: admitted on the closed view written before the opening
