"""An attempt the Durable backend never had (its ``start_new`` failed, its instance unknown at its deadline) did no
work: the supervisor releases it without counting a failure (``transitions.start_missed``), up to
``MAX_STARTS_MISSED`` in a row. Before, only ``supervisor_retry`` could take such an attempt, counting it: three
starts failing in a row on a Durable outage of seconds (a storage account throttling) made the order Error."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from adapters.cosmos.mapping import from_document, to_document
from domain import transitions as t
from domain.compensation import (
    claim_compensation,
    enter_compensation,
    release_missed_round,
    round_never_began,
    round_start_missable,
)
from domain.errors import IllegalTransition
from domain.records import StateRecord
from domain.states import ProcessState

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
START_GRACE = timedelta(seconds=60)
DUE = NOW + START_GRACE
BACKOFF = timedelta(seconds=10)


def claimed(attempts: int = 1) -> StateRecord:
    record = t.new_record("o-1", "replies", NOW)
    for _ in range(attempts - 1):
        record = t.claim(record, NOW, START_GRACE)
        record = t.start_missed(record, record.locked_by, DUE, NOW)
    return t.claim(record, NOW, START_GRACE)


def test_an_attempt_that_never_began_is_released_uncounted():
    record = claimed()
    assert t.never_began(record)

    released = t.start_missed(record, "o-1:1", DUE, DUE + BACKOFF)

    assert released.process_state is ProcessState.PENDING
    assert (released.locked_by, released.failure_count, released.starts_missed) == (None, 0, 1)
    assert released.complete_by == DUE + BACKOFF
    assert released.history[-1].event == t.START_MISSED
    assert released.last_error == "the Durable backend never had o-1:1: its start failed (1 in a row)"
    again = t.claim(released, DUE + BACKOFF, START_GRACE)
    assert again.locked_by == "o-1:2"  # a new attempt, under a new instance id


def test_an_attempt_that_began_a_step_is_not_a_missed_start():
    record = claimed()
    began = t.begin_step(record, "o-1:1", "reserve", "inventory", "req-1", DUE, NOW)
    assert not t.never_began(began)
    with pytest.raises(IllegalTransition):
        t.start_missed(began, "o-1:1", DUE, DUE + BACKOFF)


def test_side_notes_after_the_claim_do_not_make_it_a_move():
    record = claimed().with_changes(NOW, "PaymentNotified", "submission", "pn-1")
    assert t.never_began(record)


def test_only_the_expired_owner_and_only_past_its_deadline():
    record = claimed()
    with pytest.raises(IllegalTransition):
        t.start_missed(record, "o-1:1", NOW, NOW + BACKOFF)  # not expired yet
    with pytest.raises(IllegalTransition):
        t.start_missed(record, "o-1:7", DUE, DUE + BACKOFF)  # another attempt's


def test_at_most_max_starts_missed_in_a_row_then_it_counts():
    record = claimed(t.MAX_STARTS_MISSED + 1)
    assert record.starts_missed == t.MAX_STARTS_MISSED and record.failure_count == 0
    assert not t.start_missable(record)
    with pytest.raises(IllegalTransition):
        t.start_missed(record, record.locked_by, DUE, DUE + BACKOFF)
    counted = t.supervisor_retry(record, record.locked_by, DUE, max_failures=3, backoff=BACKOFF)
    assert (counted.failure_count, counted.starts_missed) == (1, t.MAX_STARTS_MISSED)  # each further one counts


def test_a_step_begun_resets_the_run_of_missed_starts():
    record = claimed(3)
    assert record.starts_missed == 2
    began = t.begin_step(record, record.locked_by or "", "reserve", "inventory", "req-1", DUE, NOW)
    assert began.starts_missed == 0


def test_a_resubmit_resets_the_run_of_missed_starts():
    record = claimed(t.MAX_STARTS_MISSED + 1)
    failed = t.supervisor_retry(replace(record, failure_count=2), record.locked_by, DUE, 3, BACKOFF)
    assert failed.process_state is ProcessState.ERROR
    assert t.resubmit(failed, "ops@example.com", "task hub fixed", DUE).starts_missed == 0


def test_the_count_is_stored_and_an_older_document_reads_none_missed():
    record = t.start_missed(claimed(), "o-1:1", DUE, DUE + BACKOFF)
    document = to_document(record)
    assert document["startsMissed"] == 1
    assert from_document(StateRecord, document) == record
    del document["startsMissed"]  # written before the field
    assert from_document(StateRecord, document).starts_missed == 0


def test_a_round_that_never_began_is_released_uncounted_and_one_that_began_is_not():
    record = claimed()
    record = enter_compensation(record, "o-1:1", "cancelled", NOW, owner="o-1:1")
    record = claim_compensation(record, NOW, START_GRACE, 3, "supervisor")
    assert round_never_began(record) and record.locked_by is not None
    with pytest.raises(IllegalTransition):
        release_missed_round(record, NOW, BACKOFF, "supervisor")  # its start grace not over yet

    released = release_missed_round(record, DUE, BACKOFF, "supervisor")
    assert (released.locked_by, released.failure_count, released.starts_missed) == (None, 0, 1)
    assert released.complete_by == DUE + BACKOFF
    again = claim_compensation(released, DUE + BACKOFF, START_GRACE, 3, "supervisor")
    assert (again.failure_count, again.attempt) == (0, record.attempt + 1)  # the claim after it counts nothing


def test_entering_compensation_gives_its_rounds_their_own_run_of_missed_starts():
    """Compensation starts its rounds' failures afresh (``failureCount`` 0), and their missed starts too: the forward
    attempts' misses (a cancellation of an order whose starts met a Durable outage, retries exhausted before the
    pivot, an operator's compensate after rounds that never started) are not the rounds'. Before, they were kept:
    a round's first missed start after ``MAX_STARTS_MISSED`` forward ones was counted as a stuck round at once."""
    record = claimed(t.MAX_STARTS_MISSED + 1)  # MAX_STARTS_MISSED in a row: the next miss would count
    assert record.starts_missed == t.MAX_STARTS_MISSED
    cancelled = enter_compensation(record, "cancellation", "cancelled by the client", NOW)
    assert (cancelled.failure_count, cancelled.starts_missed) == (0, 0)
    round_one = claim_compensation(cancelled, NOW, START_GRACE, 3, "supervisor")
    assert round_start_missable(round_one)
    released = release_missed_round(round_one, DUE, BACKOFF, "supervisor")
    assert (released.failure_count, released.starts_missed) == (0, 1)


