"""Red team (clocks), at the store: the supervisor's queries (``CosmosStateStore.expired_page``, compared as
text in Cosmos DB) take a record someone holds only ``SUPERVISOR_GRACE_SECONDS`` after its ``completeBy`` (15 s
as deployed), and a record nobody holds at its ``completeBy`` (tests/domain/test_redteam_clocks.py). Before, a
supervisor whose clock ran 5 s ahead of the orchestration's found a live attempt at its deadline, counted it
failed and released it; the attempt's write of a reply that came in time was then refused."""

from __future__ import annotations

from datetime import timedelta

import pytest

from adapters.cosmos.state_store import update_fenced, update_once
from domain import compensation as c
from domain import transitions
from domain.errors import FencingLost
from domain.states import ProcessState
from settings import SETTINGS
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.supervisor.conftest import claimed

pytestmark = pytest.mark.cosmos

SKEW = timedelta(seconds=5)
DEPLOYED = next(s.written for s in SETTINGS if s.name == "SUPERVISOR_GRACE_SECONDS")  # the Bicep's


def test_a_supervisor_clock_ahead_by_seconds_leaves_a_live_attempt_its_write(make_ctx, states, clock):
    ctx = make_ctx(SUPERVISOR_GRACE_SECONDS=DEPLOYED)
    deadline = clock.now() + ctx.settings.step_timeout
    claimed(states, "o-live", clock.now(), deadline)
    clock.set(deadline + SKEW)  # the supervisor's clock; true time is just before the deadline

    report = run_supervisor(ctx, ScanState())

    assert (report.found, report.recovered) == (0, 0)
    # the attempt's write (its agent replied in time) lands
    try:
        written = update_fenced(
            states,
            "o-live",
            "o-live:1",
            lambda r: transitions.begin_step(
                r, "o-live:1", "reserve-inventory", "inventory", "req", deadline + ctx.settings.step_timeout, deadline
            ),
        )
    except FencingLost:
        pytest.fail("the supervisor took the attempt before its deadline passed on the attempt's own clock")
    assert (written.process_state, written.failure_count) == (ProcessState.PROCESSING, 0)


def test_past_the_grace_the_attempt_is_recovered(make_ctx, states, clock):
    ctx = make_ctx(SUPERVISOR_GRACE_SECONDS=DEPLOYED)
    deadline = clock.now() + ctx.settings.step_timeout
    claimed(states, "o-gone", clock.now(), deadline)
    clock.set(deadline + ctx.settings.supervisor_grace - timedelta(milliseconds=1))
    assert run_supervisor(ctx, ScanState()).found == 0
    clock.set(deadline + ctx.settings.supervisor_grace)
    report = run_supervisor(ctx, ScanState())
    assert (report.found, report.recovered) == (1, 1)


def test_a_live_round_is_left_its_grace_and_a_handed_over_record_is_claimed_at_its_time(make_ctx, states, clock):
    ctx = make_ctx(SUPERVISOR_GRACE_SECONDS=DEPLOYED)
    now = clock.now()
    handed = states.create(c.enter_compensation(transitions.new_record("o-handed", None, now), "op", "undo", now))
    live = states.create(c.enter_compensation(transitions.new_record("o-round", None, now), "op", "undo", now))
    live = update_once(states, live, lambda r: c.claim_compensation(r, now, ctx.settings.start_grace, 3, "supervisor"))
    clock.set(now + ctx.settings.start_grace + SKEW)  # the round's start grace passed on the supervisor's clock only

    report = run_supervisor(ctx, ScanState())

    assert [s.order_id for s in report.compensations] == [handed.order_id]  # due at its time, no grace
    after = states.get("o-round")
    assert after is not None and (after.locked_by, after.failure_count) == (live.locked_by, 0)
