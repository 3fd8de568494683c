"""Human review of a paused attempt, as the state record shows it. Pure: no I/O, no clock.

The scheduler pauses an attempt with ``compensation.await_review`` (history event ``ReviewRequested``,
detail written by ``review_detail``). The attempt waits for the Durable event ``ReviewDecision`` on its
instance (``lockedBy``). An operator's answer is noted on the record (``note_review_answer``: who, what,
why) so the record says who decided; the decision itself travels as the event.

At the deadline the attempt's timer fires and the attempt closes the review with one fenced write
(``close_review``, history event ``ReviewClosed``) before it acts. The note and the close are both
conditional writes on the record, so one of them is first: an answer noted before the close is the
decision even when its event has not reached the attempt yet (the operator was told it was taken),
and no answer can be noted after it (the ops API answers 409). Without the close, an answer noted a
moment before the deadline, whose event the attempt got after its timer, was told 200 while the
attempt took the default.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from domain import timefmt
from domain.compensation_policy import REVIEW_CHOICES, review_choices
from domain.errors import IllegalTransition
from domain.records import SIDE_NOTES, ReviewDefault, StateRecord, last_move, last_move_at
from domain.states import ProcessState
from domain.transitions import ensure_owner
from domain.workflow import STEPS

REVIEW_REQUESTED = "ReviewRequested"
REVIEW_ANSWERED = "ReviewAnswered"
REVIEW_CLOSED = "ReviewClosed"
_DECIDE_BY = ", decide by "


@dataclass(frozen=True)
class PendingReview:
    instance_id: str  # the paused attempt's orchestration instance (``lockedBy``)
    review_id: str
    step: str
    # The deadline as ``timefmt`` writes it (``...Z``), also when the record has it in an earlier writer's form
    # (``...+00:00``); as recorded when it is no timestamp with a zone.
    decide_by: str
    # What the attempt takes when nobody answers by ``decide_by`` (the record's ``reviewDefault`` for this
    # review); None: not known (a record written before it was kept, or by a version that keeps none).
    default_action: str | None = None


def review_default(review_id: str, default_action: str) -> ReviewDefault:
    """The record's note of what the attempt paused for ``review_id`` takes without an answer."""
    return ReviewDefault(review_id=review_id, action=default_action)


def review_detail(step_name: str, review_id: str, until: datetime) -> str:
    """The ``ReviewRequested`` entry's detail: ``payment: r-1, decide by 2026-01-01T08:10:00.000000Z``. Until
    session 61 the deadline was written ``2026-01-01T08:10:00+00:00``; both are read (``decide_by_time``)."""
    return f"{step_name}: {review_id}{_DECIDE_BY}{timefmt.to_text(until)}"


def _deadline(text: str) -> datetime | None:
    """The moment of a recorded deadline, in either form; None when it is no timestamp with a zone."""
    try:
        return timefmt.parse(text)
    except ValueError:
        return None


def _requested(record: StateRecord, owner: str, detail: str) -> PendingReview | None:
    step, sep, rest = detail.partition(": ")
    review_id, sep2, decide_by = rest.partition(_DECIDE_BY)
    if not (sep and sep2 and review_id):
        return None
    noted_default = record.review_default
    default = noted_default.action if noted_default is not None and noted_default.review_id == review_id else None
    deadline = _deadline(decide_by)
    return PendingReview(owner, review_id, step, decide_by if deadline is None else timefmt.to_text(deadline), default)


def pending_review(record: StateRecord) -> PendingReview | None:
    """The review this record waits for: it is Processing, and the last write was the owning
    attempt's ``ReviewRequested`` (any later write, an answer included, means it waits no more)."""
    last = last_move(record)
    if record.process_state is not ProcessState.PROCESSING or last is None or record.locked_by is None:
        return None
    if last.event != REVIEW_REQUESTED or last.by != record.locked_by:
        return None
    return _requested(record, record.locked_by, last.detail)


def decide_by_time(pending: PendingReview) -> datetime | None:
    """The review deadline the paused attempt decides at (its timer), or None when the recorded text is
    not a timestamp with a zone (``...Z``, or ``...+00:00`` as records written before session 61 have it)."""
    return _deadline(pending.decide_by)


