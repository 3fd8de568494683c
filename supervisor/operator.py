"""Operator resubmit: an ``Error`` record goes back to ``Pending`` with its failure count reset,
who and why recorded in the record's history. The operator CLI / HTTP endpoint calls this."""

from __future__ import annotations

from adapters.cosmos.errors import EtagMismatch
from adapters.cosmos.state_store import update_once
from dependencies import AppContext
from domain.compensation import enter_compensation
from domain.errors import IllegalTransition
from domain.records import StateRecord
from domain.states import ProcessState
from domain.transitions import resubmit
from observability.events import app_event


class RecordNotFound(LookupError):
    """No state record for this order id."""


def resubmit_order(ctx: AppContext, order_id: str, operator: str, reason: str) -> StateRecord:
    """Error -> Pending by a conditional replace. On a 412 it re-reads once and tries again if the
    record is still Error. Otherwise the caller sees why: ``IllegalTransition`` (the record is not,
    or no longer, Error), ``EtagMismatch`` (a second race), ``RecordNotFound``.
    The starter then claims the order as attempt + 1."""
    if not operator.strip() or not reason.strip():
        raise ValueError("a resubmit needs the operator's name and a reason")
    try:
        written = _resubmit_once(ctx, order_id, operator, reason)
    except EtagMismatch:
        written = _resubmit_once(ctx, order_id, operator, reason)
    app_event(
        "OperatorResubmitted",
        f"order {order_id}: resubmitted by {operator}: {reason}",
        orderId=order_id,
        operator=operator,
        reason=reason,
    )
    ctx.counts.bump(ProcessState.PENDING, +1)
    return written


def _resubmit_once(ctx: AppContext, order_id: str, operator: str, reason: str) -> StateRecord:
    record = ctx.states.get(order_id)
    if record is None:
        raise RecordNotFound(f"no state record for order {order_id!r}")
    return update_once(ctx.states, record, lambda r: resubmit(r, operator, reason, ctx.clock.now()))


def compensate_order(ctx: AppContext, order_id: str, operator: str, reason: str) -> StateRecord:
    """Operator action after a review (or a fix): ``Error`` or ``CompensationFailed`` ->
    ``Compensating``, due now; the supervisor's next run starts the compensation round. Refused
    (``IllegalTransition``) past the pivot: nothing may be undone then."""
    if not operator.strip() or not reason.strip():
        raise ValueError("compensating an order needs the operator's name and a reason")
    record = ctx.states.get(order_id)
    if record is None:
        raise RecordNotFound(f"no state record for order {order_id!r}")
    if record.process_state not in (ProcessState.ERROR, ProcessState.COMPENSATION_FAILED):
        raise IllegalTransition(f"order {order_id}: an operator compensates only an Error or CompensationFailed order")
    written = update_once(ctx.states, record, lambda r: enter_compensation(r, operator, reason, ctx.clock.now()))
    app_event(
        "OperatorCompensated",
        f"order {order_id}: compensation requested by {operator}: {reason}",
        orderId=order_id,
        operator=operator,
        reason=reason,
    )
    return written
