"""Human review of a paused attempt, as the state record shows it. Pure: no I/O, no clock.

The scheduler pauses an attempt with ``compensation.await_review`` (history event ``ReviewRequested``,
detail written by ``review_detail``). The attempt waits for the Durable event ``ReviewDecision`` on its
instance (``lockedBy``). An operator's answer is noted on the record (``note_review_answer``: who, what,
why) so the record says who decided; the decision itself travels as the event.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from domain.errors import IllegalTransition
from domain.records import StateRecord
from domain.states import ProcessState

REVIEW_REQUESTED = "ReviewRequested"
REVIEW_ANSWERED = "ReviewAnswered"
_DECIDE_BY = ", decide by "


@dataclass(frozen=True)
class PendingReview:
    instance_id: str  # the paused attempt's orchestration instance (``lockedBy``)
    review_id: str
    step: str
    decide_by: str  # ISO text, as recorded


def review_detail(step_name: str, review_id: str, until: datetime) -> str:
    return f"{step_name}: {review_id}{_DECIDE_BY}{until.isoformat()}"


def _requested(owner: str, detail: str) -> PendingReview | None:
    step, sep, rest = detail.partition(": ")
    review_id, sep2, decide_by = rest.partition(_DECIDE_BY)
    if not (sep and sep2 and review_id):
        return None
    return PendingReview(owner, review_id, step, decide_by)


def pending_review(record: StateRecord) -> PendingReview | None:
    """The review this record waits for: it is Processing, and the last write was the owning
    attempt's ``ReviewRequested`` (any later write, an answer included, means it waits no more)."""
    if record.process_state is not ProcessState.PROCESSING or not record.history or record.locked_by is None:
        return None
    last = record.history[-1]
    if last.event != REVIEW_REQUESTED or last.by != record.locked_by:
        return None
    return _requested(record.locked_by, last.detail)


def decide_by_time(pending: PendingReview) -> datetime | None:
    """The review deadline the paused attempt decides at (its timer), or None when the recorded text is
    not a timestamp with a zone."""
    try:
        when = datetime.fromisoformat(pending.decide_by)
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


@dataclass(frozen=True)
class NotedAnswer:
    """An answer the record notes as its last word while the attempt still owns it: noted, and its
    ``ReviewDecision`` maybe not delivered (raised after the note; the raise may have failed)."""

    review: PendingReview
    operator: str
    action: str
    reason: str


def noted_answer(record: StateRecord) -> NotedAnswer | None:
    """The answer noted by the record's last write, to the review its owning attempt requested,
    or None (another write came after the note, the attempt lost the record, or no answer is noted)."""
    if record.process_state is not ProcessState.PROCESSING or not record.history or record.locked_by is None:
        return None
    last = record.history[-1]
    if last.event != REVIEW_ANSWERED:
        return None
    for entry in reversed(record.history[:-1]):
        if entry.event != REVIEW_REQUESTED or entry.by != record.locked_by:
            continue
        requested = _requested(record.locked_by, entry.detail)
        if requested is None or not last.detail.startswith(f"{requested.review_id}: "):
            return None
        action, _, reason = last.detail[len(requested.review_id) + 2 :].partition(": ")
        return NotedAnswer(requested, last.by, action, reason)
    return None


def note_review_answer(
    record: StateRecord, review_id: str, operator: str, action: str, reason: str, now: datetime
) -> StateRecord:
    """Records who answered a pending review, with what and why (state and owner unchanged)."""
    pending = pending_review(record)
    if pending is None or pending.review_id != review_id:
        raise IllegalTransition(f"order {record.order_id}: not waiting for review {review_id}")
    return record.with_changes(now, REVIEW_ANSWERED, operator, f"{review_id}: {action}: {reason}")


@dataclass(frozen=True)
class ReviewAnswer:
    operator: str
    action: str


def review_answer(record: StateRecord, review_id: str) -> ReviewAnswer | None:
    """Who answered review ``review_id`` and with what, as the record notes it (the last note), or None."""
    prefix = f"{review_id}: "
    for entry in reversed(record.history):
        if entry.event == REVIEW_ANSWERED and entry.detail.startswith(prefix):
            action, _, _ = entry.detail[len(prefix) :].partition(": ")
            return ReviewAnswer(entry.by, action)
    return None


def reopen_review(record: StateRecord, review_id: str, operator: str, now: datetime) -> StateRecord:
    """Takes back ``operator``'s answer to ``review_id`` when it could not be delivered to the paused
    attempt: the record waits for the review again (the request is written again, by the attempt that
    made it), so the operator or another one can answer."""
    last = record.history[-1] if record.history else None
    if (
        record.process_state is not ProcessState.PROCESSING
        or record.locked_by is None
        or last is None
        or last.event != REVIEW_ANSWERED
        or last.by != operator
        or not last.detail.startswith(f"{review_id}: ")
    ):
        raise IllegalTransition(f"order {record.order_id}: no answer of {operator} to review {review_id} to take back")
    request = next(
        (
            e
            for e in reversed(record.history)
            if e.event == REVIEW_REQUESTED and e.by == record.locked_by and f": {review_id}{_DECIDE_BY}" in e.detail
        ),
        None,
    )
    if request is None:
        raise IllegalTransition(f"order {record.order_id}: review {review_id} was never requested by its attempt")
    return record.with_changes(now, REVIEW_REQUESTED, record.locked_by, request.detail)
