from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from adapters.cosmos.mapping import from_document, to_document
from domain import transitions as t
from domain.errors import FencingLost, IllegalTransition
from domain.records import StateRecord
from domain.retry import exponential_backoff
from domain.states import ProcessState, StepStatus

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(seconds=60)


def pending() -> StateRecord:
    return t.new_record("o-1", "replies", NOW)


def test_new_record_is_pending_unowned_and_unscheduled():
    r = pending()
    assert (r.process_state, r.locked_by, r.complete_by, r.failure_count, r.attempt) == (
        ProcessState.PENDING,
        None,
        None,
        0,
        0,
    )
    assert r.history[-1].event == "Received"


def test_claim_moves_to_processing_owned_by_the_next_attempt():
    r = t.claim(pending(), NOW, GRACE)
    assert r.process_state is ProcessState.PROCESSING
    assert r.attempt == 1
    assert r.locked_by == "o-1:1"
    assert r.complete_by == NOW + GRACE


def test_claim_refuses_a_record_before_its_not_before_time():
    r = replace(pending(), complete_by=NOW + timedelta(seconds=5))
    with pytest.raises(IllegalTransition):
        t.claim(r, NOW, GRACE)
    assert t.claim(r, NOW + timedelta(seconds=5), GRACE).attempt == 1


def test_claim_refuses_a_locked_or_processing_record():
    claimed = t.claim(pending(), NOW, GRACE)
    with pytest.raises(IllegalTransition):
        t.claim(claimed, NOW, GRACE)


def test_a_record_created_claimed_is_exactly_what_the_create_and_the_claim_write():
    created = t.new_claimed_record("o-1", "replies", NOW, GRACE)
    assert created == t.claim(pending(), NOW, GRACE)  # every field, history included
    assert (created.process_state, created.attempt, created.locked_by, created.complete_by) == (
        ProcessState.PROCESSING,
        1,
        "o-1:1",
        NOW + GRACE,
    )
    assert (created.failure_count, created.reply_to, created.version, created.updated_at) == (0, "replies", None, NOW)
    # both moves stay visible in the history: the submission's, then the starter's claim naming the owner
    assert [(h.event, h.by, h.detail) for h in created.history] == [
        ("Received", t.SUBMISSION, ""),
        ("Claimed", t.STARTER, "o-1:1"),
    ]


def test_a_record_created_claimed_belongs_to_attempt_1_and_expires_after_the_start_grace():
    created = t.new_claimed_record("o-1", None, NOW, GRACE)
    assert not t.is_claimable(created, NOW + GRACE)  # no second owner for attempt 1
    with pytest.raises(IllegalTransition):
        t.claim(created, NOW + GRACE, GRACE)
    began = t.begin_step(created, "o-1:1", "reserve-inventory", "inventory", "req", NOW + GRACE, NOW)
    assert began.current_step == "reserve-inventory"
    with pytest.raises(FencingLost):
        t.begin_step(created, "o-1:2", "reserve-inventory", "inventory", "req", NOW + GRACE, NOW)
    # never started (a lost start, or a lost create response): the supervisor retries it after the grace
    assert not t.is_expired(created, NOW + GRACE - timedelta(microseconds=1))
    retried = t.supervisor_retry(created, "o-1:1", NOW + GRACE, max_failures=3, backoff=timedelta(seconds=10))
    assert (retried.process_state, retried.failure_count, retried.locked_by) == (ProcessState.PENDING, 1, None)
    assert t.claim(retried, NOW + GRACE + timedelta(seconds=10), GRACE).locked_by == "o-1:2"


def test_a_stale_owner_cannot_begin_a_step():
    claimed = t.claim(pending(), NOW, GRACE)
    with pytest.raises(FencingLost):
        t.begin_step(claimed, "o-1:0", "reserve-inventory", "inventory", "req", NOW + GRACE, NOW)


def test_step_lifecycle_records_result_and_moves_deadline():
    r = t.claim(pending(), NOW, GRACE)
    r = t.begin_step(r, "o-1:1", "reserve-inventory", "inventory", "req-1", NOW + timedelta(seconds=30), NOW)
    assert r.current_step == "reserve-inventory"
    assert r.complete_by == NOW + timedelta(seconds=30)
    assert r.steps["reserve-inventory"].status is StepStatus.IN_PROGRESS
    later = NOW + timedelta(seconds=3)
    r = t.complete_step(r, "o-1:1", "reserve-inventory", {"reservationId": "R1"}, later + GRACE, later)
    assert r.steps["reserve-inventory"].status is StepStatus.SUCCEEDED
    assert r.steps["reserve-inventory"].result == {"reservationId": "R1"}
    assert r.current_step is None
    assert r.complete_by == later + GRACE


