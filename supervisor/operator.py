"""Operator actions on a state record: resubmit (``Error`` -> ``Pending``, its failure count reset) and
compensate (``Error`` | ``CompensationFailed`` -> ``Compensating``), who and why recorded in the
record's history. The operator CLI / HTTP endpoint calls these (``operations.actions``; its cancel uses
``operator_cancelled`` and ``cancel_taken`` from here too).

Each write is read back when its response is lost (``update_once_or_reread``): a write that landed is
the action taken (its event logged once, the counts bumped), never a 503. The same action posted again
by the same operator, found as the record's own latest history entry (the first post's answer was lost,
or a double click), is answered with the record as it is (``ActionTaken.repeated``), not refused: the
action was taken."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

from adapters.cosmos.errors import EtagMismatch
from adapters.cosmos.state_store import update_once_or_reread
from dependencies import AppContext
from domain.compensation import COMPENSATION_REQUESTED, enter_compensation, settle_by_hand
from domain.errors import IllegalTransition
from domain.records import HistoryEntry, StateRecord, last_move
from domain.states import ProcessState
from domain.timefmt import to_text
from domain.transitions import resubmit
from observability.events import app_event

OperatorAction = Literal["resubmit", "cancel", "compensate"]
# The history event each action's write leaves (``transitions.resubmit``, ``enter_compensation``).
ACTION_EVENTS: dict[OperatorAction, str] = {
    "resubmit": "Resubmitted",
    "cancel": COMPENSATION_REQUESTED,
    "compensate": COMPENSATION_REQUESTED,
}
_CANCELLED_BY = "cancelled by operator "


class RecordNotFound(LookupError):
    """No state record for this order id."""


@dataclass(frozen=True)
class ActionTaken:
    """The record after an operator action; ``repeated``: the action was already the record's latest
    entry, by the same operator (nothing written now)."""

    record: StateRecord
    repeated: bool = False


def operator_cancelled(operator: str, reason: str) -> str:
    """Why an operator's cancel compensates (its history entry's detail and the record's ``lastError``)."""
    return f"{_CANCELLED_BY}{operator}: {reason}"


def repeated_action(record: StateRecord, action: Literal["resubmit", "compensate"], operator: str, reason: str) -> bool:
    """Whether ``operator``'s ``action`` with ``reason`` is the record's latest history entry: the same
    action posted again (its first answer lost, or posted twice). Another reason is another action (its
    reason would be recorded nowhere), refused like any action the record no longer allows. A cancel and
    a compensate leave the same event; a cancel's detail says it was one (``operator_cancelled``), so it is
    never taken for a compensate (a cancel posted again: ``cancel_taken``). "Latest" is the record's last move
    (``domain.records.last_move``): the side notes submission may write beside it since (a payment notification
    applied, ``Received`` owed) do not make the action another's. Only the latest: an order may come back to
    where the same action is allowed again (compensated again after its compensation failed again)."""
    last = last_move(record)
    return last is not None and _is_action(last, action, operator, reason)


def _is_action(entry: HistoryEntry, action: Literal["resubmit", "compensate"], operator: str, reason: str) -> bool:
    """Whether history ``entry`` is ``operator``'s ``action`` with ``reason``."""
    if entry.event != ACTION_EVENTS[action] or entry.by != operator:
        return False
    if action == "resubmit":  # the transition may add which steps got a fresh idempotency key
        return entry.detail == reason or entry.detail.startswith(f"{reason}; a fresh idempotency key for ")
    return entry.detail == reason


def refuse_moved_on(
    record: StateRecord, action: Literal["resubmit", "compensate"], operator: str, reason: str, why: str
) -> IllegalTransition:
    """The refusal of ``operator``'s ``action`` that the record no longer allows (``why``), saying so when the same
    action by the same operator with the same reason is in its history though no longer its latest move: its first
    answer lost (a 503), another operator's action or the app moved the order on before it was posted again. Still
    409 (nothing written now, and it may be an older one), but never read as "not taken"."""
    taken = next((h for h in reversed(record.history) if _is_action(h, action, operator, reason)), None)
    if taken is None:
        return IllegalTransition(why)
    return IllegalTransition(
        f"{why}; it is {record.process_state}: your {action} with this reason was taken at {to_text(taken.at)} and "
        "the order moved on since (reload it to see what happened)"
    )


def cancel_taken(record: StateRecord, operator: str, reason: str) -> bool:
    """Whether ``operator``'s cancel with ``reason`` is anywhere in the record's history, not only its latest move:
    an order never leaves compensation once it entered it, so the cancel found there is this one posted again (its
    first answer lost) however far its compensation went since. One older than the history keeps
    (``HISTORY_LIMIT`` entries) is refused, as any cancel of an order in compensation."""
    detail = operator_cancelled(operator, reason)
    return any(h.event == COMPENSATION_REQUESTED and h.by == operator and h.detail == detail for h in record.history)


def action_repeated(order_id: str, action: OperatorAction, operator: str) -> None:
    """Logs that ``operator``'s ``action`` was posted again and found already taken (answered 200)."""
    app_event(
        "OperatorActionRepeated",
        f"order {order_id}: {action} by {operator} posted again; already taken, nothing written",
        orderId=order_id,
        operator=operator,
        action=action,
    )


def resubmit_order(ctx: AppContext, order_id: str, operator: str, reason: str) -> StateRecord:
    """``resubmit_action``'s record."""
    return resubmit_action(ctx, order_id, operator, reason).record


