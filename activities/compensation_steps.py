"""The compensation activities, as plain functions of (context, input), and the scheduler's two
compensation-related writes (asking for compensation, pausing for review).

Every state write is fenced: it succeeds only while the calling instance holds ``lockedBy``;
otherwise it returns ``NotOwned`` and the orchestration ends quietly (inputs and results: the typed
protocol of ``contracts.activities``). Status updates and
operator alerts are sent from here, never from orchestrator code."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from activities.fencing import deadline_from_now, moved_on, owned_record, write_fenced
from adapters.cosmos.mapping import to_document
from contracts.activities import (
    MOVED_ON,
    NOT_OWNED,
    OWNED,
    AwaitReviewInput,
    BeginUndoInput,
    CloseReviewInput,
    CloseReviewResult,
    CompensationPlan,
    FailCompensationInput,
    FinishCompensationInput,
    HoldUndoInput,
    LoadCompensationInput,
    LoadCompensationResult,
    NotOwned,
    RecordUndoInput,
    ReleaseUndoInput,
    RequestCompensationInput,
    ReviewClosed,
    UndoBegun,
    UndoEntry,
    WriteResult,
)
from dependencies import AppContext
from domain import compensation, review, timefmt
from domain.compensation_policy import REVIEW_CHOICES
from domain.outage import release_round_to_wait, undo_in_flight
from domain.payments import money
from domain.records import last_move
from domain.states import ProcessState
from domain.timefmt import to_text
from notifications.alerts import raise_alert, raise_alert_after_write
from observability.events import app_event
from orchestrators import names
from supervisor.outage import outage_verdict, tell_waiting
from supervisor.owed import owe_notifications

# --- asked by the scheduler --------------------------------------------------------------------------


def request_compensation(ctx: AppContext, data: RequestCompensationInput) -> WriteResult:
    """The forward attempt hands the order over to compensation (Processing -> Compensating, unowned,
    due now). The supervisor's next run claims it and starts the compensation orchestration. Run again after the
    round claimed it (``activities.fencing.moved_on``): ``MOVED_ON``, not logged a second time."""
    now = ctx.clock.now()
    reason = f"{data.step}: {data.error or 'non-transient failure'}; {data.reason or 'compensating'}"
    written = write_fenced(
        ctx,
        data.order_id,
        data.instance_id,
        lambda r: compensation.enter_compensation(
            r, data.instance_id, reason, now, owner=data.instance_id, failed_step=data.step
        ),
        "request compensation",
        hand_over="CompensationRequested",
        number=data.write_number,
        # once per write: a run that finds it done by an earlier one (a retry, a late duplicate) counts nothing
        on_written=lambda: ctx.counts.bump(ProcessState.PROCESSING, -1),
    )
    if written is None:
        return NOT_OWNED
    if moved_on(written, data.instance_id):
        return MOVED_ON
    app_event("CompensationRequested", f"order {data.order_id}: {reason}", orderId=data.order_id)
    return OWNED


def await_review(ctx: AppContext, data: AwaitReviewInput) -> WriteResult:
    """Pauses the attempt for an operator: ``completeBy`` past the review deadline, and an
    ``OperatorAlert`` saying what to decide, by when, how, and what happens by default."""
    now = ctx.clock.now()
    until = data.until
    keep_until = until + ctx.settings.start_grace
    record = write_fenced(
        ctx,
        data.order_id,
        data.instance_id,
        lambda r: compensation.await_review(
            r,
            data.instance_id,
            data.step,
            data.review_id,
            until,
            now,
            keep_until=keep_until,
            error=data.error,
            default_action=data.default_action,
        ),
        "await review",
        number=data.write_number,
    )
    if record is None:
        return NOT_OWNED
    # what the attempt takes here (``compensation_policy.review_choices``: no ``alternative`` where no
    # fallback can take over); every choice for an attempt started before it said
    choices = tuple(data.choices) if data.choices else REVIEW_CHOICES
    raise_alert(
        ctx.sender,
        kind="ReviewRequired",
        # what to decide, by when, and the default before the error: the summary is cut at 200 characters
        summary=(
            f"order {record.order_id} failed at {data.step}: decide {', '.join(choices[:-1])} "
            f"or {choices[-1]} by {timefmt.to_text(until)}, else {data.default_action} ({data.error})"
        ),
        at=now,
        order_id=record.order_id,
        severity="critical",
        discriminator=data.review_id,
        details={
            "instanceId": data.instance_id,
            "reviewId": data.review_id,
            "step": data.step,
            "error": data.error,
            "reason": data.reason,
            "amountCents": data.amount_cents,
            "options": list(choices),
            "decideBy": timefmt.to_text(until),  # as the record's detail and the ops API say it
            "defaultAction": data.default_action,
            "how": (
                f"raise the Durable event {names.REVIEW_DECISION_EVENT!r} on instance {data.instance_id} with "
                f'{{"reviewId": "{data.review_id}", "action": "{"|".join(choices)}", "operator": "..."}}'
            ),
        },
    )
    return OWNED


def close_review(ctx: AppContext, data: CloseReviewInput) -> CloseReviewResult:
    """The review deadline passed: closes the review with one fenced write (``domain.review``), so no
    answer is noted after it. An answer noted before it is the decision (its operator was told it was
    taken, even if the event has not reached the attempt); else the default."""
    now = ctx.clock.now()
    record = write_fenced(
        ctx,
        data.order_id,
        data.instance_id,
        lambda r: review.close_review(r, data.instance_id, data.review_id, data.default_action, now),
        "close review",
        number=data.write_number,
    )
    if record is None:
        return NOT_OWNED
    closed = review.review_closed(record, data.review_id)
    if closed is None:  # pragma: no cover - close_review always leaves its entry
        raise RuntimeError(f"order {data.order_id}: review {data.review_id} not closed by its own write")
    closed_how = (
        f"closed at its deadline with {closed.operator}'s answer {closed.action}"
        if closed.operator is not None
        else f"not answered by its deadline: default {closed.action}"
    )
    summary = f"order {data.order_id}: review {data.review_id} {closed_how}"
    app_event(
        "ReviewClosed",
        summary,
        orderId=data.order_id,
        reviewId=data.review_id,
        action=closed.action,
        operator=closed.operator,
    )
    return ReviewClosed(action=closed.action, operator=closed.operator)


# --- the compensation orchestration ------------------------------------------------------------------


def load_compensation(ctx: AppContext, data: LoadCompensationInput) -> LoadCompensationResult:
    """The log and the retry rules; ``NotOwned`` unless this round holds the record."""
    record = owned_record(ctx, data.order_id, data.instance_id, ProcessState.COMPENSATING)
    if record is None:
        return NOT_OWNED
    return CompensationPlan(
        reply_to=record.reply_to,
        # waiting an outage out: the submitter was told so once (supervisor/outage.py), not per round
        outage_wait=record.outage_wait_since is not None,
        entries=[UndoEntry.from_json(to_document(e)) for e in record.compensation],
        step_timeout_seconds=ctx.settings.step_timeout.total_seconds(),
        undo_tries=ctx.settings.max_failures,
        retry_base_seconds=ctx.settings.retry_backoff_base.total_seconds(),
        retry_max_seconds=ctx.settings.retry_backoff_max.total_seconds(),
    )


def begin_undo(ctx: AppContext, data: BeginUndoInput) -> UndoBegun | NotOwned:
    """One fenced write: the undo of entry ``seq`` in flight and its deadline (``activities.fencing.deadline_from_now``:
    with ``timeout_seconds``, this write's time plus it, answered as ``deadline``)."""
    now = ctx.clock.now()
    request = deadline_from_now(data.request, data.timeout_seconds, now)
    written = write_fenced(
        ctx,
        request.order_id,
        request.instance_id,
        lambda r: compensation.begin_undo(r, request.instance_id, data.seq, request.request_id, request.deadline, now),
        f"begin undo {data.seq}",
        number=data.write_number,
    )
    if written is None:
        return NOT_OWNED
    # the deadline as written: an earlier run of this activity may have made the write (then found made)
    return UndoBegun(deadline=written.complete_by if data.timeout_seconds is not None else None)


def hold_undo(ctx: AppContext, data: HoldUndoInput) -> WriteResult:
    """The round holds its record through the backoff before an undo's next try: ``completeBy`` = that try's
    time + start grace (as after ``record_undo``: the round's next write must land by then)."""
    now = ctx.clock.now()
    complete_by = data.until + ctx.settings.start_grace
    written = write_fenced(
        ctx,
        data.order_id,
        data.instance_id,
        lambda r: compensation.hold_undo(r, data.instance_id, data.seq, data.until, complete_by, now),
        f"hold undo {data.seq}",
        number=data.write_number,
    )
    return NOT_OWNED if written is None else OWNED


def release_undo(ctx: AppContext, data: ReleaseUndoInput) -> WriteResult:
    """The round's undo met an open circuit (no call made) and the round ends: one fenced write hands the record to
    the supervisor at once, due now less its grace (``domain.compensation.release_undo``), as ``release_for_retry``
    does for an attempt. The supervisor's next run releases the round to wait the outage out, uncounted
    (``supervisor.compensation_rounds``); without it the record stayed held until the undo's deadline."""
    now = ctx.clock.now()
    reason = str(data.error or "circuit open: not called")
    written = write_fenced(
        ctx,
        data.order_id,
        data.instance_id,
        lambda r: compensation.release_undo(r, data.instance_id, data.seq, reason, now, ctx.settings.supervisor_grace),
        f"release undo {data.seq}",
        number=data.write_number,
    )
    return NOT_OWNED if written is None else OWNED


def record_undo(ctx: AppContext, data: RecordUndoInput) -> WriteResult:
    now = ctx.clock.now()
    next_deadline = now + ctx.settings.start_grace
    written = write_fenced(
        ctx,
        data.order_id,
        data.instance_id,
        lambda r: compensation.record_undo(r, data.instance_id, data.seq, next_deadline, now, data.result),
        f"record undo {data.seq}",
        number=data.write_number,
    )
    return NOT_OWNED if written is None else OWNED


def finish_compensation(ctx: AppContext, data: FinishCompensationInput) -> WriteResult:
    now = ctx.clock.now()
    record = write_fenced(
        ctx,
        data.order_id,
        data.instance_id,
        lambda r: compensation.finish_compensation(r, data.instance_id, now),
        "finish compensation",
        hand_over="Compensated",
        number=data.write_number,
    )
    if record is None:
        return NOT_OWNED
    app_event("Compensated", f"order {record.order_id}: every completed step undone", orderId=record.order_id)
    payment = compensation.uncaptured_prepayment(record)
    if payment is not None:
        # Money left at the provider: this alert must go out. A failed send fails the activity; its retry
        # (the orchestration's, on durable timers) finds the write made and sends it again, same MessageId.
        raise_alert(
            ctx.sender,
            kind="PrepaymentToRelease",
            summary=(
                f"order {record.order_id} was compensated and no undo refunded its prepayment "
                f"{payment.provider_reference} ({money(payment.amount_cents, payment.currency)}): it was never "
                "captured; release or refund it at the provider"
            ),
            at=now,
            order_id=record.order_id,
            discriminator=payment.notification_id,
            details={"notificationId": payment.notification_id, "providerReference": payment.provider_reference},
        )
    return OWNED


def fail_compensation(ctx: AppContext, data: FailCompensationInput) -> WriteResult:
    """One fenced write, ``CompensationFailed`` (or the round's release to wait an outage out), then the
    ``CompensationFailed`` alert; the round tells the submitter. Run again after its write was made and the record
    moved on (an operator compensated again, the next round claimed it: ``activities.fencing.moved_on``), it is
    answered ``MOVED_ON``: done, no alert (paged again, it went out under the next round's number with that round's
    reason, past duplicate detection) and no status for an order being compensated again."""
    now = ctx.clock.now()
    error = str(data.error or "undo failed")
    if data.transient:
        wait = _waits_the_outage_out(ctx, data, now)
        if wait.released:
            return NOT_OWNED  # released: the round ends; the supervisor claims the next one after the outage
        if wait.past_bound:
            # waited MAX_OUTAGE_WAIT_MINUTES: failed, saying so (an operator is needed, the outage alone); an undo its
            # service was still working on may still be done: undone by hand too, a refund would be made twice
            error = f"{error}; {STILL_WORKING_WARNING}" if data.still_working else error
            error = f"{error}; {wait.past_bound}"
    record = write_fenced(
        ctx,
        data.order_id,
        data.instance_id,
        # Owes the CompensationFailed alert and status until the supervisor acknowledges them.
        lambda r: owe_notifications(compensation.fail_compensation(r, data.instance_id, data.seq, error, now)),
        "fail compensation",
        hand_over="CompensationFailed",
        number=data.write_number,
    )
    if record is None:
        return NOT_OWNED
    if moved_on(record, data.instance_id):
        return MOVED_ON
    alert_compensation_failed(
        ctx,
        record.order_id,
        record.attempt,
        record.last_error or error,
        data.seq,
        compensation.not_undone(record),
        still_working=bool(data.still_working),
        outcome_unknown=data.transient,
    )
    return OWNED


WAITED = "OutageWait"  # the event of domain.outage.release_round_to_wait


@dataclass(frozen=True)
class _OutageWait:
    """``_waits_the_outage_out``'s answer: the round released the record to wait (``released``), or it fails the
    compensation, after waiting ``MAX_OUTAGE_WAIT_MINUTES`` (``past_bound``: the reason to add) or not."""

    released: bool = False
    past_bound: str | None = None


NO_WAIT = _OutageWait()


def _waits_the_outage_out(ctx: AppContext, data: FailCompensationInput, now: datetime) -> _OutageWait:
    """An undo that used up its tries on transient failures while its service had an outage (its circuit
    open at some moment since the round began, or failing with no success since: an undo alone in an outage
    makes fewer failed calls than open the circuit): the round releases the record to wait the outage out
    instead of failing the compensation, as the supervisor does for a stuck round (supervisor/outage.py).
    With few tries (``MAX_FAILURES`` 1) the failed calls that opened the circuit used them all up, and an
    outage alone left a ``CompensationFailed`` order for an operator. With no outage the compensation fails as
    before (``NO_WAIT``); past ``MAX_OUTAGE_WAIT_MINUTES`` of waiting it fails too, and ``past_bound`` is the reason
    to say so (``OutageVerdict.escalation_reason``, as the supervisor's escalations say it: without it, an order failed
    by the bound read as failed by its undo). A health store that cannot be read fails the activity (retried),
    never the compensation."""
    record = ctx.states.get(data.order_id)
    if record is None:
        return NO_WAIT
    last = last_move(record)
    if record.locked_by is None and last is not None and (last.by, last.event) == (data.instance_id, WAITED):
        # this very release, run again (its first run answered nothing): done, never failed over
        return _OutageWait(released=True)
    if record.locked_by != data.instance_id:
        return NO_WAIT  # the fenced write below says "not owned" (or "done", on a retry)
    # its tries used up on transient failures: an outage's too while the service has had no success since
    verdict = outage_verdict(
        ctx, record, undo_in_flight(record), now, failed_transiently=True, still_working=bool(data.still_working)
    )
    if verdict is None:
        return NO_WAIT
    if verdict.exceeded:
        return _OutageWait(past_bound=verdict.escalation_reason(now))
    released = write_fenced(
        ctx,
        data.order_id,
        data.instance_id,
        lambda r: release_round_to_wait(
            r,
            data.instance_id,
            now,
            verdict.until,
            verdict.dependency,
            verdict.since,
            still_working=verdict.still_working,
        ),
        "wait the outage out",
        hand_over=WAITED,
        number=data.write_number,
    )
    if released is None:
        return NO_WAIT
    app_event(
        "CompensationOutageWait",
        f"order {data.order_id}: undo {data.seq} used up its tries while {verdict.dependency} "
        f"{'was still working on it' if data.still_working else 'had an outage'}; "
        f"the round waits it out, next round not before {to_text(verdict.until)}, not counted as a failure",
        orderId=data.order_id,
        dependency=verdict.dependency,
        stillWorking=bool(data.still_working),
        notBefore=to_text(verdict.until),
        waitingSince=to_text(verdict.since),
    )
    # the submitter hears what the order waits for, once per wait, as from the supervisor's release of a stuck round
    tell_waiting(ctx, record, released, verdict.dependency, "Compensating", still_working=verdict.still_working)
    return _OutageWait(released=True)


# Said (reason, lastError, the alert's nextStep) of an undo failed past MAX_OUTAGE_WAIT_MINUTES while its service still
# answered "still working" on it: the service may still do it
STILL_WORKING_WARNING = (
    "its service was still working on this undo and may still do it: ask the provider whether it was done before "
    "undoing it by hand"
)


def alert_compensation_failed(
    ctx: AppContext,
    order_id: str,
    round_number: int,
    reason: str,
    seq: int | None,
    not_undone: list[int],
    *,
    still_working: bool = False,
    outcome_unknown: bool = False,
) -> None:
    """The ``CompensationFailed`` alert: the entry that failed (``entry``) and every entry still not undone
    (``notUndone``: the older ones the round never reached are held too). ``still_working``: the undo's service was
    still working on it when the wait's bound ended it (``stillWorking``): the next step warns that it may still be
    done. ``outcome_unknown``: its tries were used up on transient failures, none a refusal (``undoOutcomeUnknown``):
    the next step warns that it may have been done (``compensation.OUTCOME_UNKNOWN_WARNING``); before, it said only
    to undo it by hand, and a refund whose answer was lost (a timeout, an agent dead after its call) was made twice."""
    next_step = compensation.FAILED_NEXT_STEP
    if still_working:
        next_step = f"{STILL_WORKING_WARNING}; then {next_step}"
    elif outcome_unknown:
        next_step = f"{compensation.OUTCOME_UNKNOWN_WARNING}; else {next_step}"
    raise_alert_after_write(
        ctx.sender,
        kind="CompensationFailed",
        summary=f"order {order_id}: compensation failed; {reason}",
        at=ctx.clock.now(),
        order_id=order_id,
        severity="critical",
        discriminator=round_number,
        details={
            "round": round_number,
            "entry": seq,
            "notUndone": not_undone,
            "reason": reason,
            "stillWorking": still_working,
            "undoOutcomeUnknown": still_working or outcome_unknown,
            "nextStep": next_step,
        },
    )
