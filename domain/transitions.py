"""The only legal moves of a state record. Each function takes a record and returns the new one,
or raises ``IllegalTransition`` / ``FencingLost``. Nothing here does I/O or reads a clock."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from domain.circuit import waiting_reason
from domain.errors import FencingLost, IllegalTransition
from domain.ids import instance_id
from domain.records import StateRecord, StepState, last_move
from domain.states import ProcessState, StepStatus
from domain.timefmt import text_or_none, to_text

STARTER = "starter"
SUPERVISOR = "supervisor"
SUBMISSION = "submission"
STEP_STARTED = "StepStarted"
CLAIMED = "Claimed"  # history event: the starter (or submission's fast path) claimed the record for an attempt
START_MISSED = "StartMissed"  # history event: the supervisor released an attempt the Durable backend never had
# history event: the starter released its own claim whose start it never tried (``release_untried``)
START_NOT_TRIED = "StartNotTried"
# How many attempts in a row the backend may never have had (``start_missed``) before such an attempt counts as a
# failure like any other: a start that can never succeed (an orchestrator not registered, a task hub gone) still
# ends in Error after MAX_STARTS_MISSED + MAX_FAILURES claims, and pages.
MAX_STARTS_MISSED = 5
PAYMENT_WAIT = "PaymentWait"  # history event: the supervisor released an attempt that waited for its payment

# No grace: a deadline is due at its time. The supervisor passes ``SUPERVISOR_GRACE_SECONDS`` (``past_due``).
NO_GRACE = timedelta(0)


def past_due(record: StateRecord, now: datetime, grace: timedelta = NO_GRACE) -> bool:
    """``record``'s ``completeBy`` has passed at ``now`` for the supervisor: ``grace`` ago when someone holds the
    record (``lockedBy``: an attempt's or a round's deadline), at it when nobody does (a not-before time: a
    backoff, a compensation handed over, an owed failure; there is no owner to protect). A deadline is written by
    one host's clock and judged by another's, and an owner whose agent replied just before it writes after it:
    ``grace`` is the supervisor's margin for both (``SUPERVISOR_GRACE_SECONDS``, docs/supervisor.md, "Clocks").
    The supervisor's queries select the same (``adapters.cosmos.state_store.CosmosStateStore.expired_page``)."""
    due = due_at(record, grace)
    return due is not None and due <= now


# The states whose records always have a ``completeBy`` as the app writes them: an attempt's or a round's deadline,
# or the not-before time of a round handed over (``complete_by`` None in them is a hand edit: ``due_at``).
DEADLINED = frozenset({ProcessState.PROCESSING, ProcessState.COMPENSATING})


def due_at(record: StateRecord, grace: timedelta = NO_GRACE) -> datetime | None:
    """When ``record`` becomes ``past_due`` for the supervisor (None: never, no ``completeBy``): what a reply
    telling when the supervisor acts on it says. A ``Processing`` or ``Compensating`` record without one (no writer
    of the app leaves it so: a hand edit removed it) is due since its last write (``updatedAt``): its deadline is not
    known, and read as never it was never taken, the order stuck for ever without a trace. Due is not taken: the
    supervisor still reads its instance's status first and leaves a live one to the deadline it holds
    (``supervisor.backend_wait``)."""
    due = record.complete_by
    if due is None and record.process_state in DEADLINED:
        due = record.updated_at
    if due is None or record.locked_by is None:
        return due
    return due + grace


def new_record(order_id: str, reply_to: str | None, now: datetime, *, submitted_as: int | None = None) -> StateRecord:
    """A new ``Pending`` record; ``submitted_as``: the sequence number of the message that creates it."""
    return StateRecord(
        id=order_id,
        order_id=order_id,
        process_state=ProcessState.PENDING,
        locked_by=None,
        complete_by=None,
        failure_count=0,
        attempt=0,
        reply_to=reply_to,
        submitted_as=submitted_as,
        updated_at=now,
    ).with_changes(now, "Received", SUBMISSION)