@pytest.mark.parametrize("edited", [-1, -1_000_000])
def test_a_negative_count_from_a_hand_edit_is_none_missed(edited):
    """An operator's edit of the document (``startsMissed`` below 0) gave the attempts that many more uncounted
    releases: with -1,000,000 a start that can never succeed cycled Pending and Processing for years, never Error,
    never paged by the order. Read as 0: ``MAX_STARTS_MISSED`` in a row, then counted."""
    document = to_document(claimed())
    document["startsMissed"] = edited
    record = from_document(StateRecord, document)
    assert record.starts_missed == 0
    for _ in range(t.MAX_STARTS_MISSED):
        record = t.claim(t.start_missed(record, record.locked_by, DUE, NOW), NOW, START_GRACE)
    assert not t.start_missable(record)


@pytest.mark.parametrize("edited", [-1, -1_000_000])
def test_a_negative_failure_count_from_a_hand_edit_is_none_counted(edited):
    """The same edit of ``failureCount`` gave the order that many more retries: a step that always fails retried
    for years, never Error, never paged. Read as 0: ``max_failures`` missed deadlines, then Error."""
    document = to_document(claimed())
    document["failureCount"] = edited
    record = from_document(StateRecord, document)
    assert record.failure_count == 0
    max_failures, now = 3, NOW
    for _ in range(max_failures):
        assert record.process_state is ProcessState.PROCESSING
        now += timedelta(hours=1)
        record = t.supervisor_retry(record, record.locked_by, now, max_failures, BACKOFF)
        if record.process_state is ProcessState.PENDING:
            now += timedelta(hours=1)
            record = t.claim(record, now, START_GRACE)
    assert record.process_state is ProcessState.ERROR