def test_processed_releases_the_lock():
    r = t.mark_processed(t.claim(pending(), NOW, GRACE), "o-1:1", NOW)
    assert (r.process_state, r.locked_by, r.complete_by) == (ProcessState.PROCESSED, None, None)


def test_fail_records_the_reason_and_unlocks():
    r = t.claim(pending(), NOW, GRACE)
    r = t.begin_step(r, "o-1:1", "charge-payment", "payment", "req", NOW + GRACE, NOW)
    r = t.fail(r, "o-1:1", "charge-payment", "card declined", NOW)
    assert r.process_state is ProcessState.ERROR
    assert r.locked_by is None
    assert r.last_error == "card declined"
    assert r.steps["charge-payment"].status is StepStatus.FAILED


def test_release_for_retry_pulls_the_deadline_to_now_and_keeps_the_lock():
    r = t.release_for_retry(t.claim(pending(), NOW, GRACE), "o-1:1", "charge-payment", "timeout", NOW)
    assert r.complete_by == NOW
    assert r.locked_by == "o-1:1"
    assert t.is_expired(r, NOW)


def test_supervisor_retry_under_threshold_goes_back_to_pending_with_backoff():
    r = t.claim(pending(), NOW, GRACE)
    later = NOW + GRACE
    r = t.supervisor_retry(r, "o-1:1", later, max_failures=3, backoff=timedelta(seconds=10))
    assert r.process_state is ProcessState.PENDING
    assert (r.locked_by, r.failure_count) == (None, 1)
    assert r.complete_by == later + timedelta(seconds=10)


def test_supervisor_retry_at_threshold_escalates_to_error():
    r = replace(t.claim(pending(), NOW, GRACE), failure_count=2)
    r = t.supervisor_retry(r, "o-1:1", NOW + GRACE, max_failures=3, backoff=timedelta(seconds=10))
    assert r.process_state is ProcessState.ERROR
    assert r.failure_count == 3
    assert "retries exhausted" in (r.last_error or "")


def test_supervisor_retry_refuses_a_record_not_yet_expired_or_owned_by_another_attempt():
    r = t.claim(pending(), NOW, GRACE)
    with pytest.raises(IllegalTransition):
        t.supervisor_retry(r, "o-1:1", NOW, 3, timedelta(0))  # not expired yet
    with pytest.raises(IllegalTransition):
        t.supervisor_retry(r, "o-1:7", NOW + GRACE, 3, timedelta(0))  # someone else's attempt


def test_a_missed_deadline_is_not_blamed_on_an_earlier_attempts_error():
    """lastError is the current attempt's: the next claim clears it, so the reason the supervisor
    gives for that attempt's missed deadline is its own, not the previous attempt's error."""
    owner = t.claim(pending(), NOW, GRACE)
    first = t.release_for_retry(owner, "o-1:1", "charge-payment", "payment unavailable (circuit open)", NOW)
    retried = t.supervisor_retry(first, "o-1:1", NOW, max_failures=3, backoff=timedelta(seconds=10))
    assert retried.last_error == "payment unavailable (circuit open)"  # why it is pending again

    later = NOW + timedelta(seconds=10)
    second = t.claim(retried, later, GRACE)
    assert second.last_error is None
    missed = t.supervisor_retry(second, "o-1:2", later + GRACE, max_failures=3, backoff=timedelta(seconds=10))
    assert missed.last_error == "step (between steps) missed its deadline"


def test_resubmit_only_from_error_and_resets_failures():
    with pytest.raises(IllegalTransition):
        t.resubmit(pending(), "ops@example.com", "why", NOW)
    r = replace(t.claim(pending(), NOW, GRACE), failure_count=3)
    r = t.fail(r, "o-1:1", None, "boom", NOW)
    r = t.resubmit(r, "ops@example.com", "fixed the card", NOW)
    assert (r.process_state, r.failure_count, r.last_error) == (ProcessState.PENDING, 0, None)
    assert r.history[-1].by == "ops@example.com"


def test_record_round_trips_through_its_document_with_fixed_width_timestamps():
    r = t.claim(pending(), NOW, GRACE)
    doc = to_document(r)
    assert doc["completeBy"] == "2026-03-01T12:01:00.000000Z"
    assert doc["lockedBy"] == "o-1:1"
    assert "_etag" not in doc and "version" not in doc
    back = from_document(StateRecord, {**doc, "_etag": "abc"})
    assert back.version is None  # the stored version is the store's business (adapters/cosmos/documents.py)
    assert back.complete_by == r.complete_by


def test_backoff_doubles_with_equal_jitter_and_a_cap():
    rng = random.Random(3)
    base, cap = timedelta(seconds=10), timedelta(seconds=60)
    for failures, full in ((1, 10), (2, 20), (3, 40), (4, 60), (9, 60)):
        delay = exponential_backoff(failures, base, cap, rng).total_seconds()
        assert full / 2 <= delay <= full