def is_claimable(record: StateRecord, now: datetime) -> bool:
    return (
        record.process_state is ProcessState.PENDING
        and record.locked_by is None
        and (record.complete_by is None or record.complete_by <= now)
    )


def claim(record: StateRecord, now: datetime, start_grace: timedelta) -> StateRecord:
    """Pending -> Processing, owned by the next attempt's orchestration instance."""
    if not is_claimable(record, now):
        raise IllegalTransition(
            f"order {record.order_id}: cannot claim a {record.process_state} record "
            f"(lockedBy={record.locked_by!r}, completeBy={text_or_none(record.complete_by)})"
        )
    attempt = record.attempt + 1
    owner = instance_id(record.order_id, attempt)
    return record.with_changes(
        now,
        CLAIMED,
        STARTER,
        owner,
        process_state=ProcessState.PROCESSING,
        locked_by=owner,
        attempt=attempt,
        complete_by=now + start_grace,
        current_step=None,
        # lastError is the current attempt's: a new attempt starts with none, so the supervisor's
        # reason for a missed deadline is never an earlier attempt's error (or a finished outage wait)
        last_error=None,
    )


def new_claimed_record(
    order_id: str, reply_to: str | None, now: datetime, start_grace: timedelta, *, submitted_as: int | None = None
) -> StateRecord:
    """A new record already claimed for attempt 1: ``claim(new_record(...))``, for ONE create instead of
    a create and a conditional replace. A record that does not exist yet cannot be owned by anyone, and
    a create fails if the record exists (409): the create itself is the conditional write that gives
    attempt 1 exactly one owner. Every field is what the two writes make of it, and the history keeps
    both moves: "Received" by submission, then "Claimed" by the starter, naming the owner."""
    return claim(new_record(order_id, reply_to, now, submitted_as=submitted_as), now, start_grace)


def ensure_owner(record: StateRecord, owner: str) -> None:
    """Fencing: the caller must hold ``lockedBy`` of a record that is still being worked on."""
    if record.locked_by != owner or record.process_state not in (
        ProcessState.PROCESSING,
        ProcessState.COMPENSATING,
    ):
        raise FencingLost(record.order_id, owner, record.locked_by)


def begin_step(
    record: StateRecord, owner: str, step: str, agent: str, request: str, deadline: datetime, now: datetime
) -> StateRecord:
    ensure_owner(record, owner)
    state = StepState(
        status=StepStatus.IN_PROGRESS,
        agent=agent,
        request_id=request,
        attempt=record.attempt,
        started_at=now,
        agents=_started_with(record.steps.get(step), agent),
    )
    return record.with_changes(
        now,
        STEP_STARTED,
        owner,
        f"{step} via {agent}, deadline {to_text(deadline)}",
        current_step=step,
        complete_by=deadline,
        steps={**record.steps, step: state},
        starts_missed=0,  # the attempt began: its start was not missed
    )


def _started_with(earlier: StepState | None, agent: str) -> list[str] | None:
    """The step's agents once it is started with ``agent``: None stays None (a record from before the field
    may have sent the step anywhere)."""
    if earlier is None:
        return [agent]
    if earlier.agents is None:
        return None
    return earlier.agents if agent in earlier.agents else [*earlier.agents, agent]


def complete_step(
    record: StateRecord, owner: str, step: str, result: dict[str, Any], next_deadline: datetime, now: datetime
) -> StateRecord:
    """Records a step's result. ``completeBy`` moves to ``next_deadline`` so that an orchestration
    that dies between two steps is still found by the supervisor."""
    ensure_owner(record, owner)
    current = record.steps.get(step)
    if current is None:
        raise IllegalTransition(f"order {record.order_id}: step {step} was never started")
    done = replace(current, status=StepStatus.SUCCEEDED, finished_at=now, result=result)
    return record.with_changes(
        now,
        "StepSucceeded",
        owner,
        step,
        current_step=None,
        complete_by=next_deadline,
        steps={**record.steps, step: done},
        outage_wait_since=None,
        payment_wait_since=None,
    )


