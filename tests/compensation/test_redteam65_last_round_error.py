"""Red team (compensation, session 65): "did not finish in N rounds; last: <what the last round met>" named what an
earlier round met.

A round that writes why it ended (``release_undo``: its undo refused by an open circuit, counted when
``MAX_OUTAGE_WAIT_MINUTES`` is 0) leaves that reason in ``lastError``. The next round's claim kept it, so when that
round died without writing anything (its reply lost, its orchestration gone: "deadline missed"), the order failed
"did not finish in 2 rounds; last: inventory unavailable (circuit open): not called", the circuit long closed and the
last round's undo possibly done (the local runner, agents' clocks behind and payment outages, before the outage
waits took the round's word: 4 such alerts in one run). Now each claim starts its round's ``lastError`` afresh (why
the order is compensated), so "last" is the last round's. The real supervisor claims over the Cosmos protocol server."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from adapters.cosmos.state_store import update_once
from domain.compensation import begin_undo, enter_compensation, release_undo
from domain.states import ProcessState
from supervisor.compensation_rounds import claim_due_compensations
from tests.compensation.support import forward_step, stored_record, submitted_and_claimed
from tests.contexts import context_with

pytestmark = pytest.mark.cosmos

CAUSE = "cancelled by the client: customer changed mind"
MET = "inventory unavailable (circuit open): not called"


def _handed_to_compensation(ctx, clock):
    """o1 reserved, then cancelled; ``MAX_FAILURES`` 2 and no outage waited out (a released round is counted)."""
    ctx = context_with(ctx, settings=replace(ctx.settings, max_failures=2, max_outage_wait=timedelta(0)))
    submitted_and_claimed(ctx)
    forward_step(ctx, "o1:1", 1, "reserve-inventory", "inventory", {})
    update_once(ctx.states, stored_record(ctx), lambda r: enter_compensation(r, "client", CAUSE, clock.now()))
    return ctx


def _round_begins_its_undo(ctx, clock) -> tuple[str, datetime]:
    """The supervisor claims the next round, which begins the undo of entry 1; its instance id and undo deadline."""
    [start] = claim_due_compensations(ctx).starts
    me, deadline = start.instance_id, clock.now() + ctx.settings.step_timeout
    update_once(ctx.states, stored_record(ctx), lambda r: begin_undo(r, me, 1, f"{me}:undo", deadline, clock.now()))
    return me, deadline


def _round_says(ctx, clock, me: str, said: str) -> None:
    """The round ends on its undo's refusal by the open circuit, saying so (``release_undo``)."""
    update_once(ctx.states, stored_record(ctx), lambda r: release_undo(r, me, 1, said, clock.now()))


def _counted(ctx, clock) -> None:
    claim_due_compensations(ctx)  # the round counted (backed off), or, the second time, CompensationFailed
    clock.advance(ctx.settings.retry_backoff_max + timedelta(seconds=1))


def test_the_last_round_that_said_nothing_is_deadline_missed_not_an_earlier_rounds_reason(ctx, clock):
    ctx = _handed_to_compensation(ctx, clock)
    me, _ = _round_begins_its_undo(ctx, clock)
    _round_says(ctx, clock, me, MET)
    _counted(ctx, clock)
    _, deadline = _round_begins_its_undo(ctx, clock)  # round 2 dies: its reply never comes, nothing written
    clock.set(deadline + ctx.settings.supervisor_grace + timedelta(seconds=1))
    _counted(ctx, clock)
    record = stored_record(ctx)
    assert record.process_state is ProcessState.COMPENSATION_FAILED, record.history[-1]
    assert record.last_error == "compensation did not finish in 2 rounds; last: deadline missed"


def test_the_last_rounds_own_reason_is_still_named(ctx, clock):
    """Round 2 ends on the open circuit too: its reason is the last one (as before)."""
    ctx = _handed_to_compensation(ctx, clock)
    for number in (1, 2):
        me, _ = _round_begins_its_undo(ctx, clock)
        _round_says(ctx, clock, me, f"{MET} ({number})")
        _counted(ctx, clock)
    record = stored_record(ctx)
    assert record.process_state is ProcessState.COMPENSATION_FAILED, record.history[-1]
    assert record.last_error == f"compensation did not finish in 2 rounds; last: {MET} (2)"
