"""Recovery of one expired attempt: one conditional update, never a blind retry.

The update re-reads nothing: it replaces the record the scan returned, on that record's ``_etag``,
and ``domain.transitions.supervisor_retry`` (through ``domain.compensation.escalate_or_compensate``,
which hands an order that exhausted its retries before the pivot to compensation instead of Error)
re-checks that ``lockedBy`` is still the expired instance and ``completeBy`` still past by the supervisor's grace
(``SUPERVISOR_GRACE_SECONDS``, ``transitions.past_due``). Whoever
moved the record in between (the orchestration finishing its step, another supervisor, an
operator) wins; this supervisor skips the record. A ``Received`` the record still owes its submitter
(``receivedOwed``: a claim whose delivery died before handing its failed send over) is said before
the write, which clears the mark (``notifications.received``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from adapters.cosmos.errors import EtagMismatch
from dependencies import AppContext
from domain import transitions
from domain.compensation import act_on_left_decision, escalate_or_compensate, settled_by_decision
from domain.compensation_policy import ReviewPolicy
from domain.errors import IllegalTransition
from domain.outage import failed_transiently, forward_in_flight, still_working
from domain.records import StateRecord
from domain.retry import exponential_backoff
from domain.review import LeftDecision, decision_left
from domain.states import ProcessState
from domain.timefmt import text_or_none, to_text
from notifications.received import say_owed_received
from observability.events import app_event
from supervisor.backend_wait import ABSENT, backend_wait_reason, in_backends_hands, left_to_backend, note_left
from supervisor.horizon import deadline_horizon
from supervisor.outage import outage_verdict, tell_waiting
from supervisor.owed import deliver_owed, owe_notifications, write_or_reread
from supervisor.payment_wait import gave_up as payment_gave_up
from supervisor.payment_wait import payment_verdict
from supervisor.payment_wait import released as payment_released

log = logging.getLogger(__name__)

RETRIES_EXHAUSTED = "RetriesExhausted"


class RecoveryAction(StrEnum):
    RECOVERED = "recovered"  # back to Pending, retried after a backoff
    ESCALATED = "escalated"  # Error, an operator was alerted
    SKIPPED = "skipped"  # someone else moved the record first
    WAITING = "waiting"  # failed on an open dependency, or waited for a payment notification: Pending, not counted
    COMPENSATING = "compensating"  # retries exhausted before the pivot: handed to compensation
    LEFT = "left"  # its Durable instance has not run it yet (supervisor/backend_wait.py): not written, looked at again
    START_MISSED = "start_missed"  # the backend never had it (its start failed): Pending, not counted


@dataclass(frozen=True)
class RecoveryResult:
    order_id: str
    action: RecoveryAction  # what the supervisor did with the expired attempt
    expired_instance: str | None  # the attempt to terminate (None when skipped)
    record: StateRecord | None = None  # the record as written (None when skipped)
    alert_sent: bool = False


def recover(ctx: AppContext, record: StateRecord, status: str | None = None) -> RecoveryResult:
    """Recovers ``record`` (as the scan read it) if it is still the same expired attempt. ``status``: the runtime
    status of its instance, read before the run's recoveries (None: not read): one the Durable backend has still to
    run is left to it for ``SUPERVISOR_BACKEND_WAIT_SECONDS`` (``supervisor/backend_wait.py``); an attempt that
    never began and whose instance the backend does not know (``ABSENT``: its start failed) did no work, and is
    released without counting a failure, up to ``MAX_STARTS_MISSED`` in a row (``transitions.start_missed``)."""
    now = ctx.clock.now()
    grace = ctx.settings.supervisor_grace  # the scan found it this long past its deadline; re-checked in the write
    wait = ctx.settings.supervisor_backend_wait
    unknown = deadline_horizon(ctx.settings)  # how long one whose deadline was removed by hand is left at most
    if left_to_backend(record, status, now, grace, wait, unknown):
        return _left(record, status, now, grace, wait, unknown)
    # the backend never had the attempt (its start failed) and it never began: it did no work, nothing is counted
    missed = status == ABSENT and transitions.never_began(record)
    if missed and transitions.start_missable(record):
        return _start_missed(ctx, record, now, grace)
    # still in the backend's hands past the wait: counted as before, saying so
    kept = wait > timedelta(0) and in_backends_hands(record, status)
    expired = record.locked_by
    failures = record.failure_count + 1
    backoff = exponential_backoff(failures, ctx.settings.retry_backoff_base, ctx.settings.retry_backoff_max, ctx.rng)
    policy = ReviewPolicy(ctx.settings.review_amount_threshold_cents)
    # A review decision the attempt never acted on is carried out, not retried over (docs/supervisor.md).
    left = decision_left(record) if expired is not None else None
    prepaid = _prepaid(ctx, record.order_id, left)
    if left is not None and settled_by_decision(left, prepaid=prepaid):
        return _act_on_decision(ctx, record, left, prepaid)
    # A payment notification held up is not the order's failure either: wait for it (supervisor/payment_wait.py),
    # up to a bound. The attempt made no call then: it is not read as an outage's.
    payment = payment_verdict(ctx, record, now) if left is None else None
    # An outage is not the order's failure: wait it out (supervisor/outage.py), up to a bound.
    in_flight = forward_in_flight(record)
    # its service answered the attempt's last try "still working on an earlier call with this key": waited for
    working = still_working(record)
    outage = (
        outage_verdict(
            ctx,
            record,
            in_flight,
            now,
            failed_transiently=failed_transiently(record),
            still_working=working,
        )
        if payment is None
        else None
    )
    max_failures = ctx.settings.max_failures
    if outage is not None and outage.exceeded:
        max_failures = failures  # the wait is over: escalate now, saying why
    given_up = payment.gave_up(now) if payment is not None and payment.exceeded else None
    amount = _order_total(ctx, record.order_id) if failures >= max_failures or given_up else 0

    def move(r: StateRecord) -> StateRecord:
        if left is not None and expired is not None:  # retry or alternative: closed, then retried as usual
            r = act_on_left_decision(r, expired, left, now, grace, prepaid=prepaid)
        if payment is not None and not payment.exceeded:
            return transitions.wait_for_payment(r, expired, now, payment.until, payment.since, payment.reason, grace)
        if outage is not None and not outage.exceeded:
            return transitions.wait_out_outage(
                r,
                expired,
                now,
                outage.until,
                outage.dependency,
                outage.since,
                grace,
                still_working=outage.still_working,
            )
        if outage is not None:
            r = replace(r, last_error=outage.escalation_reason(now))
        elif kept:
            r = replace(r, last_error=backend_wait_reason(r, status, now))
        elif missed:  # MAX_STARTS_MISSED in a row: counted now, saying that the backend never had it
            r = replace(r, last_error=transitions.start_missed_reason(r))
        escalated = escalate_or_compensate(
            r, expired, now, max_failures, backoff, policy, amount, gave_up=given_up, grace=grace
        )
        return owe_notifications(escalated)

    def move_and_say(r: StateRecord) -> StateRecord:
        # a Received the submitter may not have heard (a claim whose delivery died before handing it over)
        return say_owed_received(ctx.sender, move(r), now)

    try:
        # A lost response is re-read, not counted as a failure: an escalation that committed must
        # still alert (supervisor/owed.py).
        written = write_or_reread(ctx, record, move_and_say)
    except (EtagMismatch, IllegalTransition) as exc:
        return _skipped(record, expired, exc)
    if left is not None and expired is not None:  # retry or alternative: closed, and retried below
        _acted_on_review(written, expired, left)
    if payment is not None and not payment.exceeded:
        payment_released(ctx, record, written, expired, payment)
        ctx.counts.bump(ProcessState.PROCESSING, -1)
        ctx.counts.bump(ProcessState.PENDING, +1)
        return RecoveryResult(written.order_id, RecoveryAction.WAITING, expired, written)
    if payment is not None:
        payment_gave_up(written, expired, payment)
    if outage is not None and not outage.exceeded:
        app_event(
            "SupervisorOutageWait",
            f"order {written.order_id}: {outage.dependency} "
            f"{'is still working on its step' if working else 'is unavailable'}; retry not before "
            f"{text_or_none(written.complete_by)}, not counted as a failure",
            orderId=written.order_id,
            instanceId=expired,
            attempt=written.attempt,
            dependency=outage.dependency,
            stillWorking=working,
            failureCount=written.failure_count,
            notBefore=to_text(outage.until),
            waitingSince=to_text(outage.since),
        )
        # once per wait
        tell_waiting(ctx, record, written, outage.dependency, "Processing", still_working=outage.still_working)
        ctx.counts.bump(ProcessState.PROCESSING, -1)
        ctx.counts.bump(ProcessState.PENDING, +1)
        return RecoveryResult(written.order_id, RecoveryAction.WAITING, expired, written)
    if written.process_state is ProcessState.COMPENSATING:
        app_event(
            "SupervisorCompensating",
            f"order {written.order_id}: {written.failure_count} failed attempts before the pivot; compensating",
            logging.WARNING,
            orderId=written.order_id,
            instanceId=expired,
            attempt=written.attempt,
        )
        ctx.counts.bump(ProcessState.PROCESSING, -1)
        return RecoveryResult(written.order_id, RecoveryAction.COMPENSATING, expired, written)
    if written.process_state is ProcessState.ERROR:
        # The RetriesExhausted alert and the Failed status, owed by the write: sent now and
        # acknowledged, or left owed for the next run's sweep (never lost with a failed send).
        sent = deliver_owed(ctx, written)
        app_event(
            "SupervisorEscalated",
            f"order {written.order_id}: {written.failure_count} failed attempts, moved to Error",
            logging.WARNING,
            orderId=written.order_id,
            instanceId=expired,
            attempt=written.attempt,
            failureCount=written.failure_count,
            alertSent=sent,
        )
        ctx.counts.bump(ProcessState.PROCESSING, -1)
        return RecoveryResult(written.order_id, RecoveryAction.ESCALATED, expired, written, alert_sent=sent)
    app_event(
        "SupervisorRecovered",
        f"order {written.order_id}: attempt {written.attempt} expired; retry not before "
        f"{text_or_none(written.complete_by)}",
        orderId=written.order_id,
        instanceId=expired,
        attempt=written.attempt,
        failureCount=written.failure_count,
        notBefore=text_or_none(written.complete_by),
        backoffSeconds=backoff.total_seconds(),
    )
    ctx.counts.bump(ProcessState.PROCESSING, -1)
    ctx.counts.bump(ProcessState.PENDING, +1)
    return RecoveryResult(written.order_id, RecoveryAction.RECOVERED, expired, written)


def _act_on_decision(ctx: AppContext, record: StateRecord, left: LeftDecision, prepaid: bool) -> RecoveryResult:
    """``compensate`` or ``fail``, decided at the attempt's review, carried out in one conditional write
    (``domain.compensation.act_on_left_decision``); Error owes its alert and status, as a failure by
    the attempt does."""
    now = ctx.clock.now()
    expired = str(record.locked_by)

    grace = ctx.settings.supervisor_grace

    def act(r: StateRecord) -> StateRecord:
        decided = act_on_left_decision(r, expired, left, now, grace, prepaid=prepaid)
        return say_owed_received(ctx.sender, owe_notifications(decided), now)

    try:
        written = write_or_reread(ctx, record, act)
    except (EtagMismatch, IllegalTransition) as exc:
        return _skipped(record, expired, exc)
    escalated = written.process_state is ProcessState.ERROR
    sent = deliver_owed(ctx, written) if escalated else False
    _acted_on_review(written, expired, left)
    ctx.counts.bump(ProcessState.PROCESSING, -1)
    if escalated:
        return RecoveryResult(written.order_id, RecoveryAction.ESCALATED, expired, written, alert_sent=sent)
    return RecoveryResult(written.order_id, RecoveryAction.COMPENSATING, expired, written)


def _start_missed(ctx: AppContext, record: StateRecord, now: datetime, grace: timedelta) -> RecoveryResult:
    """Releases ``record``'s attempt, one the Durable backend never had, uncounted (``transitions.start_missed``):
    Pending, not before a backoff doubling with the starts missed in a row. Its instance is terminated as any
    expired attempt's (a start that landed after all ends there; it is fenced anyway)."""
    expired = record.locked_by
    missed = record.starts_missed + 1
    backoff = exponential_backoff(missed, ctx.settings.retry_backoff_base, ctx.settings.retry_backoff_max, ctx.rng)

    def move(r: StateRecord) -> StateRecord:
        return say_owed_received(ctx.sender, transitions.start_missed(r, expired, now, now + backoff, grace), now)

    try:
        written = write_or_reread(ctx, record, move)
    except (EtagMismatch, IllegalTransition) as exc:
        return _skipped(record, expired, exc)
    app_event(
        "SupervisorStartMissed",
        f"order {written.order_id}: the Durable backend never had {expired} (its start failed); retry not before "
        f"{text_or_none(written.complete_by)}, not counted as a failure ({written.starts_missed} of "
        f"{transitions.MAX_STARTS_MISSED} in a row)",
        logging.WARNING,
        orderId=written.order_id,
        instanceId=expired,
        attempt=written.attempt,
        startsMissed=written.starts_missed,
        failureCount=written.failure_count,
        notBefore=text_or_none(written.complete_by),
        backoffSeconds=backoff.total_seconds(),
    )
    ctx.counts.bump(ProcessState.PROCESSING, -1)
    ctx.counts.bump(ProcessState.PENDING, +1)
    return RecoveryResult(written.order_id, RecoveryAction.START_MISSED, expired, written)


