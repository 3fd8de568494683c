"""Red team (clocks): every deadline on a record is written by one host's clock (a step's by the orchestration's
replay time, a claim's by the starter's) and judged by another's (the supervisor's). A record someone holds is
taken from its owner only ``grace`` (``SUPERVISOR_GRACE_SECONDS``, 15 s as deployed) after its ``completeBy``: the
margin for host clocks that disagree by seconds and for the write of an attempt whose agent replied just before the
deadline, still on its way (``transitions.past_due``).

Before, the supervisor took a record the moment its clock reached ``completeBy``: a supervisor whose clock ran
5 s ahead of the orchestration's took a live attempt 5 s before its deadline; the attempt's reply, in time, found
its next write refused (``FencingLost``) and the order was charged a failed attempt it never had (at
``MAX_FAILURES``: ``Error`` or compensation for an order whose step succeeded in time)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from domain import compensation as c
from domain import transitions as t
from domain.errors import IllegalTransition
from domain.states import ProcessState
from settings import SETTINGS, Settings

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
START_GRACE = timedelta(seconds=60)
STEP_TIMEOUT = timedelta(seconds=60)
SKEW = timedelta(seconds=5)  # the supervisor's clock ahead of the host that wrote the deadline
BACKOFF = timedelta(seconds=10)
# the supervisor's grace as deployed (the Bicep's SUPERVISOR_GRACE_SECONDS)
GRACE = Settings.from_env(
    {}, SUPERVISOR_GRACE_SECONDS=next(s.written for s in SETTINGS if s.name == "SUPERVISOR_GRACE_SECONDS")
).supervisor_grace


def _live_step():
    claimed = t.claim(t.new_record("o-1", "replies", NOW), NOW, START_GRACE)
    deadline = NOW + STEP_TIMEOUT
    return t.begin_step(claimed, "o-1:1", "reserve-inventory", "inventory", "req", deadline, NOW), deadline


def test_a_supervisor_whose_clock_runs_ahead_does_not_take_a_live_attempt_at_its_deadline() -> None:
    began, deadline = _live_step()
    # True time: the deadline, less the skew. The agent's reply came in time; the attempt's next write is on its way.
    judged = deadline + SKEW  # what the supervisor's clock reads
    assert not t.is_expired(began, judged, GRACE)
    with pytest.raises(IllegalTransition):
        t.supervisor_retry(began, "o-1:1", judged, max_failures=3, backoff=BACKOFF, grace=GRACE)
    # the attempt's write of the step's result lands, with the next step's deadline
    landed = t.complete_step(
        began, "o-1:1", "reserve-inventory", {"reservationId": "R1"}, judged + STEP_TIMEOUT, judged
    )
    assert (landed.process_state, landed.locked_by, landed.failure_count) == (ProcessState.PROCESSING, "o-1:1", 0)


def test_an_attempt_that_is_gone_is_taken_once_the_grace_has_passed() -> None:
    began, deadline = _live_step()
    assert not t.is_expired(began, deadline + GRACE - timedelta(microseconds=1), GRACE)
    retried = t.supervisor_retry(began, "o-1:1", deadline + GRACE, max_failures=3, backoff=BACKOFF, grace=GRACE)
    assert (retried.process_state, retried.failure_count, retried.locked_by) == (ProcessState.PENDING, 1, None)
    # the grace covers the clocks' disagreement and the write on its way: seconds, well under a step's timeout
    assert timedelta(seconds=5) <= GRACE <= timedelta(seconds=30)


def test_a_live_compensation_round_is_not_taken_for_stuck_at_its_undo_deadline() -> None:
    handed = c.enter_compensation(t.new_record("o-1", None, NOW), "cancellation", "cancelled", NOW)
    claimed = c.claim_compensation(handed, NOW, START_GRACE, max_rounds=3, by="supervisor")
    owner = str(claimed.locked_by)
    deadline = NOW + START_GRACE
    judged = deadline + SKEW
    assert not c.is_compensation_due(claimed, judged, GRACE)
    with pytest.raises(IllegalTransition):
        c.back_off_stuck_round(claimed, judged, BACKOFF, max_rounds=3, by="supervisor", grace=GRACE)
    with pytest.raises(IllegalTransition):
        c.claim_compensation(claimed, judged, START_GRACE, max_rounds=3, by="supervisor", grace=GRACE)
    stuck = c.back_off_stuck_round(claimed, deadline + GRACE, BACKOFF, max_rounds=3, by="supervisor", grace=GRACE)
    assert (stuck.locked_by, stuck.failure_count) == (None, 1)
    assert owner != stuck.locked_by


def test_a_record_nobody_holds_is_due_at_its_time_without_the_grace() -> None:
    """The grace protects an owner; a not-before time (a backoff, a compensation handed over) has none to protect."""
    handed = c.enter_compensation(t.new_record("o-1", None, NOW), "cancellation", "cancelled", NOW)
    assert c.is_compensation_due(handed, NOW, GRACE)
    backed_off = t.supervisor_retry(
        _live_step()[0], "o-1:1", NOW + STEP_TIMEOUT + GRACE, max_failures=3, backoff=BACKOFF, grace=GRACE
    )
    assert t.is_claimable(backed_off, NOW + STEP_TIMEOUT + GRACE + BACKOFF)