def _judged_again_on_a_race(
    once: Callable[[AppContext, str, str, str], ActionTaken], ctx: AppContext, order_id: str, operator: str, reason: str
) -> ActionTaken:
    """``once`` (read, judge, conditional write); on a 412 (someone else wrote first) once more on a fresh read.
    A second 412 propagates (``EtagMismatch``: the caller answers 409)."""
    try:
        return once(ctx, order_id, operator, reason)
    except EtagMismatch:
        return once(ctx, order_id, operator, reason)


def resubmit_action(ctx: AppContext, order_id: str, operator: str, reason: str) -> ActionTaken:
    """Error -> Pending by a conditional replace, read back if its response is lost. On a 412 it re-reads
    once and tries again if the record is still Error. The same resubmit by the same operator as the
    record's latest entry is ``repeated``. Otherwise the caller sees why: ``IllegalTransition`` (the
    record is not, or no longer, Error), ``EtagMismatch`` (a second race), ``RecordNotFound``,
    ``StoreUnavailable`` (not written, or unknown: posting it again tells). The starter then claims
    the order as attempt + 1."""
    if not operator.strip() or not reason.strip():
        raise ValueError("a resubmit needs the operator's name and a reason")
    taken = _judged_again_on_a_race(_resubmit_once, ctx, order_id, operator, reason)
    if taken.repeated:
        action_repeated(order_id, "resubmit", operator)
        return taken
    app_event(
        "OperatorResubmitted",
        f"order {order_id}: resubmitted by {operator}: {reason}",
        orderId=order_id,
        operator=operator,
        reason=reason,
    )
    ctx.counts.bump(ProcessState.PENDING, +1)
    return taken


def _resubmit_once(ctx: AppContext, order_id: str, operator: str, reason: str) -> ActionTaken:
    record = ctx.states.get(order_id)
    if record is None:
        raise RecordNotFound(f"no state record for order {order_id!r}")
    if record.process_state is not ProcessState.ERROR:
        if repeated_action(record, "resubmit", operator, reason):
            return ActionTaken(record, repeated=True)
        raise refuse_moved_on(
            record, "resubmit", operator, reason, f"order {order_id}: only an Error record can be resubmitted"
        )
    written = update_once_or_reread(ctx.states, record, lambda r: resubmit(r, operator, reason, ctx.clock.now()))
    return ActionTaken(written)


def compensate_order(
    ctx: AppContext, order_id: str, operator: str, reason: str, *, undone_by_hand: tuple[int, ...] = ()
) -> StateRecord:
    """``compensate_action``'s record."""
    return compensate_action(ctx, order_id, operator, reason, undone_by_hand=undone_by_hand).record


def compensate_action(
    ctx: AppContext, order_id: str, operator: str, reason: str, *, undone_by_hand: tuple[int, ...] = ()
) -> ActionTaken:
    """Operator action after a review (or a fix): ``Error`` or ``CompensationFailed`` ->
    ``Compensating``, due now; the supervisor's next run starts the compensation round. ``undone_by_hand``: the
    entries of a ``CompensationFailed`` order the operator undid by hand (``domain.compensation.settle_by_hand``, in the
    same write): the round skips them and undoes the rest (an undo its provider refused for good is refused again under
    its key, so without it the round stopped there again). Read back if its
    response is lost; the same compensate by the same operator as the record's latest entry is
    ``repeated``. On a 412 it re-reads once and judges again, as resubmit does (a write that left the
    record in ``Error``, such as the supervisor acknowledging the alert it owed, does not refuse it).
    Refused (``IllegalTransition``) past the pivot: nothing may be undone then."""
    if not operator.strip() or not reason.strip():
        raise ValueError("compensating an order needs the operator's name and a reason")
    once = partial(_compensate_once, undone_by_hand=undone_by_hand)
    taken = _judged_again_on_a_race(once, ctx, order_id, operator, reason)
    if taken.repeated:
        action_repeated(order_id, "compensate", operator)
        return taken
    by_hand = f"; entries {', '.join(map(str, sorted(set(undone_by_hand))))} undone by hand" if undone_by_hand else ""
    app_event(
        "OperatorCompensated",
        f"order {order_id}: compensation requested by {operator}: {reason}{by_hand}",
        orderId=order_id,
        operator=operator,
        reason=reason,
        undoneByHand=sorted(set(undone_by_hand)),
    )
    return taken


def _compensate_once(
    ctx: AppContext, order_id: str, operator: str, reason: str, *, undone_by_hand: tuple[int, ...] = ()
) -> ActionTaken:
    record = ctx.states.get(order_id)
    if record is None:
        raise RecordNotFound(f"no state record for order {order_id!r}")
    if record.process_state not in (ProcessState.ERROR, ProcessState.COMPENSATION_FAILED):
        if repeated_action(record, "compensate", operator, reason):
            # the same post again only if it names no entry this operator's compensate did not undo by hand: one
            # posted first without them, then with, was answered "repeated" and the entries never marked
            by_them = {e.seq for e in record.compensation if e.undone_by == operator}
            left = sorted(set(undone_by_hand) - by_them)
            if not left:
                return ActionTaken(record, repeated=True)
            raise IllegalTransition(
                f"order {order_id} is {record.process_state} (your compensate without them was taken): undoneByHand "
                f"{', '.join(map(str, left))} can only be said of a CompensationFailed order"
            )
        raise refuse_moved_on(
            record,
            "compensate",
            operator,
            reason,
            f"order {order_id}: an operator compensates only an Error or CompensationFailed order",
        )
    now = ctx.clock.now()
    written = update_once_or_reread(
        ctx.states,
        record,
        lambda r: enter_compensation(settle_by_hand(r, undone_by_hand, operator, reason, now), operator, reason, now),
    )
    return ActionTaken(written)
