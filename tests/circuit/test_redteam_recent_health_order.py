"""Red team of the agents' dependency-health window (``RecentHealth``, ``CIRCUIT_HEALTH_CACHE_SECONDS``):
one process's invocations share one ``RecentHealth``, and their reads finish in any order. A view
read earlier must never replace one read later (against the Cosmos protocol server)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.health_store import CosmosHealthStore, RecentHealth, read_health
from contracts.names import STATE_CONTAINER
from domain.circuit import CircuitPolicy, CircuitState
from order_agents.circuit_gate import DependencyGate
from tests.agents.support import START
from tests.circuit.support import SlowHealthStore

pytestmark = pytest.mark.cosmos
POLICY = CircuitPolicy(threshold=3, cooldown=timedelta(seconds=30), cooldown_max=timedelta(seconds=120), probes=1)
TTL = timedelta(seconds=5)


@pytest.fixture
def store(cosmos_db: Any) -> SlowHealthStore:
    return SlowHealthStore(CosmosHealthStore(cosmos_db.get_container_client(STATE_CONTAINER)))


def test_a_probe_reports_its_success_although_an_older_closed_view_was_remembered_after_its_grant(store):
    clock = ManualClock(START)
    shared = RecentHealth(TTL)  # one process: every invocation's gate shares it
    slow = DependencyGate(store, clock, POLICY, shared)
    failing = DependencyGate(store, clock, POLICY, shared)
    probe = DependencyGate(store, clock, POLICY, shared)

    def meanwhile() -> None:  # while the slow read (closed, nothing counted) is on its way back
        for _ in range(POLICY.threshold):
            failing.failed("payment")  # the service goes down: open
        clock.advance(POLICY.cooldown)
        assert probe.admit("payment")  # the probe is granted (half-open)

    store.during_next_read = meanwhile
    assert slow.admit("payment")  # read before the outage (closed), remembered after the grant
    assert read_health(store.inner, "payment", clock.now()).state is CircuitState.HALF_OPEN
    probe.succeeded("payment")  # the service is back: the probe closes the circuit
    health = read_health(store.inner, "payment", clock.now())
    assert health.state is CircuitState.CLOSED, health  # before: half-open, its probe lost until it lapsed
    clock.advance(timedelta(seconds=1))
    assert failing.admit("payment")


def test_an_opening_is_not_hidden_by_a_closed_view_read_before_it(store):
    clock = ManualClock(START)
    shared = RecentHealth(TTL)
    slow = DependencyGate(store, clock, POLICY, shared)
    failing = DependencyGate(store, clock, POLICY, shared)

    def meanwhile() -> None:
        for _ in range(POLICY.threshold):
            failing.failed("payment")  # opens it, and remembers it open

    store.during_next_read = meanwhile
    assert slow.admit("payment")  # its read saw the circuit closed, before the opening
    clock.advance(timedelta(seconds=1))
    assert not DependencyGate(store, clock, POLICY, shared).admit("payment")  # before: admitted on the older view


def test_an_opening_is_not_hidden_by_a_read_that_began_before_it_landed(store):
    clock = ManualClock(START)
    shared = RecentHealth(TTL)
    failing = DependencyGate(store, clock, POLICY, shared)
    other = DependencyGate(store, clock, POLICY, shared)
    for _ in range(POLICY.threshold - 1):
        failing.failed("payment")
    clock.advance(TTL)  # what the process knew has expired
    store.during_next_save = lambda: other.admit("payment")  # reads it closed, before the opening lands
    failing.failed("payment")  # read closed, then writes it open
    assert read_health(store.inner, "payment", clock.now()).state is CircuitState.OPEN
    clock.advance(timedelta(seconds=1))
    assert not DependencyGate(store, clock, POLICY, shared).admit("payment")


def test_recent_health_keeps_the_view_read_last():
    from domain.circuit import DependencyHealth

    recent = RecentHealth(TTL)
    older = DependencyHealth.fresh("payment", START)
    newer = DependencyHealth.fresh("payment", START)
    first, second = recent.reading(START), recent.reading(START)  # two reads begin, in this order
    recent.remember(newer, second)
    recent.remember(older, first)  # read earlier, back later
    assert recent.fresh("payment", START + timedelta(seconds=3)) is newer
    assert recent.fresh("payment", START + TTL) is None


def test_a_success_between_other_instances_failures_resets_the_count(store):
    """The circuit opens on ``threshold`` failures in a row, any instances: another instance's success
    between them resets the count, though that instance last saw nothing counted (its window fresh).
    Before, its success was skipped: with 20 instances at 100 calls/s and 20 % transient errors and no
    outage, a simulation of the gates opened the circuit 27 times in 10 minutes (0 without the window)."""
    clock = ManualClock(START)
    mine = DependencyGate(store, clock, POLICY, RecentHealth(TTL))  # its own process
    others = [DependencyGate(store, clock, POLICY, RecentHealth(TTL)) for _ in range(POLICY.threshold)]
    assert mine.admit("payment")  # reads it closed, nothing counted
    for other in others:
        clock.advance(timedelta(milliseconds=200))
        assert mine.admit("payment")
        mine.succeeded("payment")  # the service answers this instance
        assert other.admit("payment")
        other.failed("payment")  # and fails another's call
    health = read_health(store.inner, "payment", clock.now())
    assert health.state is CircuitState.CLOSED, health  # never two failures in a row
    assert health.consecutive_failures == 1


class Unavailable:
    """A health store whose every request fails (throttled past the SDK's retries, or a lost response
    to a write that may have landed): the gate fails open and forgets what it knew."""

    def get(self, dependency: str) -> Any:
        from adapters.cosmos.errors import StoreUnavailable

        raise StoreUnavailable("the health document could not be read")

    def save(self, doc: Any) -> Any:
        raise AssertionError("never reached: every update reads first")

    def count_waiting(self, reason: str) -> int:
        return 0


def test_a_read_that_began_before_a_failed_update_does_not_come_back_after_it_was_forgotten(store):
    """A health request that failed (a lost response may hide a committed write) makes the process
    forget the dependency. A read that began before that, and comes back after, is older than what was
    forgotten: before, nothing was left to compare it with, and its closed view admitted calls for the
    whole window while the circuit was open."""
    clock = ManualClock(START)
    shared = RecentHealth(TTL)
    slow = DependencyGate(store, clock, POLICY, shared)
    failing = DependencyGate(store, clock, POLICY, shared)
    broken = DependencyGate(Unavailable(), clock, POLICY, shared)  # type: ignore[arg-type]

    def meanwhile() -> None:  # while the slow read (closed) is on its way back
        for _ in range(POLICY.threshold):
            failing.failed("payment")  # open, remembered open
        assert broken.admit("payment")  # the store fails: calls anyway, and forgets what it knew

    store.during_next_read = meanwhile
    assert slow.admit("payment")  # read closed before the opening, back after the forgetting
    assert read_health(store.inner, "payment", clock.now()).state is CircuitState.OPEN
    clock.advance(timedelta(seconds=1))
    assert not DependencyGate(store, clock, POLICY, shared).admit("payment")  # before: admitted on the old view


def test_forgetting_keeps_out_only_reads_that_began_before_it():
    from domain.circuit import DependencyHealth

    recent = RecentHealth(TTL)
    before = recent.reading(START)
    recent.forget("payment", START)
    after = recent.reading(START)
    view = DependencyHealth.fresh("payment", START)
    recent.remember(view, before)
    assert recent.fresh("payment", START) is None
    recent.remember(view, after)
    assert recent.fresh("payment", START + timedelta(seconds=1)) is view


def test_a_host_restart_starts_with_nothing_known():
    from domain.circuit import DependencyHealth

    recent = RecentHealth(TTL)
    view = DependencyHealth.fresh("payment", START)
    recent.remember(view, recent.reading(START))
    recent.forget_all()
    assert recent.fresh("payment", START) is None
    stale = recent.reading(START)  # nothing began before the restart can come back: a new process
    recent.remember(view, stale)
    assert recent.fresh("payment", START) is view


def test_the_runner_s_host_restart_empties_what_the_process_kept():
    """The runner's host restart keeps the Python objects: ``forget_process_memory`` is what makes it
    a new process for the caches (``localrun/simulation.py`` calls it on each restart)."""
    from adapters.clock import ManualClock as Clock
    from domain.circuit import DependencyHealth
    from tests.agents.support import make_context

    ctx = make_context(Clock(START))
    view = DependencyHealth.fresh("payment", START)
    ctx.recent_health.remember(view, ctx.recent_health.reading(START))
    assert ctx.recent_health.fresh("payment", START) is view
    ctx.forget_process_memory()
    assert ctx.recent_health.fresh("payment", START) is None
