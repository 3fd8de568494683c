"""The handler of ``CancelOrder`` (on the ``orders`` queue): the decision function says what a
cancellation does.

- before the pivot (Pending, Processing or Error): the record goes to ``Compensating`` by one
  conditional update, unowned, due now (or, while a step is in flight, at that step's deadline, after
  which its agent starts no call); the running attempt, if any, loses the record at its next fenced
  write; the supervisor's next run starts the compensation round, which undoes every completed step;
- past the pivot (the shipment is arranged or being arranged, or the order is Processed): nothing is
  undone and the submitter gets a ``CancellationRejected`` status with the reason;
- already compensating or compensated: nothing to do (a duplicate cancellation).

A cancellation for an order this app does not know looks again later, on the schedule of the orders'
own retries after a Cosmos DB failure (its order may be on its way: ``submission.store_outage``), and is
dead-lettered (``UnknownOrder``) after its last round; one for an order admission control refused (the refusal
standing) is completed then (``CancelIgnored``): its submitter was told ``Rejected``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from adapters.cosmos.errors import EtagMismatch
from adapters.cosmos.state_store import update_once
from adapters.servicebus.sender import SendError
from adapters.servicebus.settlement import ReceivedMessage, Settlement
from contracts.messages import CancelOrder
from dependencies import AppContext
from domain.compensation import cancellation_not_before, enter_compensation, pivot_passed, undo_pending
from domain.compensation_policy import Action, ReviewPolicy, Situation, Trigger, decide_compensation
from domain.errors import IllegalTransition
from domain.records import StateRecord
from domain.states import ProcessState
from domain.timefmt import to_text
from notifications.alerts import OwedAlert
from notifications.received import owe_before_failure, say_received_first
from notifications.status import OwedStatus, publish_status_or_owe
from observability.events import app_event
from submission.result import IntakeResult
from submission.store_outage import retry_later, rounds_used_up

CANCELLATION = "cancellation"
ALREADY_UNDOING = frozenset({ProcessState.COMPENSATING, ProcessState.COMPENSATED, ProcessState.COMPENSATION_FAILED})
RACE_RETRIES = 3


def cancel_order(ctx: AppContext, contract: Any, message: ReceivedMessage, owed: list[OwedAlert]) -> IntakeResult:
    """The handler of ``CancelOrder``; it raises no alert (``owed``, the message's alerts owed, stays as it is)."""
    if not isinstance(contract, CancelOrder):
        raise TypeError(f"cancel_order handles CancelOrder, not {type(contract).__name__}")
    for _ in range(RACE_RETRIES):
        record = ctx.states.get(contract.order_id)
        if record is None:
            if not rounds_used_up(message):
                # Its order may be on its way: one that met a Cosmos DB blip or outage is handled again
                # later (submission/store_outage.py), after this cancellation. Look again on the same
                # schedule, and dead-letter it only once the order's own retries are over.
                return retry_later(ctx, message, "CancelOrder", f"no order {contract.order_id!r} yet", store_down=False)
            return _no_order(ctx, contract)
        result = _cancel_once(ctx, record, contract)
        if result is not None:
            return result
    return IntakeResult(Settlement.abandon(f"order {contract.order_id}: the record kept changing; try again"))


def _no_order(ctx: AppContext, cancel: CancelOrder) -> IntakeResult:
    """The order is still not there after its last round: if admission control refused it (``MAX_PENDING``, the
    refusal standing: its submitter was told ``Rejected``), there is nothing to cancel and nothing for an operator
    to do, so the cancellation is completed (``CancelIgnored``); otherwise nobody knows the order (``UnknownOrder``).
    Before, a cancellation of a refused order was dead-lettered ``UnknownOrder`` and paged an operator for it
    (found by ``localrun fuzz``, seed 5004: a cancel of one of 124 orders refused at a pending cap of 6)."""
    deferrals = ctx.deferrals.get(cancel.order_id)
    if deferrals is not None and deferrals.rejected_at is not None:
        app_event(
            "CancelIgnored",
            f"order {cancel.order_id}: refused at admission ({to_text(deferrals.rejected_at)}): nothing to cancel",
            orderId=cancel.order_id,
        )
        return IntakeResult(Settlement.complete())
    return IntakeResult(Settlement.deadletter("UnknownOrder", f"no order {cancel.order_id!r} to cancel"))


def _cancel_once(ctx: AppContext, record: StateRecord, cancel: CancelOrder) -> IntakeResult | None:
    """The result, or None when another writer moved the record first (read again and retry)."""
    now = ctx.clock.now()
    if record.process_state in ALREADY_UNDOING:
        app_event("CancelIgnored", f"order {record.order_id}: already {record.process_state}", orderId=record.order_id)
        return IntakeResult(Settlement.complete())
    decision = decide_compensation(
        Situation(
            trigger=Trigger.CANCEL_REQUESTED,
            passed_pivot=pivot_passed(record) or record.process_state is ProcessState.PROCESSED,
            undo_pending=undo_pending(record),
            amount_cents=0,
        ),
        ReviewPolicy(ctx.settings.review_amount_threshold_cents),
    )
    if decision.action is not Action.COMPENSATE:
        app_event("CancellationRejected", f"order {record.order_id}: {decision.reason}", orderId=record.order_id)
        return IntakeResult(Settlement.complete(), owed=_tell_rejected(ctx, record, decision.reason, now))
    # while a step is in flight, at its deadline; during a review pause, now (the operator's cancel asks the same)
    not_before = cancellation_not_before(record)
    reason = f"cancelled by the client: {cancel.reason}"
    try:
        update_once(
            ctx.states,
            record,
            # an order no attempt began a step of owes Received (its mark may have been given up): the
            # compensation round's claim says it before the round's Compensating
            lambda r: owe_before_failure(enter_compensation(r, CANCELLATION, reason, now, not_before=not_before), now),
        )
    except (EtagMismatch, IllegalTransition):
        return None
    if record.process_state in (ProcessState.PENDING, ProcessState.PROCESSING):
        ctx.counts.bump(record.process_state, -1)
    app_event("CancellationAccepted", f"order {record.order_id}: {reason}; compensating", orderId=record.order_id)
    return IntakeResult(Settlement.complete())


def _tell_rejected(ctx: AppContext, record: StateRecord, reason: str, now: datetime) -> tuple[OwedStatus, ...]:
    """``CancellationRejected`` to the submitter, after the ``Received`` the record may still owe
    (``notifications.received.say_received_first``). While that one cannot be said (its send failed, its queue
    refuses it), the status is not tried here: it goes to the courier, whose every try says ``Received`` first."""
    owed = OwedStatus(record.order_id, "CancellationRejected", record.attempt, record.reply_to or "", reason)
    try:
        said = say_received_first(ctx.states, ctx.sender, record, now, owed.status)
    except SendError:
        said = False
    if not said and record.reply_to:
        return (owed,)
    sent = publish_status_or_owe(
        ctx.sender,
        reply_to=record.reply_to,
        order_id=record.order_id,
        status=owed.status,
        attempt=owed.attempt,
        at=now,
        reason=reason,
    )
    return (sent,) if sent else ()