def choices_for(step_name: str, prepaid: bool) -> tuple[str, ...]:
    """The answers a review of ``step_name`` offers for an order (``prepaid`` or not): ``alternative``
    only where the step's fallback can take it over (``Step.fallback_for``: not a prepaid order's)."""
    the_step = STEPS.get(step_name)
    return review_choices(the_step.fallback_for(prepaid) if the_step is not None else None)


def why_no_alternative(step_name: str, prepaid: bool) -> str:
    """Why a review of ``step_name`` does not offer ``alternative`` (``choices_for`` leaves it out)."""
    the_step = STEPS.get(step_name)
    if the_step is not None and the_step.fallback_agent is not None and prepaid:
        return (
            f"the order is prepaid: the customer paid at the payment provider of {step_name}, and its fallback "
            f"{the_step.fallback_agent} never received that payment"
        )
    return f"{step_name} has no fallback agent"


@dataclass(frozen=True)
class NotedAnswer:
    """An answer the record notes as its last word while the attempt still owns it: noted, and its
    ``ReviewDecision`` maybe not delivered (raised after the note; the raise may have failed)."""

    review: PendingReview
    operator: str
    action: str
    reason: str


def _request_of_last(record: StateRecord) -> PendingReview | None:
    """The review the owning attempt requested last, when the record's last write is about it (its detail
    starts with the review id: an answer to it, its close), else None."""
    owner, at = record.locked_by, last_move_at(record)
    if owner is None or at is None:
        return None
    last = record.history[at]
    for entry in reversed(record.history[:at]):
        if entry.event != REVIEW_REQUESTED or entry.by != owner:
            continue
        requested = _requested(record, owner, entry.detail)
        if requested is None or not last.detail.startswith(f"{requested.review_id}: "):
            return None
        return requested
    return None


def noted_answer(record: StateRecord) -> NotedAnswer | None:
    """The answer noted by the record's last write, to the review its owning attempt requested,
    or None (another write came after the note, the attempt lost the record, or no answer is noted)."""
    last = last_move(record)
    if record.process_state is not ProcessState.PROCESSING or last is None or record.locked_by is None:
        return None
    if last.event != REVIEW_ANSWERED:
        return None
    requested = _request_of_last(record)
    if requested is None:
        return None
    action, _, reason = last.detail[len(requested.review_id) + 2 :].partition(": ")
    return NotedAnswer(requested, last.by, action, reason)


@dataclass(frozen=True)
class LeftDecision:
    """A review decision the owning attempt had but never acted on: the record's last write is an
    operator's answer noted to the attempt's review, or the attempt's own close of it at the deadline.
    An attempt that ends there (its next write failing past its retries, its host lost) leaves the
    decision to the supervisor, which acts on it instead of retrying the step as if nobody had decided
    (``domain.compensation.act_on_left_decision``)."""

    review_id: str
    step: str
    action: str  # one of REVIEW_CHOICES
    operator: str | None  # None: nobody answered in time; the attempt closed the review with its default
    closed: bool  # the attempt wrote ReviewClosed (else the answer is noted and the review still open)


def decision_left(record: StateRecord) -> LeftDecision | None:
    """The review decision the record's owning attempt left as its last word (``LeftDecision``), or None."""
    last = last_move(record)
    if record.process_state is not ProcessState.PROCESSING or last is None or record.locked_by is None:
        return None
    noted = noted_answer(record)
    if noted is not None:
        if noted.action not in REVIEW_CHOICES:
            return None
        return LeftDecision(noted.review.review_id, noted.review.step, noted.action, noted.operator, closed=False)
    if last.event != REVIEW_CLOSED or last.by != record.locked_by:
        return None
    requested = _request_of_last(record)
    closed = review_closed(record, requested.review_id) if requested is not None else None
    if requested is None or closed is None or closed.action not in REVIEW_CHOICES:
        return None
    return LeftDecision(requested.review_id, requested.step, closed.action, closed.operator, closed=True)


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


@dataclass(frozen=True)
class ActedOnAnswer:
    operator: str
    action: str
    instance_id: str  # the attempt that requested the review and acted on the answer


