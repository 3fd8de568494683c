"""A review's deadline (``decide by`` in the ``ReviewRequested`` detail, the API's ``decideBy``) is written in
``timefmt``'s one form (``...000000Z``), as every timestamp field of a record is. Before session 61 it was written
``isoformat()``'s way (``...+00:00``); records that say so are still read, to the same moment, and shown in the one
form."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from domain import compensation, review, timefmt
from domain import transitions as t
from domain.records import StateRecord

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
UNTIL = NOW + timedelta(hours=24, microseconds=123456)
ONE_FORM = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def _paused() -> StateRecord:
    claimed = t.claim(t.new_record("o-1", "replies", NOW), NOW, timedelta(seconds=60))
    record = replace(claimed, current_step="charge-payment", complete_by=NOW + timedelta(minutes=2))
    owner = str(record.locked_by)
    return compensation.await_review(record, owner, "charge-payment", f"{owner}:charge-payment:review:1", UNTIL, NOW)


def _written_as(record: StateRecord, deadline: str) -> StateRecord:
    """``record`` with its last entry's deadline written as ``deadline`` says (an older writer's form)."""
    last = record.history[-1]
    head, sep, _ = last.detail.rpartition(", decide by ")
    assert sep, last.detail
    return replace(record, history=[*record.history[:-1], replace(last, detail=f"{head}{sep}{deadline}")])


def test_a_review_deadline_is_written_in_the_one_timestamp_form() -> None:
    record = _paused()
    detail = record.history[-1].detail
    assert detail.endswith(f", decide by {timefmt.to_text(UNTIL)}") and "+00:00" not in detail, detail
    pending = review.pending_review(record)
    assert pending is not None and ONE_FORM.fullmatch(pending.decide_by), pending
    assert review.decide_by_time(pending) == UNTIL


@pytest.mark.parametrize(
    ("written", "moment"),
    [
        (UNTIL.isoformat(), UNTIL),  # 2026-03-02T12:00:00.123456+00:00, as written before
        ((UNTIL - timedelta(microseconds=123456)).isoformat(), UNTIL - timedelta(microseconds=123456)),  # no fraction
        ("2026-03-02T14:00:00+02:00", datetime(2026, 3, 2, 12, 0, tzinfo=UTC)),  # another offset: the same moment
        (timefmt.to_text(UNTIL), UNTIL),
    ],
    ids=["offset", "offset-whole-seconds", "other-offset", "one-form"],
)
def test_a_deadline_written_in_either_form_is_read_to_its_moment_and_shown_in_the_one_form(
    written: str, moment: datetime
) -> None:
    record = _written_as(_paused(), written)
    pending = review.pending_review(record)
    assert pending is not None
    assert review.decide_by_time(pending) == moment
    assert pending.decide_by == timefmt.to_text(moment)
    # taken back after an undelivered answer: the request is written again as it was, and read the same
    answered = review.note_review_answer(record, pending.review_id, "ops-a", "fail", "too risky", NOW)
    assert review.pending_review(review.reopen_review(answered, pending.review_id, "ops-a", NOW)) == pending


@pytest.mark.parametrize("written", ["tomorrow", "2026-03-02T12:00:00", "99999-01-01T00:00:00Z"])
def test_a_deadline_that_is_no_timestamp_with_a_zone_is_shown_as_recorded_and_not_trusted(written: str) -> None:
    pending = review.pending_review(_written_as(_paused(), written))
    assert pending is not None and pending.decide_by == written
    assert review.decide_by_time(pending) is None
