"""One supervisor run hands an exhausted order to compensation and claims its first round; the timer
trigger then starts exactly that orchestration (never a forward attempt)."""

from __future__ import annotations

import asyncio
from typing import Any

from adapters.remote.simulators.fleet import simulated_services
from orchestrators import names
from supervisor.compensation_rounds import start_compensations
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.compensation.support import NEW_ROUND_INPUT, forward_step, submitted_and_claimed
from tests.contexts import context_with
from tests.deadlines import just_past
from tests.fakes import RecordingClient


def supervisor_run_after_a_death_between_steps(app_context: Any, clock: Any) -> tuple[Any, Any]:
    """One failure allowed; the first attempt reserved inventory and died before its next step (so
    before its next write: on the record the reservation is in flight until its deadline): the
    supervisor's run escalates the order to compensation."""
    ctx = context_with(
        app_context,
        settings=app_context.settings.from_env({}, MAX_FAILURES="1"),
        remote=dict(simulated_services(clock)),
    )
    submitted_and_claimed(ctx)
    forward_step(ctx, "o1:1", 1, "reserve-inventory", "inventory", {})
    clock.advance(just_past(ctx.settings.step_timeout))  # the attempt died between steps: the step's deadline passes
    return ctx, run_supervisor(ctx, ScanState())


def test_a_supervisor_run_escalates_to_compensation_and_starts_the_round(app_context, clock):
    ctx, report = supervisor_run_after_a_death_between_steps(app_context, clock)
    assert (report.found, report.compensating, report.escalated) == (1, 1, 0)
    assert report.to_terminate == ["o1:1"]
    client = RecordingClient()
    started: list[Any] = asyncio.run(start_compensations(client, report.compensations, ctx.settings.start_grace))
    assert started == ["o1:compensate:2"]
    started_round = {"orderId": "o1", "round": 2, **NEW_ROUND_INPUT}
    assert client.started == [(names.COMPENSATION, "o1:compensate:2", started_round)]


def test_a_failed_start_leaves_the_round_to_a_later_run(app_context, clock):
    ctx, report = supervisor_run_after_a_death_between_steps(app_context, clock)
    assert (
        asyncio.run(
            start_compensations(RecordingClient(fail_start=True), report.compensations, ctx.settings.start_grace)
        )
        == []
    )
    ctx = context_with(ctx, settings=ctx.settings.from_env({}, MAX_FAILURES="3"))
    clock.advance(just_past(ctx.settings.start_grace))  # round 2 was never started
    stuck = run_supervisor(ctx, ScanState())
    assert stuck.compensations == []  # round 2 counted as a failure; round 3 waits out a backoff
    record = ctx.states.get("o1")
    assert record is not None
    assert (record.locked_by, record.failure_count, record.history[-1].event) == (
        None,
        1,
        "CompensationRetryScheduled",
    )
    assert record.complete_by is not None
    backoff = record.complete_by - clock.now()
    assert ctx.settings.retry_backoff_base / 2 <= backoff <= ctx.settings.retry_backoff_base
    assert run_supervisor(ctx, ScanState()).compensations == []  # not before the backoff has passed
    clock.advance(just_past(backoff))
    later = run_supervisor(ctx, ScanState())
    assert [s.instance_id for s in later.compensations] == ["o1:compensate:3"]
    claimed = ctx.states.get("o1")
    assert claimed is not None and claimed.failure_count == 1  # the released round is not counted twice
