"""A paused attempt's review keeps on the record what the attempt takes without an answer (``reviewDefault``,
written by ``await_review`` with the default the orchestration passes): the ops API and the console say which
default it is. A record written before the field, or whose ``reviewDefault`` names another review (written
by an older version's pause, kept as an unknown key), says nothing about it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from adapters.cosmos.mapping import from_document, to_document
from domain import compensation, review, transitions
from domain.records import ReviewDefault, StateRecord
from domain.review import note_review_answer, noted_answer, pending_review, reopen_review

T0 = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
UNTIL = T0 + timedelta(hours=24)


def _claimed(order_id: str = "o-rd") -> tuple[StateRecord, str]:
    record = transitions.claim(transitions.new_record(order_id, None, T0), T0, timedelta(seconds=60))
    return record, str(record.locked_by)


def _paused(default_action: str | None, review_number: int = 1) -> tuple[StateRecord, str]:
    record, owner = _claimed()
    review_id = f"{owner}:charge-payment:review:{review_number}"
    paused = compensation.await_review(
        record, owner, "charge-payment", review_id, UNTIL, T0, error="declined", default_action=default_action
    )
    return paused, review_id


def test_the_pause_keeps_its_default_with_its_review() -> None:
    paused, review_id = _paused("retry")

    assert paused.review_default == ReviewDefault(review_id=review_id, action="retry")
    pending = pending_review(paused)
    assert pending is not None and pending.review_id == review_id
    assert pending.default_action == "retry"


def test_the_default_survives_the_document_and_a_noted_answer() -> None:
    paused, review_id = _paused("alternative")
    document = to_document(paused)
    assert document["reviewDefault"] == {"reviewId": review_id, "action": "alternative"}
    read = from_document(StateRecord, document)
    assert read == paused

    answered = note_review_answer(read, review_id, "ops@contoso", "fail", "why not", T0 + timedelta(minutes=1))
    noted = noted_answer(answered)
    assert noted is not None and noted.review.default_action == "alternative"
    reopened = reopen_review(answered, review_id, "ops@contoso", T0 + timedelta(minutes=2))
    pending = pending_review(reopened)
    assert pending is not None and pending.default_action == "alternative"


def test_a_record_written_before_the_field_says_no_default() -> None:
    paused, _ = _paused("compensate")
    document = to_document(paused)
    del document["reviewDefault"]  # as a document written before it was kept

    read = from_document(StateRecord, document)
    assert read.review_default is None
    pending = pending_review(read)
    assert pending is not None and pending.default_action is None


def test_a_default_of_another_review_is_not_read_as_this_ones() -> None:
    first, _ = _paused("retry")
    owner = str(first.locked_by)
    # the next review written without a default (an older version's pause): the first one's note is stale
    second = compensation.await_review(
        first, owner, "charge-payment", f"{owner}:charge-payment:review:2", UNTIL, T0 + timedelta(hours=1)
    )
    assert second.review_default == first.review_default
    pending = pending_review(second)
    assert pending is not None and pending.review_id.endswith(":review:2")
    assert pending.default_action is None

    # and a pause with a default replaces it
    third = compensation.await_review(
        second,
        owner,
        "charge-payment",
        f"{owner}:charge-payment:review:3",
        UNTIL,
        T0 + timedelta(hours=2),
        default_action="compensate",
    )
    pending = pending_review(third)
    assert pending is not None and pending.default_action == "compensate"
    assert review.review_default(pending.review_id, "compensate") == third.review_default
