"""One time budget for a whole supervisor run (``supervisor/budget.py``), against the Cosmos DB protocol server.

Only the recoveries had a time budget (``RECOVERY_BUDGET``); the phases after them were bounded by count alone: a
page of due compensation rounds claimed, a page of owed failure records per state delivered. Under a Cosmos DB slow
to answer a run went on past its recoveries' 10 minutes for as long as those pages took (23 minutes measured with
8-10 s a request, 150 orders), towards the host's functionTimeout (30 minutes), which kills the run and restarts
the worker with every invocation on it. Now every phase starts no unit of work once the run's budget
(``RUN_BUDGET``) is spent, says so (``SupervisorPhaseStopped``), and leaves the rest where the next run finds it.

The slow Cosmos DB is the real store whose every call advances the run's clock (``tests.fakes.SlowStore``)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from azure.functions.timer import TimerRequest

import dependencies
import supervisor.blueprint
from adapters.clock import ManualClock
from adapters.cosmos.state_store import CosmosStateStore, update_once
from adapters.durable_client import PARALLEL_CALLS
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.states import ProcessState
from supervisor.budget import RUN_BUDGET, RunBudget
from supervisor.compensation_rounds import CompensationStart, start_compensations
from supervisor.run import RECOVERY_BUDGET, run_supervisor
from supervisor.scan import ScanState
from tests.fakes import RecordingSender, SlowStore
from tests.supervisor.conftest import MakeContext, expired
from tests.supervisor.test_owed_sweep_pages import failed
from tests.supervisor.test_redteam46_timer_budgets import handed_over

pytestmark = pytest.mark.cosmos

REQUEST = 30.0  # seconds a Cosmos DB request takes (throttled, the SDK waiting out its retries)
# The longest unit of work a phase may have under way when the budget is spent, at REQUEST a request (a claim
# or an owed delivery is a few requests): the run ends within the budget and that.
ONE_UNIT = timedelta(minutes=4)


def _stops(caplog: pytest.LogCaptureFixture) -> dict[str, logging.LogRecord]:
    return {r.__dict__["phase"]: r for r in caplog.records if getattr(r, "event", "") == "SupervisorPhaseStopped"}


def slow(states: CosmosStateStore, clock: ManualClock) -> SlowStore:
    return SlowStore(states, lambda s: clock.advance(timedelta(seconds=s)), REQUEST)


def test_the_phases_after_the_recoveries_stop_at_the_runs_budget_and_the_next_runs_do_the_rest(
    make_ctx: MakeContext,
    states: CosmosStateStore,
    clock: ManualClock,
    sender: RecordingSender,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """40 due compensation rounds and 40 owed failure records, each a few requests of 30 s: claimed and delivered
    one after the other, a run took over an hour past its recoveries (its claims alone 40 x 30 s). It now ends
    within ``RUN_BUDGET`` and one unit of work; the rounds it left are claimed by the next runs, each once (the owed
    sweep's going on: the next test)."""
    rounds = [f"c{n:02}" for n in range(40)]
    owed = [f"e{n:02}" for n in range(40)]
    for order_id in rounds:
        handed_over(states, order_id, clock)
    for n, order_id in enumerate(owed):
        failed(states, order_id, clock, timedelta(minutes=-1, seconds=n))
    ctx = make_ctx(states=slow(states, clock), MAX_FAILURES="3")
    scan = ScanState()

    began = clock.now()
    handed: list[CompensationStart] = []
    with caplog.at_level(logging.WARNING):
        # as the trigger runs it: each batch of claims started as soon as it is claimed (here, only recorded)
        first = run_supervisor(ctx, scan, start=lambda batch, _left: handed.extend(batch))
    took = clock.now() - began

    assert took < RUN_BUDGET + ONE_UNIT, f"the run took {took}"
    assert 0 < len(first.compensations) < len(rounds)
    assert handed == first.compensations
    stops = _stops(caplog)
    assert stops["compensation claims"].__dict__["claimed"] == len(first.compensations)
    assert stops["compensation claims"].__dict__["left"] == len(rounds) - stops["compensation claims"].__dict__["done"]
    assert stops["owed notifications"].__dict__["delivered"] == first.notified == 0  # the claims took the budget

    # the next runs go on with what was left: each round is claimed once, each owed record delivered once
    claimed = _started(states, first.compensations, clock)
    for _ in range(10):
        began = clock.now()
        report = run_supervisor(ctx, scan, start=lambda _batch, _left: None)
        assert clock.now() - began < RUN_BUDGET + ONE_UNIT, "a later run past its budget"
        assert not claimed & {start.order_id for start in report.compensations}, "a round claimed twice"
        claimed |= _started(states, report.compensations, clock)
        if claimed == set(rounds):
            break
    assert claimed == set(rounds)


def _started(states: CosmosStateStore, starts: list[CompensationStart], clock: ManualClock) -> set[str]:
    """The rounds claimed, as their orchestrations leave them once the trigger started them: under way, their
    records held to a later deadline (the trigger is not run here)."""
    for start in starts:
        record = states.get(start.order_id)
        assert record is not None and record.locked_by == start.instance_id
        update_once(states, record, lambda r: replace(r, complete_by=clock.now() + timedelta(hours=1)))
    return {start.order_id for start in starts}


def test_the_owed_sweep_stopped_within_its_page_goes_on_with_the_record_it_did_not_reach(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock, sender: RecordingSender
) -> None:
    """The sweep's cursor went to the end of its page before the page was delivered: a run stopped half-way through
    its page would leave the rest to the sweep's next pass over the whole query. It goes on after the last record it
    delivered."""
    owed = [f"e{n:02}" for n in range(12)]
    for n, order_id in enumerate(owed):
        failed(states, order_id, clock, timedelta(minutes=-1, seconds=n))
    # 5 s a request: the deliveries stay within their resend window (the first 10 minutes since each failure)
    ctx = make_ctx(
        states=SlowStore(states, lambda s: clock.advance(timedelta(seconds=s)), 5.0), SUPERVISOR_MAX_RECORDS="5"
    )
    scan = ScanState()

    # the budget leaves time for the empty scan and claims and a few deliveries (a few requests each)
    first = run_supervisor(ctx, scan, budget=RunBudget.start(clock, timedelta(seconds=30)))
    assert 0 < first.notified < 5
    run_supervisor(ctx, scan, budget=RunBudget.start(clock, timedelta(hours=1)))

    alerted = [a["orderId"] for a in sender.bodies(OPERATOR_ALERTS_QUEUE)]
    # the second run delivered the rest of the first page, then the next page: nothing skipped, nothing twice
    assert alerted == owed[: first.notified + 5], alerted


def test_recoveries_left_by_a_run_are_the_next_runs_first(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A run stopped at ``RECOVERY_BUDGET`` left the rest of its scan's records expired, but its scan's cursor after
    the last of them (``SUPERVISOR_MAX_RECORDS`` read): the next run went on after them, and they waited for the
    next scan from the start (one older than the window for the next catch-up). The next run now goes on with them."""
    for n in range(60):
        expired(states, f"o{n:02}", clock, timedelta(minutes=5, seconds=-n))
    ctx = make_ctx(states=slow(states, clock), MAX_FAILURES="3", SUPERVISOR_MAX_RECORDS="30")
    scan = ScanState()

    with caplog.at_level(logging.WARNING):
        first = run_supervisor(ctx, scan)
    assert 0 < first.recovered < 30
    stops = _stops(caplog)
    assert stops["recoveries"].__dict__["left"] == 30 - first.recovered
    assert stops["recoveries"].__dict__["budgetSeconds"] == RECOVERY_BUDGET.total_seconds()

    run_supervisor(ctx, scan)

    left = states.get(f"o{first.recovered:02}")  # the first the first run did not reach
    assert left is not None and left.process_state is ProcessState.PENDING, "not recovered by the next run"


class Client:
    """A Durable client that answers at once: every instance Running; records the starts and terminations."""

    def __init__(self) -> None:
        self.starts: list[str] = []
        self.terminated: list[str] = []

    async def start_new(self, name: str, instance_id: str | None = None, client_input: Any = None) -> str:
        self.starts.append(str(instance_id))
        return str(instance_id)

    async def get_status(self, instance_id: str, **_: Any) -> Any:
        return SimpleNamespace(runtime_status=SimpleNamespace(name="Running"))

    async def terminate(self, instance_id: str, reason: str) -> None:
        self.terminated.append(instance_id)


def test_a_trigger_run_past_its_budget_starts_every_round_it_claimed_and_terminates_nothing(
    functions: Any,
    make_ctx: MakeContext,
    states: CosmosStateStore,
    clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The budget runs from the trigger's start, through the Durable calls after the claims: the rounds claimed
    before it was spent are all started (a claim not started costs its round), the terminations (best effort, the
    instances' writes are fenced) are left."""
    for n in range(5):
        expired(states, f"o{n}", clock, timedelta(minutes=5))
    rounds = [f"c{n:02}" for n in range(40)]
    for order_id in rounds:
        handed_over(states, order_id, clock)
    dependencies.use_context(make_ctx(states=slow(states, clock), SUPERVISOR_BACKEND_WAIT_SECONDS="0"))
    monkeypatch.setattr(supervisor.blueprint, "SCAN_STATE", ScanState())
    client = Client()
    began = clock.now()
    try:
        with caplog.at_level(logging.WARNING):
            trigger = functions["supervisor"].func
            run = getattr(trigger, "client_function", None) or trigger.__wrapped__
            asyncio.run(run(timer=TimerRequest(past_due=False), client=client))
    finally:
        dependencies.use_context(None)

    assert clock.now() - began < RUN_BUDGET + ONE_UNIT
    claimed = [r for r in (states.get(order_id) for order_id in rounds) if r is not None and r.locked_by is not None]
    assert 0 < len(claimed) < len(rounds)
    assert sorted(client.starts) == sorted(str(r.locked_by) for r in claimed)
    assert client.terminated == []
    stops = _stops(caplog)
    assert (stops["terminations"].__dict__["done"], stops["terminations"].__dict__["left"]) == (0, 5)


@pytest.mark.parametrize("left", [timedelta(seconds=15), timedelta(seconds=-30)])
def test_the_rounds_a_slow_run_claimed_are_started_a_wave_at_least(left: timedelta, caplog: Any) -> None:
    """The trigger starts its claimed rounds within what is left of their start grace, counted from before the run
    (``left_of``), a wave at least (docs/supervisor.md). But the first wave asked the budget too, and a budget of
    ``DURABLE_CALL_TIMEOUT`` (20 s) or less never fits once any time passed: after a run whose recoveries and claims
    took 40 s of the 60 s grace, none of its claimed rounds was started, each left to cost a failed round."""
    starts = [CompensationStart(f"c{n}", f"c{n}:compensate:1", 1) for n in range(PARALLEL_CALLS + 2)]
    client = Client()

    with caplog.at_level(logging.WARNING):
        started = asyncio.run(start_compensations(client, starts, left))

    assert started == [s.instance_id for s in starts[:PARALLEL_CALLS]]  # the first wave
    assert sorted(client.starts) == sorted(started)
    failed = [r for r in caplog.records if getattr(r, "event", "") == "CompensationStartFailed"]
    # the rest are left claimed, retried by the supervisor as after a failed start
    assert [r.__dict__["instanceId"] for r in failed] == [s.instance_id for s in starts[PARALLEL_CALLS:]]
