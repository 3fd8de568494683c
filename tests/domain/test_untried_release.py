"""A claim whose start was never tried is released by whoever claimed it (``transitions.release_untried``, a round's
``compensation.release_untried_round``): only while it is still exactly that claim, nothing counted, ``attempt``
kept so that the next claim numbers a new instance id (the starter's and the supervisor's tests run them on the
Cosmos DB protocol server: ``tests/orchestrators/test_untried_claims.py``,
``tests/supervisor/test_untried_rounds.py``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from domain import transitions as t
from domain.compensation import (
    ROUND_NOT_TRIED,
    begin_undo,
    claim_compensation,
    enter_compensation,
    release_untried_round,
)
from domain.errors import FencingLost, IllegalTransition
from domain.records import RECEIVED_SAID, StateRecord, attempt_as_shown
from domain.states import ProcessState

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
START_GRACE = timedelta(seconds=60)
LATER = NOW + timedelta(seconds=20)
WHY = "the run's time for starts was spent"


def missed_twice_then_claimed() -> StateRecord:
    """Attempt 4, claimed at ``NOW`` after one failure counted and two starts the backend never had."""
    record = t.new_record("o-1", "replies", NOW - 4 * START_GRACE)
    record = t.claim(record, NOW - 4 * START_GRACE, START_GRACE)
    record = t.supervisor_retry(record, "o-1:1", NOW - 3 * START_GRACE, 3, timedelta(0))
    for k in (3, 2):
        record = t.claim(record, NOW - k * START_GRACE, START_GRACE)
        record = t.start_missed(record, record.locked_by, NOW - (k - 1) * START_GRACE, NOW - (k - 1) * START_GRACE)
    return t.claim(record, NOW, START_GRACE)


def test_an_untried_claim_is_pending_at_once_with_nothing_counted_and_its_id_never_reused():
    record = missed_twice_then_claimed()
    assert (record.locked_by, record.failure_count, record.starts_missed) == ("o-1:4", 1, 2)

    released = t.release_untried(record, "o-1:4", LATER, WHY)

    assert released.process_state is ProcessState.PENDING
    assert (released.locked_by, released.complete_by, released.current_step) == (None, None, None)
    assert (released.failure_count, released.starts_missed, released.attempt) == (1, 2, 4)
    assert released.last_error == record.last_error
    assert (released.history[-1].event, released.history[-1].by) == (t.START_NOT_TRIED, t.STARTER)
    assert t.is_claimable(released, LATER)
    assert attempt_as_shown(released).attempt == 4  # what the record shows agrees: attempt only grows
    assert t.claim(released, LATER, START_GRACE).locked_by == "o-1:5"


def test_only_the_claim_itself_is_released():
    record = t.claim(t.new_record("o-1", "replies", NOW), NOW, START_GRACE)
    noted = record.with_changes(LATER, RECEIVED_SAID, t.SUBMISSION, "said")  # a side note: still the claim
    assert t.release_untried(noted, "o-1:1", LATER, WHY).process_state is ProcessState.PENDING
    with pytest.raises(FencingLost):  # another owner's
        t.release_untried(record, "o-1:2", LATER, WHY)
    began = t.begin_step(record, "o-1:1", "reserve", "inventory", "req-1", LATER + START_GRACE, LATER)
    with pytest.raises(IllegalTransition):  # the instance made a move: it ran
        t.release_untried(began, "o-1:1", LATER, WHY)
    cancelled = enter_compensation(record, "client", "cancelled", LATER)
    with pytest.raises(FencingLost):  # moved on, nobody holds it
        t.release_untried(cancelled, "o-1:1", LATER, WHY)


def test_an_untried_round_is_due_again_at_once_with_nothing_counted():
    attempt = t.claim(t.new_record("o-1", "replies", NOW), NOW, START_GRACE)
    # its reservation begun, its outcome unknown: the rounds have an undo to make
    attempt = t.begin_step(attempt, "o-1:1", "reserve-inventory", "inventory", "req-1", NOW + START_GRACE, NOW)
    handed = enter_compensation(attempt, "client", "cancelled", NOW)
    round_2 = claim_compensation(handed, NOW, START_GRACE, 3, t.SUPERVISOR)
    assert round_2.locked_by == "o-1:compensate:2" and round_2.compensation

    released = release_untried_round(round_2, "o-1:compensate:2", LATER, t.SUPERVISOR, WHY)

    assert released.process_state is ProcessState.COMPENSATING
    assert (released.locked_by, released.complete_by) == (None, LATER)
    assert (released.failure_count, released.starts_missed, released.attempt) == (0, 0, 2)
    assert released.history[-1].event == ROUND_NOT_TRIED
    again = claim_compensation(released, LATER, START_GRACE, 3, t.SUPERVISOR)
    assert (again.locked_by, again.failure_count) == ("o-1:compensate:3", 0)  # not counted as a stuck round

    with pytest.raises(FencingLost):
        release_untried_round(round_2, "o-1:compensate:3", LATER, t.SUPERVISOR, WHY)
    seq = round_2.compensation[0].seq
    begun = begin_undo(round_2, "o-1:compensate:2", seq, "undo-1", LATER + START_GRACE, LATER)
    with pytest.raises(IllegalTransition):  # an undo begun is a move of the round's own: it ran
        release_untried_round(begun, "o-1:compensate:2", LATER, t.SUPERVISOR, WHY)
