"""A compensation round that got stuck (its orchestration died, or missed an undo deadline) counts
as a failure and the next round waits out a backoff, as a forward retry does: the supervisor used
to claim the next round at once, so a failing service met every round back to back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from domain import compensation as c
from domain import outage
from domain import transitions as t
from domain.circuit import waiting_reason
from domain.errors import IllegalTransition
from domain.records import StateRecord
from domain.states import ProcessState

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(seconds=60)
BACKOFF = timedelta(seconds=7)


def _stuck_round(failures: int = 0) -> StateRecord:
    handed = c.enter_compensation(t.new_record("o-1", None, NOW), "cancellation", "cancelled", NOW)
    claimed = c.claim_compensation(handed, NOW, GRACE, max_rounds=3, by="supervisor")
    return claimed.with_changes(NOW, "test", "test", "", failure_count=failures)


def test_a_stuck_round_is_counted_and_released_until_the_backoff_has_passed() -> None:
    stuck = _stuck_round()
    at = NOW + GRACE + timedelta(seconds=1)
    released = c.back_off_stuck_round(stuck, at, BACKOFF, max_rounds=3, by="supervisor")
    assert released.process_state is ProcessState.COMPENSATING
    assert (released.locked_by, released.complete_by, released.failure_count) == (None, at + BACKOFF, 1)
    assert released.history[-1].event == "CompensationRetryScheduled"
    assert not c.is_compensation_due(released, at + BACKOFF - timedelta(microseconds=1))
    claimed = c.claim_compensation(released, at + BACKOFF, GRACE, max_rounds=3, by="supervisor")
    assert (claimed.attempt, claimed.failure_count) == (stuck.attempt + 1, 1)  # not counted twice
    assert claimed.locked_by == c.compensation_instance_id("o-1", stuck.attempt + 1)


def test_the_last_allowed_round_stuck_is_compensation_failed() -> None:
    stuck = _stuck_round(failures=2)
    failed = c.back_off_stuck_round(stuck, NOW + GRACE * 2, BACKOFF, max_rounds=3, by="supervisor")
    assert failed.process_state is ProcessState.COMPENSATION_FAILED
    assert failed.failure_count == 3 and failed.locked_by is None
    assert "did not finish in 3 rounds" in (failed.last_error or "")


def test_only_a_due_owned_round_backs_off() -> None:
    stuck = _stuck_round()
    with pytest.raises(IllegalTransition):
        c.back_off_stuck_round(stuck, NOW, BACKOFF, max_rounds=3, by="supervisor")  # not due yet
    released = c.back_off_stuck_round(stuck, NOW + GRACE * 2, BACKOFF, max_rounds=3, by="supervisor")
    with pytest.raises(IllegalTransition):
        c.back_off_stuck_round(released, NOW + GRACE * 3, BACKOFF, max_rounds=3, by="supervisor")  # not owned


def test_a_round_claimed_after_an_outage_wait_is_not_failed_as_still_waiting() -> None:
    """A round released to wait out an open circuit says "waiting for payment (circuit open)" while it waits;
    the round claimed after the wait runs on a closed circuit, so if it gets stuck (a lost reply) the order's
    ``CompensationFailed`` reason is its missed deadline, not the wait that was over (fuzz seed 4023)."""
    stuck = _stuck_round(failures=2)
    at = NOW + GRACE * 2
    waiting = outage.wait_compensation_out(stuck, at, at + BACKOFF, "payment", at)
    assert waiting.last_error == waiting_reason("payment")
    claimed = c.claim_compensation(waiting, at + BACKOFF, GRACE, max_rounds=3, by="supervisor")
    assert claimed.last_error == "cancelled" and claimed.failure_count == 2  # why it is compensated, no wait
    failed = c.back_off_stuck_round(claimed, at + BACKOFF + GRACE * 2, BACKOFF, max_rounds=3, by="supervisor")
    assert failed.process_state is ProcessState.COMPENSATION_FAILED
    assert failed.last_error == "compensation did not finish in 3 rounds; last: deadline missed"


def test_a_round_s_own_error_is_kept_until_the_next_claim_which_starts_afresh() -> None:
    """The stuck round's error stays on the record while it waits out its backoff; the next round starts with why the
    order is compensated (session 65: kept, an earlier round's error was named "last" when the rounds ran out on a
    round that said nothing: tests/compensation/test_redteam65_last_round_error.py)."""
    stuck = _stuck_round().with_changes(NOW, "test", "test", "", last_error="entry 1: refund timed out")
    released = c.back_off_stuck_round(stuck, NOW + GRACE * 2, BACKOFF, 3, "supervisor")
    assert released.last_error == "entry 1: refund timed out"
    claimed = c.claim_compensation(released, NOW + GRACE * 3, GRACE, 3, "supervisor")
    assert claimed.last_error == "cancelled"
