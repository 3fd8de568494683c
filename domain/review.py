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


def pending_review(record: StateRecord) -> PendingReview | None:
    """The review this record waits for: it is Processing, and the last write was the owning
    attempt's ``ReviewRequested`` (any later write, an answer included, means it waits no more)."""
    if record.process_state is not ProcessState.PROCESSING or not record.history or record.locked_by is None:
        return None
    last = record.history[-1]
    if last.event != REVIEW_REQUESTED or last.by != record.locked_by:
        return None
    step, sep, rest = last.detail.partition(": ")
    review_id, sep2, decide_by = rest.partition(_DECIDE_BY)
    if not (sep and sep2 and review_id):
        return None
    return PendingReview(record.locked_by, review_id, step, decide_by)


def note_review_answer(
    record: StateRecord, review_id: str, operator: str, action: str, reason: str, now: datetime
) -> StateRecord:
    """Records who answered a pending review, with what and why (state and owner unchanged)."""
    pending = pending_review(record)
    if pending is None or pending.review_id != review_id:
        raise IllegalTransition(f"order {record.order_id}: not waiting for review {review_id}")
    return record.with_changes(now, REVIEW_ANSWERED, operator, f"{review_id}: {action}: {reason}")
