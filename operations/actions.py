"""Operator actions through the domain's own moves. Each records who (the signed-in principal) and
why (the reason), and answers the new state, or why the move is not legal now.

- resubmit: ``Error -> Pending`` (``supervisor.operator.resubmit_order``); the starter claims it;
- cancel: ``Pending | Processing | Error -> Compensating`` when the decision function allows it
  (before the pivot), as a client's ``CancelOrder`` does;
- compensate: ``Error | CompensationFailed -> Compensating`` (``supervisor.operator.compensate_order``);
- review: the record notes who answers (``domain.review``, one conditional write: of two answers
  at once the second is refused 409), then the paused attempt gets the ``ReviewDecision`` event from
  the app's own durable client (``operations.blueprint``); an event that cannot be raised takes the
  note back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from adapters.cosmos.errors import EtagMismatch, StoreUnavailable
from adapters.cosmos.state_store import update_once
from dependencies import AppContext
from domain.compensation import cancellation_not_before, enter_compensation, pivot_passed, undo_pending
from domain.compensation_policy import Action, ReviewPolicy, Situation, Trigger, decide_compensation
from domain.errors import IllegalTransition
from domain.records import StateRecord
from domain.review import PendingReview, note_review_answer, pending_review, reopen_review, review_answer
from domain.states import ProcessState
from observability.events import app_event
from operations.views import order_row
from operations.web import Reply, error, json_reply
from supervisor.operator import RecordNotFound, compensate_order, resubmit_order

NOT_CANCELLABLE = frozenset(
    {ProcessState.COMPENSATING, ProcessState.COMPENSATED, ProcessState.COMPENSATION_FAILED, ProcessState.PROCESSED}
)


def _done(record: StateRecord, action: str, operator: str) -> Reply:
    return json_reply(200, {"action": action, "by": operator, "order": order_row(record)})


def _guarded(order_id: str, move: Callable[[], Reply]) -> Reply:
    try:
        return move()
    except RecordNotFound:
        return error(404, f"no order {order_id}")
    except IllegalTransition as exc:
        return error(409, str(exc))
    except EtagMismatch:
        return error(409, f"order {order_id} changed while you acted: reload it and try again")
    except StoreUnavailable as exc:
        return error(503, f"the state store is unavailable: {exc}")


def resubmit(ctx: AppContext, order_id: str, operator: str, reason: str) -> Reply:
    return _guarded(order_id, lambda: _done(resubmit_order(ctx, order_id, operator, reason), "resubmit", operator))


def compensate(ctx: AppContext, order_id: str, operator: str, reason: str) -> Reply:
    return _guarded(order_id, lambda: _done(compensate_order(ctx, order_id, operator, reason), "compensate", operator))


def _cancel_once(ctx: AppContext, order_id: str, operator: str, reason: str) -> Reply:
    record = ctx.states.get(order_id)
    if record is None:
        raise RecordNotFound(order_id)
    if record.process_state in NOT_CANCELLABLE:
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
    why = f"cancelled by operator {operator}: {reason}"
    now = ctx.clock.now()
    written = update_once(
        ctx.states, record, lambda r: enter_compensation(r, operator, why, now, not_before=not_before)
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


def review_to_answer(ctx: AppContext, order_id: str) -> PendingReview | Reply:
    """The review the order waits for, or the reply saying why it cannot be answered."""
    try:
        record = ctx.states.get(order_id)
    except StoreUnavailable as exc:
        return error(503, f"the state store is unavailable: {exc}")
    if record is None:
        return error(404, f"no order {order_id}")
    pending = pending_review(record)
    if pending is None:
        return error(409, f"order {order_id} is {record.process_state} and not waiting for a review")
    return pending


def decision_event(pending: PendingReview, action: str, operator: str, reason: str) -> dict[str, Any]:
    """The ``ReviewDecision`` event data the scheduler matches on ``reviewId``."""
    return {"reviewId": pending.review_id, "action": action, "operator": operator, "reason": reason}


def _answered_elsewhere(order_id: str, record: StateRecord, pending: PendingReview) -> Reply:
    """409 for an answer that came too late: who answered first and with what, when the record says."""
    first = review_answer(record, pending.review_id)
    if first is None:
        return error(
            409, f"order {order_id} is {record.process_state} and no longer waits for review {pending.review_id}"
        )
    return json_reply(
        409,
        {
            "error": f"review {pending.review_id} of order {order_id} was already answered: "
            f"{first.action} by {first.operator}",
            "status": 409,
            "reviewId": pending.review_id,
            "decision": first.action,
            "by": first.operator,
        },
    )


def claim_answer(
    ctx: AppContext, order_id: str, pending: PendingReview, operator: str, action: str, reason: str
) -> StateRecord | Reply:
    """Before the event is raised: the record notes who answers, with what and why, by one conditional
    write. Of two operators answering at once, only the one whose note is written raises the event; the
    other is answered 409 with the first answer. (The attempt takes the first ``ReviewDecision`` it gets,
    so raising first and noting after could tell the second operator their decision was taken.)"""
    now = ctx.clock.now()

    def move() -> StateRecord | Reply:
        for _ in range(3):
            record = ctx.states.get(order_id)
            if record is None:
                raise RecordNotFound(order_id)
            try:
                return update_once(
                    ctx.states,
                    record,
                    lambda r: note_review_answer(r, pending.review_id, operator, action, reason, now),
                )
            except IllegalTransition:
                return _answered_elsewhere(order_id, record, pending)
            except EtagMismatch:
                continue
        return error(409, f"order {order_id} changed while you acted: reload it and try again")

    try:
        return move()
    except RecordNotFound:
        return error(404, f"no order {order_id}")
    except StoreUnavailable as exc:
        return error(503, f"the state store is unavailable: {exc}")


def take_back_answer(ctx: AppContext, order_id: str, pending: PendingReview, operator: str) -> None:
    """The event could not be raised: the record waits for the review again (best effort: if the
    record moved on meanwhile, there is nothing to take back)."""
    try:
        record = ctx.states.get(order_id)
        if record is not None:
            update_once(ctx.states, record, lambda r: reopen_review(r, pending.review_id, operator, ctx.clock.now()))
    except (IllegalTransition, EtagMismatch, StoreUnavailable) as exc:
        app_event(
            "OperatorReviewNotReopened",
            f"order {order_id}: the undelivered answer of {operator} to review {pending.review_id} stays noted: {exc}",
            orderId=order_id,
            reviewId=pending.review_id,
        )


def answered(
    order_id: str, record: StateRecord, pending: PendingReview, operator: str, action: str, reason: str
) -> Reply:
    """The event was raised after the answer was noted: the attempt acts on it."""
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