def _left(
    record: StateRecord, status: str | None, now: datetime, grace: timedelta, wait: timedelta, unknown: timedelta
) -> RecoveryResult:
    note_left(record, status, now, grace, wait, unknown)
    return RecoveryResult(record.order_id, RecoveryAction.LEFT, None, record)


def _skipped(record: StateRecord, expired: str | None, exc: Exception) -> RecoveryResult:
    app_event(
        "SupervisorSkipped",
        f"order {record.order_id}: not recovered, another writer moved it first ({type(exc).__name__})",
        orderId=record.order_id,
        instanceId=expired,
        reason=type(exc).__name__,
    )
    return RecoveryResult(record.order_id, RecoveryAction.SKIPPED, None)


def _acted_on_review(written: StateRecord, expired: str, left: LeftDecision) -> None:
    app_event(
        "SupervisorActedOnReview",
        f"order {written.order_id}: attempt {expired} ended before acting on review {left.review_id}; "
        f"its decision {left.action} is carried out: {written.process_state}",
        logging.WARNING,
        orderId=written.order_id,
        instanceId=expired,
        reviewId=left.review_id,
        action=left.action,
        operator=left.operator,
        state=str(written.process_state),
    )


def _prepaid(ctx: AppContext, order_id: str, left: LeftDecision | None) -> bool:
    """Whether the order is prepaid, which only an ``alternative`` left to the supervisor asks (a prepaid
    order's payment step has no fallback: ``Step.fallback_for``): one point read then, none otherwise. A
    read that fails raises: the record is left to the next run, uncounted."""
    if left is None or left.action != "alternative":
        return False
    order = ctx.orders.get(order_id)
    return bool(order and order.get("prepaid"))


def _order_total(ctx: AppContext, order_id: str) -> int:
    """The order total the review threshold is compared with (read only when escalating)."""
    order = ctx.orders.get(order_id)
    return int(order.get("totalCents", 0)) if order else 0
