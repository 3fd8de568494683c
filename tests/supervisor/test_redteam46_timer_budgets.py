"""A timer run's Durable calls for many records fit a time budget (red team: a stalled Durable extension).

Every Durable client call is bounded (``DURABLE_CALL_TIMEOUT``, 20 s), but the starter's starts, the supervisor's
compensation starts and its terminations (a status read and a terminate each) were made one after the other: with
the extension stalled (its storage slow) a starter run of 50 claims took 50 x 20 s = 1,000 s, every start after the
first three past its claim's start grace (the supervisor had taken the attempt by then: the start only made a fenced
instance), and a supervisor run of 100 expired attempts 100 x 40 s = 4,000 s. Both timers are singletons
(``use_monitor``): every later sweep and recovery waited that long, and a run that reaches ``functionTimeout`` is
killed. The calls of each phase now run ``PARALLEL_CALLS`` at a time and none starts that could end past the phase's
budget (``adapters.durable_client.within_budget``); what is left is logged (``DurablePhaseStopped``) and is safe to
leave: a claim whose start was never tried is released by the starter at once (Pending again, not counted); a
termination is best effort (the instance's writes are fenced).

The stall here is a client whose calls never answer, through the triggers' own ``bounded_client``, the bound
shortened; ``tests/agents/test_redteam46_durable_session_shared.py`` stalls the runner's extension at its HTTP edge."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from datetime import timedelta
from typing import Any

import pytest
from azure.functions.timer import TimerRequest

import dependencies
import orchestrators.starter
import supervisor.backend_wait
import supervisor.blueprint
import supervisor.terminate
from adapters import durable_client
from adapters.cosmos.state_store import update_once
from domain import transitions
from domain.compensation import enter_compensation
from domain.states import ProcessState
from settings import Settings
from supervisor.scan import ScanState
from tests.orchestrators.support import sample_order
from tests.supervisor.conftest import claimed, expired_in_a_step

pytestmark = pytest.mark.cosmos

BOUND = 0.4  # DURABLE_CALL_TIMEOUT for the test
TERMINATIONS = 0.8  # TERMINATE_BUDGET for the test
RECORDS = 20  # sequential, a stalled run took RECORDS x BOUND (x 2 for terminations)


class StalledClient:
    """A Durable client whose calls never answer (the extension stalled); records what was asked."""

    def __init__(self) -> None:
        self.starts: list[str] = []
        self.reads: list[str] = []

    async def start_new(self, name: str, instance_id: str | None = None, client_input: Any = None) -> str:
        self.starts.append(str(instance_id))
        await asyncio.sleep(3600)
        return str(instance_id)

    async def get_status(self, instance_id: str, **_: Any) -> Any:
        self.reads.append(instance_id)
        await asyncio.sleep(3600)

    async def terminate(self, instance_id: str, reason: str) -> None:
        await asyncio.sleep(3600)


def handed_over(states: Any, order_id: str, clock: Any) -> None:
    """``order_id`` cancelled before any step: Compensating, unowned and due now (its first round to claim)."""
    at = clock.now() - timedelta(seconds=30)
    record = claimed(states, order_id, at, at + timedelta(seconds=60))
    owner = f"{order_id}:1"
    update_once(states, record, lambda r: enter_compensation(r, owner, "cancelled", at, owner=owner))


def _trigger(functions: Any, name: str) -> Any:
    user = functions[name].func
    return getattr(user, "client_function", None) or user.__wrapped__


def _timed(call: Any) -> float:
    began = time.monotonic()
    asyncio.run(call)
    return time.monotonic() - began


def _stopped(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == "DurablePhaseStopped"]


def timed(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[float]:
    """The seconds each call of ``module.name`` takes from now on: a run's Cosmos part, which is not what these
    tests measure (on a loaded machine it alone took more than their slack)."""
    real = getattr(module, name)
    took: list[float] = []

    def call(*args: Any) -> Any:
        began = time.monotonic()
        try:
            return real(*args)
        finally:
            took.append(time.monotonic() - began)

    monkeypatch.setattr(module, name, call)
    return took


@pytest.fixture
def bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(durable_client, "DURABLE_CALL_TIMEOUT", timedelta(seconds=BOUND))
    monkeypatch.setattr(supervisor.backend_wait, "DURABLE_CALL_TIMEOUT", timedelta(seconds=BOUND))


def test_a_starter_run_against_a_stalled_extension_ends_within_the_start_grace(
    functions, app_context, clock, bound, monkeypatch, caplog
):
    grace = 1.0  # START_GRACE_SECONDS: a start made after it is one the supervisor has taken over
    settings = Settings.from_env({}, START_GRACE_SECONDS=str(int(grace)), STARTER_BATCH_SIZE=str(RECORDS))
    ctx = dataclasses.replace(app_context, settings=settings)
    dependencies.use_context(ctx)
    for i in range(RECORDS):
        ctx.orders.create_or_verify(sample_order(f"o{i}"))
        ctx.states.create(transitions.new_record(f"o{i}", None, clock.now()))
    client = StalledClient()
    in_claims = timed(monkeypatch, orchestrators.starter, "sweep")

    with caplog.at_level(logging.INFO):
        took = _timed(_trigger(functions, "starter_sweep")(timer=None, client=client))

    # the claims and the starts within what the claims left of the grace (a wave at least)
    took -= sum(in_claims)
    assert took < grace + 0.5, f"a starter run's starts took {took:.1f} s"  # sequential: RECORDS x BOUND = 8 s
    assert 0 < len(client.starts) < RECORDS
    # nothing is lost: a claim whose start was tried is left for the supervisor at claim + start grace, one never
    # tried is Pending again for the next sweep (released by the starter: tests/orchestrators/test_untried_claims.py)
    for i in range(RECORDS):
        record = ctx.states.get(f"o{i}")
        assert record is not None and record.failure_count == 0
        if f"o{i}:1" in client.starts:
            assert record.process_state is ProcessState.PROCESSING and record.locked_by == f"o{i}:1"
            assert record.complete_by == clock.now() + timedelta(seconds=grace)
        else:
            assert record.process_state is ProcessState.PENDING and record.locked_by is None
    [stopped] = _stopped(caplog)
    assert stopped.__dict__["phase"] == "starts" and stopped.__dict__["skipped"] == RECORDS - len(client.starts)


def test_a_supervisor_run_against_a_stalled_extension_ends_within_its_budgets(
    functions, make_ctx, states, clock, bound, monkeypatch, caplog
):
    dependencies.use_context(make_ctx(START_GRACE_SECONDS="1", SUPERVISOR_MAX_RECORDS=str(RECORDS + 2)))
    monkeypatch.setattr(supervisor.blueprint, "SCAN_STATE", ScanState())
    monkeypatch.setattr(supervisor.terminate, "TERMINATE_BUDGET", timedelta(seconds=TERMINATIONS), raising=False)
    monkeypatch.setattr(supervisor.blueprint, "watch_dead_letters", lambda *_: None)
    in_store = timed(monkeypatch, supervisor.blueprint, "run_supervisor")  # 20 recoveries on the protocol server
    try:
        for i in range(RECORDS):
            expired_in_a_step(states, f"o{i}", clock, timedelta(seconds=30))
        for i in range(2):
            handed_over(states, f"undo{i}", clock)
        client = StalledClient()

        with caplog.at_level(logging.INFO):
            took = _timed(_trigger(functions, "supervisor")(timer=TimerRequest(past_due=False), client=client))
    finally:
        dependencies.use_context(None)

    # statuses (one bound) + starts (one wave: two rounds) + terminations (their budget); sequential: RECORDS x BOUND
    took -= sum(in_store)
    assert took < 2 * BOUND + TERMINATIONS + 0.5, f"a supervisor run's Durable calls took {took:.1f} s"
    started = set(client.starts)  # the rounds handed over were claimed and their starts tried
    assert len(started) == 2 and all(s.startswith(("undo0:compensate:", "undo1:compensate:")) for s in started)
    for i in range(RECORDS):  # every attempt was recovered whatever its termination did
        record = states.get(f"o{i}")
        assert record is not None and record.process_state is ProcessState.PENDING and record.failure_count == 1
    phases = {r.__dict__["phase"] for r in _stopped(caplog)}
    assert phases == {"terminations"}


def test_the_supervisor_starts_its_rounds_before_it_terminates(functions, make_ctx, states, clock, bound, monkeypatch):
    """Starts matter more than terminations (best effort): a run whose terminations stall still starts its rounds."""
    dependencies.use_context(make_ctx(SUPERVISOR_MAX_RECORDS="10"))
    monkeypatch.setattr(supervisor.blueprint, "SCAN_STATE", ScanState())
    monkeypatch.setattr(supervisor.blueprint, "watch_dead_letters", lambda *_: None)
    order: list[str] = []

    class Client(StalledClient):
        async def start_new(self, name: str, instance_id: str | None = None, client_input: Any = None) -> str:
            order.append("start")
            return str(instance_id)

        async def get_status(self, instance_id: str, **_: Any) -> Any:
            order.append("read")
            await asyncio.sleep(3600)

    try:
        expired_in_a_step(states, "o1", clock, timedelta(seconds=30))
        handed_over(states, "undo", clock)
        asyncio.run(_trigger(functions, "supervisor")(timer=TimerRequest(past_due=False), client=Client()))
    finally:
        dependencies.use_context(None)

    # the run's status reads come first (read_statuses), then its starts, then its terminations' reads
    assert "start" in order, order
    after = order[order.index("start") + 1 :]
    assert after and set(after) == {"read"}, order
