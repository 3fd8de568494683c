"""Operator actions through the domain's own moves, answering the new state or why the move is not legal now.

Each records who (the signed-in principal) and why (the reason).

- resubmit: ``Error -> Pending`` (``supervisor.operator.resubmit_order``); the starter claims it.
- cancel: ``Pending | Processing | Error -> Compensating`` when the decision function allows it (before the
  pivot), as a client's ``CancelOrder`` does.
- compensate: ``Error | CompensationFailed -> Compensating`` (``supervisor.operator.compensate_order``).
- review: an answer to a paused attempt's review (``reviewId``); see below.
- discard: a payment notification deferred for an order that never came, dead-lettered ``DiscardedByOperator``
  after its entry is resolved so (``deferral.discard``).

Resubmit, cancel and compensate read their write back when its response is lost (``update_once_or_reread``). The
same action posted again by the same operator, found as the record's latest move (``domain.records.last_move``),
answers 200 with ``repeated: true`` and writes nothing.

A review answer is first noted on the record by one conditional write (``domain.review``), so of two answers at
once the second is refused 409; only then is the ``ReviewDecision`` event raised (``operations.review_answer``).
Past the deadline with nothing noted it is refused 409: the attempt takes its default, and ``process_order_v4``
closes the review taking any answer noted in time (``domain.review.close_review``). The note is taken back only
when the instance is definitely gone; after an ambiguous raise failure it stays (503), and posting the same answer
again raises the event again (the attempt takes the first answer to its ``reviewId``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from adapters.cosmos.errors import EtagMismatch, StoreError, StoreUnavailable
from adapters.cosmos.mapping import DocumentError, to_document
from adapters.cosmos.state_store import update_once, update_once_or_reread
from deferral.discard import discard_deferred as discard
from dependencies import AppContext
from domain import transitions
from domain.compensation import cancellation_not_before, enter_compensation, pivot_passed, undo_pending
from domain.compensation_policy import Action, ReviewPolicy, Situation, Trigger, decide_compensation
from domain.errors import IllegalTransition
from domain.records import StateRecord
from domain.review import (
    ActedOnAnswer,
    ClosedReview,
    NotedAnswer,
    PendingReview,
    answer_acted_on,
    choices_for,
    decide_by_time,
    note_review_answer,
    noted_answer,
    pending_review,
    reopen_review,
    review_answer,
    review_closed,
    why_no_alternative,
)
from domain.states import ProcessState
from domain.timefmt import text_or_none
from notifications.alerts import raise_alert_after_write
from notifications.received import owe_before_failure
from observability.events import app_event
from operations.views import order_row
from operations.web import Reply, error, json_reply
from supervisor.operator import (
    ActionTaken,
    RecordNotFound,
    action_repeated,
    cancel_taken,
    compensate_action,
    operator_cancelled,
    resubmit_action,
)

NOT_CANCELLABLE = frozenset(
    {ProcessState.COMPENSATING, ProcessState.COMPENSATED, ProcessState.COMPENSATION_FAILED, ProcessState.PROCESSED}
)


def _done(record: StateRecord, action: str, operator: str, *, repeated: bool = False) -> Reply:
    """200 with the new state; ``repeated``: the same action was already the latest entry, nothing written now."""
    body: dict[str, Any] = {"action": action, "by": operator, "order": order_row(record)}
    if repeated:
        body["repeated"] = True
    return json_reply(200, body)


def _taken(taken: ActionTaken, action: str, operator: str) -> Reply:
    return _done(taken.record, action, operator, repeated=taken.repeated)


def unreadable(order_id: str, exc: DocumentError) -> Reply:
    """409 for an action on an order whose state document does not map to a record."""
    return error(
        409,
        f"the state document of order {order_id} does not map to a record ({exc}): repair it in the state "
        "container, then try again",
    )


def read_behind(order_id: str, what: str) -> Reply:
    """503 for a request whose conditional write met a 412 on every version it read.

    The order changed meanwhile, or this instance reads a replica without the latest write (its client has no
    session token for other instances' writes). Nothing was written; posted again, it is judged on a new read
    (200 ``repeated`` if already taken)."""
    return error(
        503,
        f"order {order_id} changed while you acted, or this instance read it from a replica without its latest write: "
        f"nothing was written now; post the same {what} again",
    )


def _guarded(order_id: str, move: Callable[[], Reply]) -> Reply:
    """Runs ``move``, mapping the store's and the domain's errors to replies."""
    try:
        return move()
    except DocumentError as exc:
        return unreadable(order_id, exc)
    except RecordNotFound:
        return error(404, f"no order {order_id}")
    except IllegalTransition as exc:
        return error(409, str(exc))
    except EtagMismatch:
        return read_behind(order_id, "action")
    except StoreUnavailable as exc:
        return error(503, f"the state store is unavailable: {exc}")


def resubmit(ctx: AppContext, order_id: str, operator: str, reason: str) -> Reply:
    return _guarded(order_id, lambda: _taken(resubmit_action(ctx, order_id, operator, reason), "resubmit", operator))


def compensate(
    ctx: AppContext, order_id: str, operator: str, reason: str, undone_by_hand: tuple[int, ...] = ()
) -> Reply:
    """Hands an order back to compensation; ``undone_by_hand`` names entries the operator undid by hand.

    Those entries are marked with ``settle_by_hand``: 409 for one already undone, or an order not
    ``CompensationFailed``."""
    return _guarded(
        order_id,
        lambda: _taken(
            compensate_action(ctx, order_id, operator, reason, undone_by_hand=undone_by_hand), "compensate", operator
        ),
    )


def _cancel_once(ctx: AppContext, order_id: str, operator: str, reason: str) -> Reply:
    """Judges and writes a cancel on one read of the record."""
    record = ctx.states.get(order_id)
    if record is None:
        raise RecordNotFound(order_id)
    if record.process_state in NOT_CANCELLABLE:
        if cancel_taken(record, operator, reason):  # posted again: its first answer was lost
            action_repeated(order_id, "cancel", operator)
            return _done(record, "cancel", operator, repeated=True)
        raise IllegalTransition(f"order {order_id} is {record.process_state}: nothing to cancel")
    decision = decide_compensation(
        Situation(
            trigger=Trigger.CANCEL_REQUESTED,
            passed_pivot=pivot_passed(record),
            undo_pending=undo_pending(record),
            amount_cents=0,
        ),
        ReviewPolicy(ctx.settings.review_amount_threshold_cents),
    )
    if decision.action is not Action.COMPENSATE:
        raise IllegalTransition(f"order {order_id}: {decision.reason}")
    # Due now, or at the deadline of a step in flight (the same rule as a client's CancelOrder).
    not_before = cancellation_not_before(record)
    why = operator_cancelled(operator, reason)
    now = ctx.clock.now()
    # A lost response is read back: if it landed, the cancel was taken. An order with no step begun also owes
    # Received (``owe_before_failure``), as for a client's CancelOrder: the compensation round says it first.
    written = update_once_or_reread(
        ctx.states,
        record,
        lambda r: owe_before_failure(enter_compensation(r, operator, why, now, not_before=not_before), now),
    )
    if record.process_state in (ProcessState.PENDING, ProcessState.PROCESSING):
        ctx.counts.bump(record.process_state, -1)
    app_event("OperatorCancelled", f"order {order_id}: {why}", orderId=order_id, operator=operator, reason=reason)
    return _done(written, "cancel", operator)


def cancel(ctx: AppContext, order_id: str, operator: str, reason: str) -> Reply:
    def move() -> Reply:
        try:
            return _cancel_once(ctx, order_id, operator, reason)
        except EtagMismatch:  # someone else wrote first: judge again on a fresh read, once
            return _cancel_once(ctx, order_id, operator, reason)

    return _guarded(order_id, move)


@dataclass(frozen=True)
class ReviewTarget:
    """The review an answer goes to.

    ``noted``: the record already notes this same answer as its last word, so the event is raised again and
    nothing is noted. ``late``: that note was made in time but the deadline has passed and the attempt has not
    closed the review yet (``process_order_v4`` will, taking the note; ``_v3`` takes its default)."""

    pending: PendingReview
    record: StateRecord
    noted: NotedAnswer | None = None
    late: bool = False


@dataclass(frozen=True)
class AnswerActedOn:
    """This same answer, posted again after the attempt already acted on an event; nothing is noted or raised.

    Whether the event acted on was this answer depends on the attempt's version (``operations.review_answer``)."""

    record: StateRecord
    review_id: str
    answer: ActedOnAnswer


def review_to_answer(
    ctx: AppContext, order_id: str, review_id: str, action: str, operator: str
) -> ReviewTarget | AnswerActedOn | Reply:
    """Finds the review ``action`` answers (``_review_to_answer``), or the reply refusing it; nothing is noted.

    Also 409 for ``alternative`` where no fallback can take the step over (``domain.review.choices_for``)."""
    target = _review_to_answer(ctx, order_id, review_id, action, operator)
    if not isinstance(target, ReviewTarget) or action != "alternative":
        return target
    try:
        order = ctx.orders.get(order_id)
    except StoreUnavailable as exc:
        return error(503, f"the order store is unavailable: {exc}")
    if order is None:  # written before its record, which is there: a replica without the order's create yet
        return error(
            503,
            f"order {order_id} could not be read yet (a replica behind its create) to tell whether it takes "
            "'alternative': post the same answer again",
        )
    prepaid = bool(order.get("prepaid"))
    step = target.pending.step
    offered = choices_for(step, prepaid)
    if action in offered:
        return target
    return error(
        409,
        f"review {review_id} of order {order_id} does not take 'alternative': {why_no_alternative(step, prepaid)}; "
        f"answer {', '.join(offered[:-1])} or {offered[-1]}",
    )


def _review_to_answer(
    ctx: AppContext, order_id: str, review_id: str, action: str, operator: str
) -> ReviewTarget | AnswerActedOn | Reply:
    """Finds review ``review_id`` waiting for this answer, or noting it already; else the reply.

    Replies: 404 no such order; 409 another review waits, answered otherwise, past its deadline with nothing
    noted, or closed by the attempt (200 if it closed it with this very answer)."""
    try:
        record = ctx.states.get(order_id)
    except StoreUnavailable as exc:
        return error(503, f"the state store is unavailable: {exc}")
    except DocumentError as exc:
        return unreadable(order_id, exc)
    if record is None:
        return error(404, f"no order {order_id}")
    closed = review_closed(record, review_id)
    if closed is not None:
        if (closed.operator, closed.action) == (operator, action):
            return taken_at_close(order_id, record, closed)
        return _closed(order_id, closed)
    acted = answer_acted_on(record, review_id)
    if acted is not None and (acted.operator, acted.action) == (operator, action):
        return AnswerActedOn(record, review_id, acted)
    pending, noted = pending_review(record), noted_answer(record)
    passed = _past_deadline(ctx, pending or (noted.review if noted else None))
    if pending is not None and pending.review_id == review_id:
        return deadline_passed(order_id, pending, None) if passed else ReviewTarget(pending, record)
    if noted is not None and noted.review.review_id == review_id:
        if noted.action != action:
            return _answered_elsewhere(order_id, record, review_id)
        return ReviewTarget(noted.review, record, noted, late=passed)
    waiting = pending or (noted.review if noted else None)
    if waiting is not None:
        return json_reply(
            409,
            {
                "error": f"order {order_id} waits for review {waiting.review_id}, not {review_id}: reload it and "
                "answer the review it waits for",
                "status": 409,
                "reviewId": waiting.review_id,
            },
        )
    holder = record.locked_by
    if holder is not None and review_answer(record, review_id) is None and review_id.startswith(f"{holder}:"):
        # a pause of the attempt holding the record that the record does not show: maybe a lagging replica
        return _unless_behind(ctx, record, _answered_elsewhere(order_id, record, review_id))
    return _answered_elsewhere(order_id, record, review_id)


def _unless_behind(ctx: AppContext, record: StateRecord, refusal: Reply) -> Reply:
    """Returns ``refusal`` only once ``record`` is proved the latest version (``read_is_latest``); else 503.

    A lagging replica without the pause's write would otherwise refuse an answer to a review that waits."""
    try:
        latest = read_is_latest(ctx, record)
    except StoreUnavailable as exc:
        return error(503, f"the state store is unavailable: {exc}; post the same answer again")
    return refusal if latest else read_behind(record.order_id, "answer")


def acted_on(order_id: str, taken: AnswerActedOn, version_closes_reviews: bool) -> Reply:
    """Replies to an answer posted again after the attempt acted on a ``ReviewDecision``.

    200 when its version closes its reviews (then that event was this answer's), else 409: it cannot be told."""
    answer = taken.answer
    if version_closes_reviews:
        return json_reply(
            200,
            {
                "action": "review",
                "decision": answer.action,
                "reviewId": taken.review_id,
                "by": answer.operator,
                "order": order_row(taken.record),
            },
        )
    return error(
        409,
        f"review {taken.review_id} of order {order_id} was answered {answer.action} by {answer.operator} and the "
        f"attempt {answer.instance_id} has acted; its version takes its default at the deadline without a "
        "record of which came first: reload the order to see what it did",
    )


LAST_MINUTE = timedelta(seconds=60)


def too_close_to_deadline(ctx: AppContext, order_id: str, pending: PendingReview) -> Reply | None:
    """409 in the last minute before the deadline of a ``process_order_v3`` review; None when there is time.

    That version does not close its reviews, so the event might arrive after the timer took the default."""
    deadline = decide_by_time(pending)
    if deadline is None or ctx.clock.now() < deadline - LAST_MINUTE:
        return None
    return error(
        409,
        f"review {pending.review_id} of order {order_id} is decided by {pending.decide_by}; its attempt "
        f"{pending.instance_id} (an earlier version) cannot be sure to take an answer in its last "
        f"{LAST_MINUTE.total_seconds():.0f} s: it takes its default",
    )


def _past_deadline(ctx: AppContext, pending: PendingReview | None) -> bool:
    deadline = decide_by_time(pending) if pending is not None else None
    return deadline is not None and ctx.clock.now() >= deadline


def deadline_passed(order_id: str, pending: PendingReview, noted: NotedAnswer | None) -> Reply:
    earlier = (
        ""
        if noted is None
        else f"; the answer {noted.action} by {noted.operator}, noted before, reached it in time or not at all"
    )
    return json_reply(
        409,
        {
            "error": f"review deadline passed: review {pending.review_id} of order {order_id} was to be "
            f"decided by {pending.decide_by}; the paused attempt takes its default action{earlier}",
            "status": 409,
            "reviewId": pending.review_id,
            "decideBy": pending.decide_by,
        },
    )


def decision_event(pending: PendingReview, action: str, operator: str, reason: str) -> dict[str, Any]:
    """The ``ReviewDecision`` event data the scheduler matches on ``reviewId``."""
    return {"reviewId": pending.review_id, "action": action, "operator": operator, "reason": reason}


def _closed(order_id: str, closed: ClosedReview) -> Reply:
    """409: the attempt closed the review at its deadline (``domain.review.close_review``); nothing more is noted."""
    how = f"{closed.operator}'s answer" if closed.operator is not None else "nobody answered in time: the default"
    return json_reply(
        409,
        {
            "error": f"review {closed.review_id} of order {order_id} was closed at its deadline: {closed.action} "
            f"({how})",
            "status": 409,
            "reviewId": closed.review_id,
            "decision": closed.action,
            "by": closed.operator,
        },
    )


def taken_at_close(order_id: str, record: StateRecord, closed: ClosedReview) -> Reply:
    """200 for the answer the attempt closed its review with: posted again, or raised after the attempt finished."""
    return json_reply(
        200,
        {
            "action": "review",
            "decision": closed.action,
            "reviewId": closed.review_id,
            "by": closed.operator,
            "order": order_row(record),
            "takenAtDeadline": True,
        },
    )


def _answered_elsewhere(order_id: str, record: StateRecord, review_id: str) -> Reply:
    """409 for an answer that came too late, saying what closed or answered the review and the order's state."""
    closed = review_closed(record, review_id)
    if closed is not None:
        return _closed(order_id, closed)
    first = review_answer(record, review_id)
    if first is None:
        return error(409, f"order {order_id} is {record.process_state} and does not wait for review {review_id}")
    # the state too: an answer noted, then overtaken (a cancel compensated the order before the paused
    # attempt acted on it) is "already answered" by the very operator posting it again
    return json_reply(
        409,
        {
            "error": f"review {review_id} of order {order_id} was already answered: {first.action} by "
            f"{first.operator}; the order is {record.process_state} now",
            "status": 409,
            "reviewId": review_id,
            "decision": first.action,
            "by": first.operator,
            "processState": record.process_state.value,
        },
    )


@dataclass(frozen=True)
class NotedMeanwhile:
    """``claim_answer`` found this same answer noted by another request meanwhile (a double click, two tabs).

    The caller answers as for the answer posted again, raising its event again."""

    record: StateRecord


def claim_answer(
    ctx: AppContext, order_id: str, pending: PendingReview, operator: str, action: str, reason: str
) -> StateRecord | NotedMeanwhile | Reply:
    """Notes who answers, with what and why, by one conditional write before the event is raised.

    Of two operators answering at once, only the one whose note is written raises the event; the other gets 409
    with the first answer, or ``NotedMeanwhile`` if it is the same answer. Noting first matters: the attempt
    takes the first ``ReviewDecision`` it gets, so raising first could tell the second operator they won."""
    now = ctx.clock.now()

    def move() -> StateRecord | NotedMeanwhile | Reply:
        for _ in range(3):
            record = ctx.states.get(order_id)
            if record is None:
                raise RecordNotFound(order_id)
            try:  # a lost response is read back: if the note landed, the event is still raised
                return update_once_or_reread(
                    ctx.states,
                    record,
                    lambda r: note_review_answer(r, pending.review_id, operator, action, reason, now),
                )
            except IllegalTransition:
                noted = noted_answer(record)
                if noted is not None and noted.review.review_id == pending.review_id and noted.action == action:
                    return NotedMeanwhile(record)
                return _answered_elsewhere(order_id, record, pending.review_id)
            except EtagMismatch:
                continue
        return read_behind(order_id, "answer")

    try:
        return move()
    except RecordNotFound:
        return error(404, f"no order {order_id}")
    except DocumentError as exc:
        return unreadable(order_id, exc)
    except StoreUnavailable as exc:
        return error(
            503,
            f"the state store is unavailable: {exc}; your answer may or may not be noted: post the same "
            "answer again to deliver it",
        )


def take_back_answer(
    ctx: AppContext, order_id: str, pending: PendingReview, operator: str, action: str, why: str
) -> Reply:
    """Takes back a noted answer whose paused attempt is definitely gone (``why``), answering 409.

    If the record moved on meanwhile there is nothing to take back: 200 if the review was closed with this very
    answer, else 409. If the store cannot be written, the note stands and the supervisor carries it out after the
    deadline (``domain.compensation.act_on_left_decision``); an alert and the 503 say so."""
    gone = f"the paused attempt {pending.instance_id} did not take the answer: {why}"
    try:
        for _ in range(3):
            record = ctx.states.get(order_id)
            if record is None:
                return error(404, f"no order {order_id}")
            try:
                update_once_or_reread(
                    ctx.states, record, lambda r: reopen_review(r, pending.review_id, operator, ctx.clock.now())
                )
            except IllegalTransition:  # the record moved on: nothing of this answer to take back
                closed = review_closed(record, pending.review_id)
                if closed is not None and (closed.operator, closed.action) == (operator, action):
                    return taken_at_close(order_id, record, closed)
                return error(
                    409,
                    f"the paused attempt {pending.instance_id} is gone ({why}) and order {order_id} has moved on: it "
                    f"is {record.process_state}; reload it to see what was decided",
                )
            except EtagMismatch:
                continue
            return error(
                409,
                f"{gone}; the note of the answer is taken back, so nothing is decided: the supervisor retries the "
                "order once the review's deadline has passed (its next attempt asks again if the step fails again)",
            )
        return error(409, f"{gone}; order {order_id} keeps changing: reload it")
    except DocumentError as exc:
        return unreadable(order_id, exc)
    except StoreUnavailable as exc:
        summary = (
            f"order {order_id}: the answer of {operator} to review {pending.review_id} is noted but its attempt "
            f"{pending.instance_id} is gone ({why}); the note could not be taken back ({exc})"
        )
        app_event("OperatorReviewNotReopened", summary, orderId=order_id, reviewId=pending.review_id)
        raise_alert_after_write(
            ctx.sender,
            kind="ReviewAnswerUndelivered",
            summary=f"{summary}: it stands, and the supervisor carries it out once the review deadline has passed",
            at=ctx.clock.now(),
            order_id=order_id,
            severity="error",
            discriminator=pending.review_id,
            details={"reviewId": pending.review_id, "instanceId": pending.instance_id, "operator": operator},
        )
        return error(
            503,
            f"{gone}; the state store is unavailable ({exc}), so the record still notes the answer: it stands, "
            "and the supervisor carries it out once the review deadline has passed",
        )


def delivery_uncertain(order_id: str, pending: PendingReview, operator: str, action: str, failure: Exception) -> Reply:
    """503 after a raise that failed ambiguously (a timeout, a 5xx): the extension may have queued the event.

    The note stays: taking it back could let a different answer be noted while the attempt acts on this one.
    Posting the same answer again raises the event again; the attempt takes the first per ``reviewId``."""
    app_event(
        "OperatorReviewDeliveryUncertain",
        f"order {order_id}: review {pending.review_id} answered {action} by {operator}; raising the event "
        f"failed ambiguously: {failure}",
        orderId=order_id,
        reviewId=pending.review_id,
        action=action,
    )
    return json_reply(
        503,
        {
            "error": f"your answer {action} to review {pending.review_id} of order {order_id} is noted, but its "
            f"delivery to the paused attempt {pending.instance_id} is uncertain ({failure}): post the same "
            "answer again to deliver it (a repeat is harmless)",
            "status": 503,
            "reviewId": pending.review_id,
            "decision": action,
            "by": operator,
            "noted": True,
        },
    )


def read_is_latest(ctx: AppContext, record: StateRecord) -> bool:
    """True if ``record`` as read is the latest version, proved by writing it back unchanged (``If-Match``).

    The request's client has no session token for other instances' writes, so its read may lag by a write. A
    reply decided on the record alone, with nothing written, checks this first. ``StoreUnavailable``
    propagates."""
    try:
        update_once(ctx.states, record, lambda r: r)
    except EtagMismatch:
        return False
    return True


def left_to_supervisor(order_id: str, record: StateRecord, noted: NotedAnswer, grace: timedelta) -> Reply:
    """200 for an answer posted again once its attempt is gone: the noted answer stands for the supervisor.

    The supervisor carries it out when it recovers the expired attempt, at ``notBefore`` (``transitions.due_at``;
    ``domain.compensation.act_on_left_decision``). It is never taken back: its operator may have been told 200."""
    not_before = transitions.due_at(record, grace)
    return json_reply(
        200,
        {
            "action": "review",
            "decision": noted.action,
            "reviewId": noted.review.review_id,
            "by": noted.operator,
            "order": order_row(record),
            "carriedOutBy": "supervisor",
            "notBefore": text_or_none(not_before),
        },
    )


def answered(
    order_id: str, record: StateRecord, pending: PendingReview, operator: str, action: str, reason: str
) -> Reply:
    """200 once the event was raised for the noted answer: the attempt acts on it."""
    app_event(
        "OperatorReviewed",
        f"order {order_id}: review {pending.review_id} answered {action} by {operator}: {reason}",
        orderId=order_id,
        operator=operator,
        reason=reason,
        action=action,
        reviewId=pending.review_id,
    )
    return json_reply(
        200,
        {
            "action": "review",
            "decision": action,
            "reviewId": pending.review_id,
            "by": operator,
            "order": order_row(record),
        },
    )


def discard_deferred(ctx: AppContext, order_id: str, seq: int, operator: str, reason: str) -> Reply:
    """Discards the payment notification deferred as ``seq`` for an order that never came (``deferral.discard``).

    - 200 with the entry as written; ``deadLettered`` false means the peek sweep dead-letters it as recorded;
      ``repeated`` for the same discard posted again.
    - 404: the order's deferral document does not track ``seq``.
    - 409: the order exists, the entry is resolved or not a payment waiting for its order, or its message is
      gone, expired or held by a delivery.
    - 503: the state store or Service Bus failed; posting the same discard again goes on from what was written."""
    try:
        done = discard(ctx, order_id, seq, operator, reason)
    except DocumentError as exc:
        return error(409, f"the deferral document of order {order_id} does not map ({exc}): repair it, then try again")
    except StoreError as exc:
        return error(503, f"the state store is unavailable: {exc}; post the same discard again")
    except Exception as exc:  # the receiver's (ReceiveError), or a settlement's: the entry may be written
        return error(
            503,
            f"Service Bus failed ({type(exc).__name__}: {exc}); if the discard was recorded, the peek sweep "
            "dead-letters the message as recorded: post the same discard again to finish it now",
        )
    if done.outcome == "unknown":
        return error(404, done.why)
    if done.outcome in ("refused", "order-exists"):
        return error(409, done.why)
    body: dict[str, Any] = {
        "action": "discard",
        "by": operator,
        "orderId": order_id,
        "sequenceNumber": seq,
        "entry": None if done.entry is None else to_document(done.entry),
        "deadLettered": done.dead_lettered,
    }
    if done.why:  # the order was submitted meanwhile, and the message dead-lettered as discarded all the same
        body["note"] = done.why
    if done.outcome == "repeated":
        body["repeated"] = True
        app_event(
            "OperatorActionRepeated",
            f"order {order_id}: discard of deferred #{seq} by {operator} posted again; already taken, nothing written",
            orderId=order_id,
            operator=operator,
            action="discard",
            sequenceNumber=seq,
        )
    return json_reply(200, body)