def mark_processed(record: StateRecord, owner: str, now: datetime) -> StateRecord:
    ensure_owner(record, owner)
    if record.process_state is not ProcessState.PROCESSING:
        raise IllegalTransition(f"order {record.order_id}: {record.process_state} cannot become Processed")
    return record.with_changes(
        now,
        "Processed",
        owner,
        process_state=ProcessState.PROCESSED,
        locked_by=None,
        complete_by=None,
        current_step=None,
    )


def fail(
    record: StateRecord, owner: str, step: str | None, reason: str, now: datetime, *, by: str | None = None
) -> StateRecord:
    """A non-transient failure: Processing -> Error (an operator is alerted by the caller). ``by``: who
    writes it, when not the owning attempt itself (the supervisor acting on a review decision)."""
    ensure_owner(record, owner)
    steps = dict(record.steps)
    if step is not None and step in steps:
        steps[step] = replace(steps[step], status=StepStatus.FAILED, finished_at=now, error=reason)
    return record.with_changes(
        now,
        "Failed",
        by or owner,
        reason,
        process_state=ProcessState.ERROR,
        locked_by=None,
        complete_by=None,
        last_error=reason,
        steps=steps,
    )


# Marks a ``StepTransientFailure`` whose last try the step's service answered "still working on an earlier call with
# this key": its detail reads ``<step> (still working): <error>`` (``domain.outage.still_working``)
STILL_WORKING = " (still working)"
# Marks a ``StepTransientFailure`` whose agent made no call, its service's circuit open:
# ``<step> (circuit open): <error>`` (``domain.outage.forward_in_flight``)
CIRCUIT_OPEN_MARK = " (circuit open)"


def release_for_retry(
    record: StateRecord,
    owner: str,
    step: str,
    reason: str,
    now: datetime,
    grace: timedelta = NO_GRACE,
    *,
    still_working: bool = False,
    circuit_open: bool = False,
) -> StateRecord:
    """A transient failure the agent could not overcome in time: pull ``completeBy`` to now so the
    supervisor retries the order on its next run. The attempt keeps ``lockedBy``; recovery is the
    supervisor's job, with its own conditional update. The attempt ends here, so there is no owner left for the
    supervisor's ``grace`` to protect (``past_due`` reads a held record): ``completeBy`` is now less it, due at once.
    ``still_working``: the last try was answered "still working" by the step's service; the detail says so
    (``STILL_WORKING``), for the supervisor to wait instead of counting (``domain.outage.still_working``).
    ``circuit_open``: the agent made no call, the service's circuit open; the detail says so (``CIRCUIT_OPEN_MARK``),
    the supervisor's proof of an outage during the step (``domain.outage.forward_in_flight``)."""
    ensure_owner(record, owner)
    marks = f"{STILL_WORKING if still_working else ''}{CIRCUIT_OPEN_MARK if circuit_open else ''}"
    detail = f"{step}{marks}: {reason}"
    return record.with_changes(now, "StepTransientFailure", owner, detail, complete_by=now - grace, last_error=reason)


def is_expired(record: StateRecord, now: datetime, grace: timedelta = NO_GRACE) -> bool:
    """A Processing attempt the supervisor takes: its deadline passed ``grace`` ago (``past_due``)."""
    return record.process_state is ProcessState.PROCESSING and past_due(record, now, grace)


