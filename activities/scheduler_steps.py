"""The scheduler's activities, as plain functions of (context, input). Each state write is fenced:
it succeeds only while the calling instance still holds ``lockedBy``; otherwise it returns
``NotOwned`` and the orchestration ends quietly. Inputs and results are the typed protocol of
``contracts.activities``; ``activities/blueprint.py`` parses and serialises them at the boundary.

Store or send failures raise: the activity fails, the orchestration fails with it, and the record
(still Processing, with a ``completeBy``) is recovered by the supervisor."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import notifications.status
from activities.fencing import deadline_from_now, moved_on, write_fenced
from adapters.cosmos.errors import StaleRead, StoreUnavailable
from adapters.cosmos.mapping import to_document
from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.activities import (
    MOVED_ON,
    NOT_OWNED,
    OWNED,
    AlertGivenUp,
    BeginStepInput,
    BeginStepResult,
    FailOrderInput,
    MarkProcessedInput,
    MarkProcessedResult,
    Processed,
    PublishStatusInput,
    ReceivedUnsent,
    ReleaseForRetryInput,
    RetiredSettled,
    SendAgentRequestInput,
    SendAlertInput,
    SettleRetiredInput,
    StatusGivenUp,
    StatusRefused,
    StepBegun,
    StepResult,
    WriteResult,
)
from contracts.messages import AgentRequest, StatusName
from dependencies import AppContext
from domain import transitions
from domain.compensation import complete_step_logged
from domain.ids import bounded
from domain.records import StateRecord
from domain.states import ProcessState
from notifications.alerts import raise_alert_after_write, send_owed_alert
from notifications.received import owe_if_unheard, say_before_status, say_received_unwritten
from notifications.status import Delivery
from observability.events import app_event
from orchestrators.status import NOT_AFTER_RECEIVED, PROGRESS_STATUSES
from supervisor.owed import note_status_sent, owe_notifications

# The failure statuses and the state their failure write leaves the record in: the only final statuses an operator
# can move an order on from (resubmit: ``Error -> Pending``; compensate: ``Error | CompensationFailed ->
# Compensating``), so the only ones ``publish_status`` checks the record for (``failure_moved_on``).
FAILED_IN: dict[str, ProcessState] = {
    "Failed": ProcessState.ERROR,
    "CompensationFailed": ProcessState.COMPENSATION_FAILED,
}


def begin_step(ctx: AppContext, data: BeginStepInput) -> BeginStepResult:
    """One fenced write: the previous step's result (``completes``) and this step's start and deadline.

    Then, with ``announce``, the ``Processing`` status (``_announce``); then the request, onto the agent's queue when
    ``queue`` is given. A failed request send fails the activity; its retry writes the same start again and re-sends
    the same MessageIds."""
    now = ctx.clock.now()
    request = deadline_from_now(data.request, data.timeout_seconds, now)
    completes = data.completes
    made: list[bool] = []  # this run made the write (else an earlier run of the activity did: found made)
    written = write_fenced(
        ctx,
        request.order_id,
        request.instance_id,
        lambda r: transitions.begin_step(
            _record_result(owe_if_unheard(r, now, unsure=bool(data.say_received)), request.instance_id, completes, now),
            request.instance_id,
            request.step,
            data.agent,
            request.request_id,
            request.deadline,
            now,
        ),
        f"begin {request.step}",
        number=data.write_number,
        on_written=lambda: made.append(True),
    )
    if written is None:
        return NOT_OWNED
    if data.timeout_seconds is not None and written.complete_by is not None:
        # the deadline as written: an earlier run of this activity may have made the write (then found made)
        request = request.model_copy(update={"deadline": written.complete_by})
    announced = _announce(ctx, written, request, found_made=not made) if data.announce else None
    if data.queue is not None:
        _send_request(ctx, data.queue, request)
    # A prepaid order's PaymentNotification applied before this step began (in the same document, so a
    # notification written after this write sees the step in flight and is raised as an event).
    payment = to_document(written.payment) if written.payment is not None else None
    deadline = request.deadline if data.timeout_seconds is not None else None
    return StepBegun(payment=payment, status_sent=announced, deadline=deadline)


def _announce(ctx: AppContext, written: StateRecord, request: AgentRequest, *, found_made: bool) -> bool | None:
    """Tells the submitter ``Processing`` once the attempt's first write is on the record; never raises.

    Tried once (``_tell_once``); a re-run says it again under the same MessageId. Never before a ``Received`` the
    record owes:
    - A record this run wrote that still owes it: its write tried ``Received`` and failed, so no ``Processing``
      (the next status says ``Received``).
    - A record found made (an earlier run wrote it and its answer was lost) may have been marked since (submission's
      ``receivedOwed``): ``Received`` is said first (``say_received_unwritten``, which leaves the mark to the
      record's next writer), then ``Processing``. While it cannot be said, no ``Processing``
      (tests/notifications/test_processing_after_a_lost_begin.py)."""
    if written.received_owed is not None:
        if not found_made:
            return None
        try:
            if not say_received_unwritten(ctx.sender, written, ctx.clock.now()):
                return None  # its queue refuses it within the window: still owed, no Processing (tried once)
        except SendError as exc:
            app_event(
                "StatusNotSent",
                f"order {request.order_id}: status Received, owed, not sent before Processing ({exc}); still owed",
                logging.WARNING,
                orderId=request.order_id,
                attempt=request.attempt,
                status="Received",
            )
            return None
    return _tell_once(ctx, written.reply_to, request.order_id, "Processing", request.attempt)


def send_agent_request(ctx: AppContext, data: SendAgentRequestInput) -> None:
    _send_request(ctx, data.queue, data.request)


def _send_request(ctx: AppContext, queue: str, request: AgentRequest) -> None:
    ctx.sender.send(
        queue,
        OutgoingMessage(
            body=request.to_json(),
            # a re-run of this activity collapses in duplicate detection; bounded: the id holds the order id
            message_id=bounded(request.request_id),
            subject="AgentRequest",
            correlation_id=request.order_id,
        ),
    )


def _record_result(record: StateRecord, owner: str, completes: StepResult | None, now: datetime) -> StateRecord:
    """The step result the scheduler carries into its next write (logged for compensation when the
    step is compensable); the record unchanged without one."""
    if completes is None:
        return record
    # completeBy moves on in the same write (the next step's deadline, or Processed clears it)
    return complete_step_logged(record, owner, completes.step, completes.result, now, now)


def release_for_retry(ctx: AppContext, data: ReleaseForRetryInput) -> WriteResult:
    now = ctx.clock.now()
    reason = str(data.error or "transient failure")
    written = write_fenced(
        ctx,
        data.order_id,
        data.instance_id,
        # the attempt ends: due to the supervisor at once, past its grace (``transitions.release_for_retry``)
        lambda r: transitions.release_for_retry(
            r,
            data.instance_id,
            data.step,
            reason,
            now,
            ctx.settings.supervisor_grace,
            still_working=bool(data.still_working),
            circuit_open=bool(data.dependency_open),
        ),
        "release for retry",
        number=data.write_number,
    )
    return NOT_OWNED if written is None else OWNED


def fail_order(ctx: AppContext, data: FailOrderInput) -> WriteResult:
    """One fenced write, ``Failed`` (the hand-over to an operator), then the ``OrderFailed`` alert.

    The orchestration then tells the submitter ``Failed``. A re-run after the record moved on (an operator
    resubmitted the order: ``activities.fencing.moved_on``) is answered ``MOVED_ON``: no alert (the first run sent
    it, or the record owed it until the operator acted; sent again, it would carry the next attempt's number past
    duplicate detection) and no ``Failed`` status for an order being processed again."""
    now = ctx.clock.now()
    reason = f"{data.step}: {data.error or 'non-transient failure'}"
    record = write_fenced(
        ctx,
        data.order_id,
        data.instance_id,
        # The alert and the Failed status are owed by this write: the supervisor delivers them until
        # acknowledged if the sends below (or the orchestration's) never go out (supervisor/owed.py).
        lambda r: owe_notifications(transitions.fail(r, data.instance_id, data.step, reason, now)),
        "fail",
        hand_over="Failed",
        number=data.write_number,
    )
    if record is None:
        return NOT_OWNED
    if moved_on(record, data.instance_id):
        return MOVED_ON
    raise_alert_after_write(
        ctx.sender,
        kind="OrderFailed",
        summary=f"order {record.order_id} failed at {data.step}: {data.error}",
        at=now,
        order_id=record.order_id,
        discriminator=record.attempt,
        details={"step": data.step, "attempt": record.attempt, "error": data.error},
    )
    # The submitter hears "Failed" from the orchestration, after this write (orchestrators.status).
    return OWNED


def mark_processed(ctx: AppContext, data: MarkProcessedInput) -> MarkProcessedResult:
    """One fenced write: the last step's result (``completes``) and ``Processed``; then the submitter
    hears ``Completed`` (tried once here: on a failed send the scheduler retries it on timers)."""
    now = ctx.clock.now()
    completes = data.completes
    written = write_fenced(
        ctx,
        data.order_id,
        data.instance_id,
        lambda r: transitions.mark_processed(
            _record_result(r, data.instance_id, completes, now), data.instance_id, now
        ),
        "processed",
        hand_over="Processed",
        number=data.write_number,
        # once per write: a run that finds it done by an earlier one (a retry, a late duplicate) counts nothing
        on_written=lambda: ctx.counts.bump(ProcessState.PROCESSING, -1),
    )
    if written is None:
        return NOT_OWNED
    if written.received_owed is not None:  # Received not said yet: Completed waits for it, on the scheduler's timers
        return Processed(status_sent=False)
    return Processed(status_sent=_tell_once(ctx, written.reply_to, data.order_id, "Completed", data.attempt))


def settle_retired_attempt(ctx: AppContext, data: SettleRetiredInput) -> RetiredSettled:
    """Settles what an instance of a retired scheduler version left, when it replays after an upgrade.

    - A record it still holds is released to the supervisor at once (``completeBy`` = now less its grace: retried
      within a supervisor run, not after the step's or a review's deadline). The step released is the one in
      flight as the fenced change reads it, so a late ``begin_step`` of the instance that lands first (a 412, read
      again) names it. It releases once (``_released_already``).
    - An order it already wrote ``Processed`` gets its ``Completed`` status (the old version sent it after that
      write), including one its own late ``mark_processed`` took between the read and the release."""
    record = ctx.states.get(data.order_id)
    if record is None:
        return RetiredSettled()
    if record.locked_by == data.instance_id and record.process_state is ProcessState.PROCESSING:
        now = ctx.clock.now()

        def release(r: StateRecord) -> StateRecord:
            if _released_already(r, data.instance_id):
                raise _ReleasedAlready
            return transitions.release_for_retry(
                r, data.instance_id, r.current_step or "(between steps)", SUPERSEDED, now, ctx.settings.supervisor_grace
            )

        try:
            written = write_fenced(ctx, data.order_id, data.instance_id, release, "release a retired attempt")
        except _ReleasedAlready:  # this release, run again (its first run's answer was lost, or a second run)
            return RetiredSettled(released=True)
        if written is not None:
            return RetiredSettled(released=True)
        # not held any more: perhaps by the instance's own Processed (a late run of its mark_processed)
        record = ctx.states.get(data.order_id)
        if record is None:
            return RetiredSettled()
    if record.process_state is ProcessState.PROCESSED and any(
        (entry.by, entry.event) == (data.instance_id, "Processed") for entry in record.history
    ):
        return RetiredSettled(  # with Received still owed, Completed waits for it on the orchestration's timers
            completed_status=False
            if record.received_owed is not None
            else _tell_once(ctx, record.reply_to, data.order_id, "Completed", data.attempt)
        )
    return RetiredSettled()


SUPERSEDED = "superseded by an upgrade"  # the reason of a retired attempt's release


class _ReleasedAlready(Exception):
    """The record holds the retired attempt's release already (``_released_already``): nothing to write."""


def _released_already(record: StateRecord, instance_id: str) -> bool:
    """Whether ``instance_id`` already released the record as a retired attempt.

    It releases once in its life and its input has no write number, so a re-run (Durable's retry after a lost
    response) is told by the history. A second release would add a second ``StepTransientFailure`` over a late
    write of the instance's own (a review requested) that landed in between."""
    return any(
        (entry.by, entry.event) == (instance_id, "StepTransientFailure") and entry.detail.endswith(f": {SUPERSEDED}")
        for entry in record.history
    )


def _tell_once(ctx: AppContext, reply_to: str | None, order_id: str, status: StatusName, attempt: int) -> bool | None:
    """Tries a status update once, after the write that made it true; never raises (a status never fails the
    write before it).

    True: sent. False: worth a retry on the orchestration's timers (``orchestrators.status``): the send failed, or
    the reply queue refused this app and it is not a progress status. None: nothing sent and nothing to retry (no
    ``replyTo``, or a progress status refused: ``publish_status`` alerts once per queue)."""
    try:
        delivery = notifications.status.publish_status(
            ctx.sender, reply_to=reply_to, order_id=order_id, status=status, attempt=attempt, at=ctx.clock.now()
        )
    except SendError as exc:
        app_event(
            "StatusNotSent",
            f"order {order_id}: status {status} not sent ({exc})",
            logging.WARNING,
            orderId=order_id,
            attempt=attempt,
            status=status,
        )
        return False
    if delivery is Delivery.REFUSED and status not in PROGRESS_STATUSES:
        return False
    return True if delivery is Delivery.SENT else None


class _GaveUp(Exception):
    """A last try that asked for it (``PublishStatusInput.answers_give_up``) gave its status up and alerted it: answered
    ``StatusGivenUp`` by ``publish_status`` (its cause: the failure)."""


def publish_status(ctx: AppContext, data: PublishStatusInput) -> StatusRefused | ReceivedUnsent | StatusGivenUp | None:
    """The ``publish_status`` activity: one status update, to the order's own ``replyTo`` queue only (``_publish``);
    a last try that asked for it answers its give-up (``StatusGivenUp``) instead of raising."""
    try:
        return _publish(ctx, data)
    except _GaveUp as given:
        return StatusGivenUp(error=str(given.__cause__)[:500])


def _publish(ctx: AppContext, data: PublishStatusInput) -> StatusRefused | ReceivedUnsent | None:
    """One status update (``publish_status``).

    - The queue comes from the orchestration's plan (the attempt's input, or the compensation round's load
      activity); without it, the record is read here.
    - Every status but ``Received`` and ``Rejected`` first says a ``Received`` the record still owes
      (``say_before_status``, which decides when to read the record): while that fails, so does this try. A try whose
      timers count those tries apart (``received_tries_left``, a status given up after its last try) answers
      ``ReceivedUnsent`` instead; the last of them gives both up (``_received_unsent``).
    - A reply queue that refuses this app (for the status, or for the ``Received`` owed before it) is answered
      ``StatusRefused``, not a failure: the orchestration tries again for ``REFUSED_RETRY_WINDOW`` and never alerts
      the status undelivered (``publish_status`` alerted the queue).
    - A failure of the last try (``last_try``: a send, or a read) is alerted ``StatusUndelivered``: nothing tries
      again. Then the try raises, or, when its input asks (``answers_give_up``), answers ``StatusGivenUp``: its
      orchestration repeats a last try that failed, which did not run this give-up (``orchestrators.status``).
    - A status the order has moved past is not sent; each check reads the record fresh: ``Rejected`` (sent here
      only by the status courier, ``deliver_status_v1``) in ``refusal_superseded``; ``Failed`` and
      ``CompensationFailed`` (``FAILED_IN``) in ``failure_moved_on``; a round's ``Compensating`` in
      ``round_moved_on``. The ``Received`` check reuses the last two reads. ``Completed`` (here only when
      ``mark_processed``'s own send failed) and ``Processing`` read nothing more."""
    if data.status == "Rejected" and refusal_superseded(ctx, data):
        return None
    read: StateRecord | None = None  # the record as this try read it (a failure status's, a round's: below)
    if data.status in FAILED_IN:
        read = _read(ctx, data)
        if failure_moved_on(data, read):
            return None
    elif data.status == ProcessState.COMPENSATING.value:
        read = _read(ctx, data)
        if round_moved_on(data, read):
            return None
    if data.reply_to_known:
        reply_to = data.reply_to
    else:
        record = _read(ctx, data)
        if record is None:
            return None
        reply_to = record.reply_to
    try:
        # a submitter that may not have heard Received: that first (or this try fails)
        if not say_before_status(ctx.states, ctx.sender, data.order_id, data.status, ctx.clock.now(), read):
            return StatusRefused(error=f"{reply_to!r} refuses the Received still owed before {data.status}")
    except SendError as exc:  # the Received still owed could not be said: the status waited for it
        if data.received_tries_left is not None:  # its timers count such tries apart from the status's own
            return _received_unsent(ctx, data, reply_to, exc, data.received_tries_left)
        if data.last_try:
            _give_up(ctx, data, reply_to, exc, received_too=True)
        raise
    except StoreUnavailable as exc:  # the record, read for a Received still owed: it may be, unsaid
        if data.last_try:
            _give_up(ctx, data, reply_to, exc, received_too=True)
        raise
    try:
        delivery = notifications.status.publish_status(
            ctx.sender,
            reply_to=reply_to,
            order_id=data.order_id,
            status=data.status,
            attempt=data.attempt,
            at=ctx.clock.now(),
            reason=data.reason,
            variant=data.variant,
        )
    except SendError as exc:
        if data.last_try:
            _give_up(ctx, data, reply_to, exc)
        raise
    if delivery is Delivery.SENT and read is not None and data.status in FAILED_IN:  # the record may owe it: noted sent
        note_status_sent(ctx, read, data.status, data.attempt)
    return StatusRefused(error=f"{reply_to!r} refuses this app") if delivery is Delivery.REFUSED else None


def _received_unsent(
    ctx: AppContext, data: PublishStatusInput, reply_to: str | None, error: SendError, tries_left: int
) -> ReceivedUnsent:
    """A try of ``data``'s status that could not send the ``Received`` its record still owes before it, whose timers
    count such tries apart (``orchestrators.status``, ``received_tries_left``): answered ``ReceivedUnsent``, the status
    not sent. The last such try (none left) gives both up and alerts them, whatever tries of its own the status has
    left (nobody may send it before that ``Received``); any other is logged ``StatusNotSent``."""
    if tries_left <= 0:
        _give_up(ctx, data, reply_to, error, received_too=True)
    else:
        why = f"the Received still owed before it failed ({error}); {tries_left} more tries of it"
        _not_sent("StatusNotSent", data, why, level=logging.WARNING)
    return ReceivedUnsent(error=str(error)[:500])


def refusal_superseded(ctx: AppContext, data: PublishStatusInput) -> bool:
    """Whether the pending cap's refusal whose ``Rejected`` the courier holds was superseded: the order has a state
    record now.

    A refusal is only made while the order has no record (``submission.intake.submit_order``), only an accepted
    submission writes one (``_create_state``), and nothing deletes it. So a record means a submission of the order
    was accepted since (or while) it was refused, and a ``Rejected`` would contradict its ``Received``. The record
    decides, not the deferral document's ``rejectedAt``: ``withdraw_refusal`` clears it before the record is
    written, and a submission accepted in the same moment as a refusal can leave it set beside its record.

    True: logged ``StatusSuperseded``, nothing sent, and the activity succeeds (the courier ends). A read that fails
    fails the try; on the last try it is alerted ``StatusUndelivered``, since nobody can tell then whether the
    refusal stands."""
    record = _read(ctx, data)
    if record is None:
        return False
    why = f"another submission of the order was accepted since (its record is {record.process_state.value})"
    _not_sent("StatusSuperseded", data, why, variant=data.variant)
    return True


def failure_moved_on(data: PublishStatusInput, record: StateRecord | None) -> bool:
    """Whether the order whose failure status ``data`` holds (``Failed``, ``CompensationFailed``) moved past the
    attempt or round that failed, as ``record`` shows it.

    ``record`` is read fresh by ``publish_status``, never taken from this process's cache: an operator's action is
    written by another process. Moved on: the record left the failure's state (``FAILED_IN``: an operator
    resubmitted it, ``Error -> Pending``, or compensated it, ``-> Compensating``), or a later attempt or round holds
    it (whose own failure status is its to send). The orchestration retries a failure status on durable timers for
    hours while the send fails, so without this check a late try could tell the submitter the order failed after
    its next attempt's ``Completed``. The owed sweep drops what the record owed the same way (``supervisor.owed``).

    True: logged ``StatusMovedOn``, nothing sent, answered None (as sent), so the timers stop and nothing is alerted
    (a failure status never says ``lastTry``). A read that fails fails the try. Accepted gap: a try that read the
    record just before the operator's action sends it just after, as the owed sweep does (docs/supervisor.md). A
    version from before the failure (an earlier attempt's, or the failed one's still held) is no verdict:
    ``StaleRead``, the try fails and the timers try again."""
    if record is None or (record.process_state is FAILED_IN[data.status] and record.attempt == data.attempt):
        return False
    if record.attempt < data.attempt or (record.attempt == data.attempt and record.locked_by is not None):
        # from before the failure: its write released the record, and only a claim (numbering the next attempt or
        # round) holds it again. Another instance's replica without that write (Session consistency): read again.
        raise StaleRead(f"order {data.order_id}: the record read is from before attempt {data.attempt}'s failure")
    state = record.process_state.value
    why = f"attempt {data.attempt} failed; the order moved on since (its record is {state}, attempt {record.attempt})"
    _not_sent("StatusMovedOn", data, why, recordAttempt=record.attempt, state=state)
    return True


def round_moved_on(data: PublishStatusInput, record: StateRecord | None) -> bool:
    """Whether the order whose round's ``Compensating`` ``data`` holds moved past that round, as ``record`` (read
    fresh by ``publish_status``) shows it: the round ended (``Compensated``, ``CompensationFailed``), or a later
    round or an operator's resubmit numbers it (``attempt``).

    Needed though the status is tried once: an activity runs at least once, and a re-run past duplicate detection
    would say ``Compensating`` after ``Compensated`` (tests/notifications/test_redteam45_compensating_run_late.py).
    The read costs nothing extra: ``say_before_status`` takes it instead of its own.

    True: logged ``StatusMovedOn``, nothing sent, answered as sent. A version from before the round's claim (an
    earlier ``attempt``: another instance's replica without the claim) is no verdict: the status is sent."""
    if record is None or record.attempt < data.attempt:
        return False
    if record.attempt == data.attempt and record.process_state is ProcessState.COMPENSATING:
        return False
    state = record.process_state.value
    why = f"round {data.attempt} is over; the order moved on since (its record is {state}, attempt {record.attempt})"
    _not_sent("StatusMovedOn", data, why, recordAttempt=record.attempt, state=state)
    return True


def _not_sent(event: str, data: PublishStatusInput, why: str, level: int = logging.INFO, **fields: Any) -> None:
    """Logs ``event``: the status in ``data`` is not sent, and ``why``."""
    message = f"order {data.order_id}: status {data.status} not sent: {why}"
    app_event(event, message, level, orderId=data.order_id, status=data.status, attempt=data.attempt, **fields)


def _read(ctx: AppContext, data: PublishStatusInput) -> StateRecord | None:
    """The order's record, read fresh for ``publish_status``; a read that fails fails the try (alerted
    ``StatusUndelivered`` on the last: nothing tries again), giving up with its status the ``Received`` the
    unread record may still owe before it (``NOT_AFTER_RECEIVED``: not before ``Rejected``)."""
    try:
        return ctx.states.get(data.order_id)
    except StoreUnavailable as exc:
        if data.last_try:
            _give_up(ctx, data, data.reply_to, exc, received_too=data.status not in NOT_AFTER_RECEIVED)
        raise


def _give_up(
    ctx: AppContext, data: PublishStatusInput, reply_to: str | None, error: Exception, *, received_too: bool = False
) -> None:
    """The last try of ``data``'s status failed: given up and alerted (``notifications.status.give_up``).
    ``received_too``: it failed saying the ``Received`` the record still owed before it, or reading the record for
    it (which may owe it: nobody can tell), so that one is given up with it (the record keeps any mark; nobody may
    say it after the status that waited for it went unsaid). Before, a try that failed reading gave its status up
    alone, and a ``Received`` the record still owed was named nowhere. A try whose input asks for it
    (``answers_give_up``) then raises ``_GaveUp`` (answered ``StatusGivenUp``); any other returns, and its caller
    raises the failure as before."""
    notifications.status.give_up(
        ctx.sender,
        order_id=data.order_id,
        status=data.status,
        attempt=data.attempt,
        variant=data.variant,
        reply_to=reply_to,
        at=ctx.clock.now(),
        error=error,
        marks=ctx.alert_marks,
        waited_for=("Received",) if received_too else (),
    )
    if data.answers_give_up:
        raise _GaveUp from error


def send_alert(ctx: AppContext, data: SendAlertInput) -> AlertGivenUp | None:
    """The ``send_alert`` activity, the alert courier's (``orchestrators/alert.py``): the operator alert whose
    send failed where it was raised, sent under its id (``notifications.alerts.send_owed_alert``). A send
    that fails raises: the courier tries again on its durable timers; its last try, once logged ``AlertUndelivered``,
    answers ``AlertGivenUp`` when its input asks for it (``answers_give_up``)."""
    return send_owed_alert(ctx.sender, data)