def answer_acted_on(record: StateRecord, review_id: str) -> ActedOnAnswer | None:
    """The answer to ``review_id`` that the attempt acted on as it arrived: its note is followed by a write
    of the attempt that requested the review (not its close, not the review requested again: a
    take-back). An attempt that closes its reviews (``process_order_v4``) writes ``ReviewClosed`` first
    when its timer wins, so its next write after a note means the event won; ``_v3`` writes its
    default's first, so the caller asks which version runs. None otherwise."""
    prefix = f"{review_id}: "
    history = record.history
    noted_at = next(
        (
            i
            for i in range(len(history) - 1, -1, -1)
            if history[i].event == REVIEW_ANSWERED and history[i].detail.startswith(prefix)
        ),
        None,
    )
    if noted_at is None or noted_at + 1 >= len(history):
        return None
    requested_by = next(
        (
            e.by
            for e in reversed(history[:noted_at])
            if e.event == REVIEW_REQUESTED and f": {review_id}{_DECIDE_BY}" in e.detail
        ),
        None,
    )
    after = next((e for e in history[noted_at + 1 :] if e.event not in SIDE_NOTES), None)
    if after is None or requested_by is None:
        return None
    if after.by != requested_by or after.event in (REVIEW_CLOSED, REVIEW_REQUESTED):
        return None
    note = history[noted_at]
    return ActedOnAnswer(note.by, note.detail[len(prefix) :].partition(": ")[0], requested_by)


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
    last = last_move(record)
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


@dataclass(frozen=True)
class ClosedReview:
    """How the attempt closed a review at its deadline: the action it takes, and the operator whose
    noted answer that is (None: nobody answered in time, the configured default)."""

    review_id: str
    action: str
    operator: str | None

    @property
    def detail(self) -> str:
        how = f"answered by {self.operator}" if self.operator is not None else "no answer in time: the default"
        return f"{self.review_id}: {self.action}: {how}"


_ANSWERED_BY = "answered by "


def review_closed(record: StateRecord, review_id: str) -> ClosedReview | None:
    """How ``review_id`` was closed, as the record's ``ReviewClosed`` entry says, or None (not closed)."""
    prefix = f"{review_id}: "
    for entry in reversed(record.history):
        if entry.event == REVIEW_CLOSED and entry.detail.startswith(prefix):
            action, _, how = entry.detail[len(prefix) :].partition(": ")
            operator = how[len(_ANSWERED_BY) :] if how.startswith(_ANSWERED_BY) else None
            return ClosedReview(review_id, action, operator)
    return None


def _note_since_request(record: StateRecord, review_id: str) -> tuple[str, str] | None:
    """(operator, action) of the answer to ``review_id`` noted after the review was last requested (a
    take-back requests it again), whatever unrelated writes came after the note; None without one, or
    when the noted action is not one the attempt takes."""
    prefix = f"{review_id}: "
    for entry in reversed(record.history):
        if entry.event == REVIEW_REQUESTED and f": {review_id}{_DECIDE_BY}" in entry.detail:
            return None
        if entry.event == REVIEW_ANSWERED and entry.detail.startswith(prefix):
            action = entry.detail[len(prefix) :].partition(": ")[0]
            return (entry.by, action) if action in REVIEW_CHOICES else None
    return None


def close_review(record: StateRecord, owner: str, review_id: str, default_action: str, now: datetime) -> StateRecord:
    """The review deadline passed (the owning attempt's timer fired): the review is closed, so that no
    answer is noted after it. An answer noted since the review was requested is the decision (noted in
    time: its event may still be on its way); otherwise ``default_action``. A review already closed
    (this write, retried after a lost response) is left as it is. ``FencingLost`` when ``owner`` no
    longer holds the record."""
    ensure_owner(record, owner)
    if review_closed(record, review_id) is not None:
        return record
    noted = _note_since_request(record, review_id)
    if noted is not None:
        closed = ClosedReview(review_id, noted[1], noted[0])
    else:
        closed = ClosedReview(review_id, default_action, None)
    return record.with_changes(now, REVIEW_CLOSED, owner, closed.detail)