def supervisor_retry(
    record: StateRecord,
    expired_owner: str | None,
    now: datetime,
    max_failures: int,
    backoff: timedelta,
    *,
    gave_up: str | None = None,
    grace: timedelta = NO_GRACE,
) -> StateRecord:
    """An expired attempt: failureCount + 1, then Pending again (not before ``now + backoff``)
    or, at the threshold, Error. ``gave_up``: a wait's bound passed (``domain.payment_wait``): Error
    now, whatever the count, with that as ``lastError``. ``grace``: the supervisor's (``past_due``)."""
    if not is_expired(record, now, grace) or record.locked_by != expired_owner:
        raise IllegalTransition(f"order {record.order_id}: no longer the expired attempt {expired_owner!r}")
    failures = record.failure_count + 1
    reason = record.last_error or f"step {record.current_step or '(between steps)'} missed its deadline"
    if gave_up is not None or failures >= max_failures:
        return record.with_changes(
            now,
            "Escalated",
            SUPERVISOR,
            f"attempt {record.attempt}: {gave_up or reason}; {failures} failures",
            process_state=ProcessState.ERROR,
            locked_by=None,
            complete_by=None,
            failure_count=failures,
            last_error=gave_up or f"retries exhausted after {failures} failed attempts; last: {reason}",
            outage_wait_since=None,  # a counted failure ends any outage wait
            payment_wait_since=None,
        )
    return record.with_changes(
        now,
        "RetryScheduled",
        SUPERVISOR,
        f"attempt {record.attempt}: {reason}; retry after {backoff}",
        process_state=ProcessState.PENDING,
        locked_by=None,
        complete_by=now + backoff,
        failure_count=failures,
        current_step=None,
        last_error=reason,
        outage_wait_since=None,  # a counted failure ends the wait: a later outage is a new one
        payment_wait_since=None,
    )


def last_move_is_own_claim(record: StateRecord, state: ProcessState, claim_event: str) -> bool:
    """``record`` is in ``state`` and its owner made no move of its own: its last move (side notes aside) is the
    ``claim_event`` whose detail names that owner. The instance did no work the record shows."""
    move = last_move(record)
    return (
        record.process_state is state
        and record.locked_by is not None
        and move is not None
        and move.event == claim_event
        and move.detail == record.locked_by
    )


def never_began(record: StateRecord) -> bool:
    """The attempt holding ``record`` made no move of its own: its last move (side notes aside) is its claim
    (``claim``, whose detail names the owner). Its instance did no work the record shows."""
    return last_move_is_own_claim(record, ProcessState.PROCESSING, CLAIMED)


def start_missable(record: StateRecord) -> bool:
    """Whether the supervisor may release ``record``'s attempt uncounted as one the Durable backend never had
    (``start_missed``), given that its instance is unknown to the backend: the attempt never began and fewer than
    ``MAX_STARTS_MISSED`` in a row were so released."""
    return never_began(record) and record.starts_missed < MAX_STARTS_MISSED


def start_missed_reason(record: StateRecord) -> str:
    """``lastError`` of an attempt the Durable backend never had: its start failed (the starter logged why)."""
    return f"the Durable backend never had {record.locked_by}: its start failed ({record.starts_missed + 1} in a row)"


def start_missed(
    record: StateRecord, expired_owner: str | None, now: datetime, until: datetime, grace: timedelta = NO_GRACE
) -> StateRecord:
    """An expired attempt whose orchestration instance the Durable backend never had (its start failed: the
    backend answers a 404 for it) and that never began: Pending again, not before ``until``, ``failureCount``
    unchanged (it did no work: nothing failed but the start) and ``startsMissed`` + 1. Its next claim is a new
    attempt under a new instance id; should the failed start have landed after all, that instance is fenced
    (``ensure_owner``). Refused once ``MAX_STARTS_MISSED`` were: the supervisor counts it then."""
    if not start_missable(record):
        raise IllegalTransition(
            f"order {record.order_id}: {record.locked_by!r} began, or {record.starts_missed} starts missed in a row"
        )
    reason = start_missed_reason(record)
    starts = record.starts_missed + 1
    return _release_uncounted(record, expired_owner, now, until, START_MISSED, reason, grace, starts_missed=starts)


