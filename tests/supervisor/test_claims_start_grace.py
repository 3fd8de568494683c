"""Every round the supervisor claims, and every attempt the starter claims, is started within its start grace, under
a Cosmos DB slow to answer (8-10 s a request: throttled, the SDK waiting out its retries).

A claim's ``completeBy`` was the claims loop's start plus ``START_GRACE_SECONDS`` (60 s) and the trigger started
the claims after the whole loop (the supervisor's after its owed sweep and outage alerts too): with about 10 s a
claim, the rounds claimed later in a loop were written already past their deadline, and every round began after
its ``completeBy``; the next run counted each as a failed round that never ran (a round of the order's
``MAX_FAILURES``, then ``CompensationFailed`` and a page). Now a claim's ``completeBy`` is its own write time plus
the grace, a batch of claims ends when a wave of starts would no longer end within its first claim's grace
(``adapters.durable_client.claims_close``), and the trigger starts each batch as soon as it is claimed; without a
trigger to start them (a run called on its own) the claims stop there and leave the rest due for the next run.

The slow Cosmos DB is the real store whose every call advances the run's clock (``tests.fakes.SlowStore``)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from azure.functions.timer import TimerRequest

import dependencies
import supervisor.blueprint
from adapters.clock import ManualClock
from adapters.cosmos.state_store import CosmosStateStore
from domain import transitions
from domain.states import ProcessState
from settings import Settings
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.fakes import SlowStore
from tests.orchestrators.support import sample_order
from tests.supervisor.conftest import MakeContext
from tests.supervisor.test_redteam46_timer_budgets import handed_over

pytestmark = pytest.mark.cosmos

REQUEST = 10.0  # seconds a Cosmos DB request takes
ROUNDS = 12


class Client:
    """A Durable client that answers at once; records each start with the run's time and the claim's ``completeBy``
    then (read from the store itself, not the slow one)."""

    def __init__(self, states: CosmosStateStore, clock: ManualClock) -> None:
        self._states, self._clock = states, clock
        self.starts: dict[str, tuple[datetime, datetime | None]] = {}

    async def start_new(self, name: str, instance_id: str | None = None, client_input: Any = None) -> str:
        order_id = str(client_input["orderId"])
        record = self._states.get(order_id)
        assert record is not None
        self.starts[str(instance_id)] = (self._clock.now(), record.complete_by)
        return str(instance_id)

    async def get_status(self, instance_id: str, **_: Any) -> Any:
        return SimpleNamespace(runtime_status=SimpleNamespace(name="Running"))

    async def terminate(self, instance_id: str, reason: str) -> None:
        pass


def _run(functions: Any, name: str, client: Client) -> None:
    user = functions[name].func
    trigger = getattr(user, "client_function", None) or user.__wrapped__
    asyncio.run(trigger(timer=TimerRequest(past_due=False), client=client))


def _late(client: Client) -> dict[str, str]:
    """The starts made at or past their claim's ``completeBy`` (the supervisor may have taken them over)."""
    return {
        instance: f"started {at:%H:%M:%S}, completeBy {by:%H:%M:%S}" if by else "no completeBy"
        for instance, (at, by) in client.starts.items()
        if by is None or at >= by
    }


def test_every_round_a_slow_supervisor_run_claims_is_started_before_its_deadline(
    functions: Any, make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock, monkeypatch: Any
) -> None:
    for n in range(ROUNDS):
        handed_over(states, f"c{n:02}", clock)
    slow = SlowStore(states, lambda s: clock.advance(timedelta(seconds=s)), REQUEST)
    dependencies.use_context(make_ctx(states=slow, SUPERVISOR_BACKEND_WAIT_SECONDS="0"))
    monkeypatch.setattr(supervisor.blueprint, "SCAN_STATE", ScanState())
    client = Client(states, clock)
    try:
        _run(functions, "supervisor", client)
    finally:
        dependencies.use_context(None)

    claimed = {r.locked_by for r in map(states.get, [f"c{n:02}" for n in range(ROUNDS)]) if r and r.locked_by}
    assert claimed == set(client.starts), "a claimed round not started"
    assert len(claimed) > 3, "the claims went on in batches within the run's budget"
    assert _late(client) == {}


def test_a_slow_run_without_a_trigger_claims_only_what_it_can_start_in_time_and_leaves_the_rest_due(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Its claims are started once it returns (``report.compensations``): it stops claiming when a later claim
    could not be started within the first one's grace, saying so; the rest are claimed by the next runs."""
    order_ids = [f"c{n:02}" for n in range(ROUNDS)]
    for order_id in order_ids:
        handed_over(states, order_id, clock)
    ctx = make_ctx(states=SlowStore(states, lambda s: clock.advance(timedelta(seconds=s)), REQUEST))

    with caplog.at_level(logging.WARNING):
        first = run_supervisor(ctx, ScanState())

    [stop] = [r for r in caplog.records if getattr(r, "event", "") == "SupervisorPhaseStopped"]
    assert (stop.__dict__["phase"], stop.__dict__["reason"]) == ("compensation claims", "start grace")
    assert 0 < len(first.compensations) < ROUNDS
    assert stop.__dict__["left"] == ROUNDS - len(first.compensations)
    assert len({start.start_by for start in first.compensations}) == len(first.compensations) > 1, "one date"
    first_by = min(start.start_by for start in first.compensations if start.start_by is not None)
    for start in first.compensations:  # each claim dated at its write: the grace from there
        record = states.get(start.order_id)
        assert record is not None and record.complete_by is not None
        assert record.complete_by == start.start_by and record.complete_by >= first_by
    left = [r for r in map(states.get, order_ids) if r is not None and r.locked_by is None]
    assert len(left) == ROUNDS - len(first.compensations), "the rounds left are still due, unclaimed"


def test_every_attempt_a_slow_starter_sweep_claims_is_started_before_its_deadline(
    functions: Any, app_context: Any, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The starter's claims were dated at each write already, but started after the whole sweep (an order read and
    a claim each): the first ones past their ``completeBy``, each then an attempt the supervisor counts as failed.
    The sweep now stops when a later claim could not be started within the first one's grace, saying so
    (``StarterClaimsStopped``); the records left are still Pending, claimed by the next sweep."""
    states = app_context.states
    slow = SlowStore(states, lambda s: clock.advance(timedelta(seconds=s)), REQUEST)
    settings = Settings.from_env({}, STARTER_BATCH_SIZE=str(ROUNDS))
    dependencies.use_context(dataclasses.replace(app_context, states=slow, settings=settings))
    for n in range(ROUNDS):
        app_context.orders.create_or_verify(sample_order(f"o{n:02}"))
        states.create(transitions.new_record(f"o{n:02}", None, clock.now() - timedelta(minutes=5)))
    client = Client(states, clock)

    with caplog.at_level(logging.WARNING):
        _run(functions, "starter_sweep", client)

    records = [states.get(f"o{n:02}") for n in range(ROUNDS)]
    claimed = {r.locked_by for r in records if r is not None and r.locked_by is not None}
    assert claimed == set(client.starts) and claimed
    assert _late(client) == {}
    pending = [r for r in records if r is not None and r.process_state is ProcessState.PENDING]
    assert len(pending) == ROUNDS - len(claimed) > 0
    [stop] = [r for r in caplog.records if getattr(r, "event", "") == "StarterClaimsStopped"]
    assert stop.__dict__["left"] == len(pending)