def release_untried(record: StateRecord, owner: str, now: datetime, reason: str) -> StateRecord:
    """The starter's own claim of ``owner`` whose start it never tried (``reason``: the run's time for starts was
    spent, a stalled Durable extension): Pending again, claimable at once, ``failureCount`` and ``startsMissed``
    unchanged (no instance was asked for: the backend neither failed nor missed a start). Only while the record is
    still exactly that claim: ``owner`` holds it (``FencingLost`` otherwise) and made no move (``never_began``;
    ``IllegalTransition`` otherwise), side notes aside.

    ``attempt`` stays: it only grows (``records.attempt_as_shown``), so the next claim numbers attempt + 1 under a new
    instance id and no id is ever asked for twice. No start was sent for ``owner``, so no instance of it exists; a
    late one could only come from a start this starter never made, and it would be fenced (``ensure_owner``)."""
    ensure_owner(record, owner)
    if not never_began(record):
        raise IllegalTransition(f"order {record.order_id}: {owner} moved since its claim, not released")
    return record.with_changes(
        now,
        START_NOT_TRIED,
        STARTER,
        f"attempt {record.attempt}: {owner} was never started ({reason}); claimable again, not counted",
        process_state=ProcessState.PENDING,
        locked_by=None,
        complete_by=None,
        current_step=None,
    )


def wait_out_outage(
    record: StateRecord,
    expired_owner: str | None,
    now: datetime,
    until: datetime,
    dependency: str,
    since: datetime,
    grace: timedelta = NO_GRACE,
    *,
    still_working: bool = False,
) -> StateRecord:
    """An expired attempt whose step failed on an open dependency: Pending again, not before
    ``until`` (after the circuit's next probe), with ``failureCount`` unchanged: an outage is not the
    order's failure. ``outageWaitSince`` keeps when the wait began (bounded by the caller). ``still_working``:
    the step's service, its circuit closed, is still working on the order's call (the reason says so)."""
    # the supervisor's outage alert counts waiting orders by its reason
    reason = waiting_reason(dependency, still_working=still_working)
    return _release_uncounted(record, expired_owner, now, until, "OutageWait", reason, grace, outage_wait_since=since)


def wait_for_payment(
    record: StateRecord,
    expired_owner: str | None,
    now: datetime,
    until: datetime,
    since: datetime,
    reason: str,
    grace: timedelta = NO_GRACE,
) -> StateRecord:
    """An expired attempt whose prepaid payment step waited for the payment notification
    (``domain.payment_wait.awaited_payment``): Pending again, not before ``until``, with ``failureCount``
    unchanged: the notification's lateness is not the order's failure. ``paymentWaitSince`` keeps when
    the wait began (bounded by the caller, ``PAYMENT_WAIT_MINUTES``)."""
    return _release_uncounted(record, expired_owner, now, until, PAYMENT_WAIT, reason, grace, payment_wait_since=since)


def _release_uncounted(
    record: StateRecord,
    expired_owner: str | None,
    now: datetime,
    until: datetime,
    event: str,
    reason: str,
    grace: timedelta,
    **wait: datetime | int,
) -> StateRecord:
    """The expired attempt of ``expired_owner`` released without counting it: Pending, not before
    ``until``, ``reason`` as its ``lastError``, and when its wait began (``wait``)."""
    if not is_expired(record, now, grace) or record.locked_by != expired_owner:
        raise IllegalTransition(f"order {record.order_id}: no longer the expired attempt {expired_owner!r}")
    return record.with_changes(
        now,
        event,
        SUPERVISOR,
        f"attempt {record.attempt}: {reason}; retry not before {to_text(until)}",
        process_state=ProcessState.PENDING,
        locked_by=None,
        complete_by=until,
        current_step=None,
        last_error=reason,
        **wait,
    )


def resubmit(record: StateRecord, operator: str, reason: str, now: datetime) -> StateRecord:
    """Operator action: Error -> Pending with the failure count reset."""
    if record.process_state is not ProcessState.ERROR:
        raise IllegalTransition(f"order {record.order_id}: only an Error record can be resubmitted")
    return record.with_changes(
        now,
        "Resubmitted",
        operator,
        reason,
        process_state=ProcessState.PENDING,
        locked_by=None,
        complete_by=None,
        failure_count=0,
        last_error=None,
        outage_wait_since=None,  # afresh: a later outage is a new wait with its own bound
        payment_wait_since=None,  # and a payment still missing a new wait with its own
        starts_missed=0,  # and starts that fail again have their own bound
    )
