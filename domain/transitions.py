"""The only legal moves of a state record. Each function takes a record and returns the new one,
or raises ``IllegalTransition`` / ``FencingLost``. Nothing here does I/O or reads a clock."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from domain.circuit import waiting_reason
from domain.errors import FencingLost, IllegalTransition
from domain.ids import idempotency_key, instance_id, key_generation
from domain.records import StateRecord, StepState
from domain.states import ProcessState, StepStatus

STARTER = "starter"
SUPERVISOR = "supervisor"
SUBMISSION = "submission"
# How an agent's error reply starts when the service acted but its answer cannot be carried back
# (``order_agents.runtime``): a non-transient failure whose call had effect.
UNCARRIABLE_ANSWER = "the service's answer cannot be carried"


def new_record(order_id: str, reply_to: str | None, now: datetime) -> StateRecord:
    return StateRecord(
        id=order_id,
        order_id=order_id,
        process_state=ProcessState.PENDING,
        locked_by=None,
        complete_by=None,
        failure_count=0,
        attempt=0,
        reply_to=reply_to,
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
            f"(lockedBy={record.locked_by!r}, completeBy={record.complete_by})"
        )
    attempt = record.attempt + 1
    owner = instance_id(record.order_id, attempt)
    return record.with_changes(
        now,
        "Claimed",
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


def new_claimed_record(order_id: str, reply_to: str | None, now: datetime, start_grace: timedelta) -> StateRecord:
    """A new record already claimed for attempt 1: ``claim(new_record(...))``, for ONE create instead of
    a create and a conditional replace. A record that does not exist yet cannot be owned by anyone, and
    a create fails if the record exists (409): the create itself is the conditional write that gives
    attempt 1 exactly one owner. Every field is what the two writes make of it, and the history keeps
    both moves: "Received" by submission, then "Claimed" by the starter, naming the owner."""
    return claim(new_record(order_id, reply_to, now), now, start_grace)


def ensure_owner(record: StateRecord, owner: str) -> None:
    """Fencing: the caller must hold ``lockedBy`` of a record that is still being worked on."""
    if record.locked_by != owner or record.process_state not in (
        ProcessState.PROCESSING,
        ProcessState.COMPENSATING,
    ):
        raise FencingLost(record.order_id, owner, record.locked_by)


def begin_step(
    record: StateRecord,
    owner: str,
    step: str,
    agent: str,
    request: str,
    deadline: datetime,
    now: datetime,
    *,
    key: str | None = None,
) -> StateRecord:
    """The step's call starts with ``agent`` under the idempotency key ``key`` (the request's), kept on
    the step (what compensation fences) and, when it is a later generation than the record's (a retry
    chosen by a review, inside the attempt), as the step's generation: a later attempt resumes it with
    the same key. None: the caller did not say (an input recorded before keys were kept)."""
    ensure_owner(record, owner)
    state = StepState(
        status=StepStatus.IN_PROGRESS,
        agent=agent,
        request_id=request,
        attempt=record.attempt,
        started_at=now,
        idempotency_key=key,
    )
    generations = record.key_generations
    generation = key_generation(key, record.order_id, step) if key is not None else None
    if generation is not None and generation > generations.get(step, 0):
        generations = {**generations, step: generation}
    return record.with_changes(
        now,
        "StepStarted",
        owner,
        f"{step} via {agent}, deadline {deadline.isoformat()}",
        current_step=step,
        complete_by=deadline,
        steps={**record.steps, step: state},
        key_generations=generations,
    )


def step_key(record: StateRecord, step: str) -> str:
    """The idempotency key of ``step``'s last call on the record (its first key when not recorded)."""
    state = record.steps.get(step)
    if state is not None and state.idempotency_key is not None:
        return state.idempotency_key
    return idempotency_key(record.order_id, step)


def refused_for_good(state: StepState) -> bool:
    """Whether the step's last outcome on the record is a refusal for good (``Failed``: a non-transient
    answer), which left nothing at the provider under its key. Not a call whose service acted and whose
    answer could not be carried back (it failed too, with effect), nor a step in flight (its outcome is
    unknown) or one that failed transiently (it stays in flight)."""
    return state.status is StepStatus.FAILED and UNCARRIABLE_ANSWER not in (state.error or "")


def next_key_generation(record: StateRecord, step: str) -> int:
    """The generation one past the step's: both the record's and the one its last call used."""
    state = record.steps.get(step)
    used = key_generation(state.idempotency_key, record.order_id, step) if state and state.idempotency_key else None
    return max(record.key_generations.get(step, 0), used or 0) + 1


def fresh_keys(record: StateRecord, steps: list[str]) -> dict[str, int]:
    """The record's key generations with each of ``steps`` moved one on."""
    return {**record.key_generations, **{step: next_key_generation(record, step) for step in steps}}


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


def release_for_retry(record: StateRecord, owner: str, step: str, reason: str, now: datetime) -> StateRecord:
    """A transient failure the agent could not overcome in time: pull ``completeBy`` to now so the
    supervisor retries the order on its next run. The attempt keeps ``lockedBy``; recovery is the
    supervisor's job, with its own conditional update."""
    ensure_owner(record, owner)
    return record.with_changes(
        now, "StepTransientFailure", owner, f"{step}: {reason}", complete_by=now, last_error=reason
    )


def is_expired(record: StateRecord, now: datetime) -> bool:
    return (
        record.process_state is ProcessState.PROCESSING and record.complete_by is not None and record.complete_by <= now
    )


def supervisor_retry(
    record: StateRecord, expired_owner: str | None, now: datetime, max_failures: int, backoff: timedelta
) -> StateRecord:
    """An expired attempt: failureCount + 1, then Pending again (not before ``now + backoff``)
    or, at the threshold, Error."""
    if not is_expired(record, now) or record.locked_by != expired_owner:
        raise IllegalTransition(f"order {record.order_id}: no longer the expired attempt {expired_owner!r}")
    failures = record.failure_count + 1
    reason = record.last_error or f"step {record.current_step or '(between steps)'} missed its deadline"
    if failures >= max_failures:
        return record.with_changes(
            now,
            "Escalated",
            SUPERVISOR,
            f"attempt {record.attempt}: {reason}; {failures} failures",
            process_state=ProcessState.ERROR,
            locked_by=None,
            complete_by=None,
            failure_count=failures,
            last_error=f"retries exhausted after {failures} failed attempts; last: {reason}",
            outage_wait_since=None,  # a counted failure ends any outage wait
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
    )


def wait_out_outage(
    record: StateRecord, expired_owner: str | None, now: datetime, until: datetime, dependency: str, since: datetime
) -> StateRecord:
    """An expired attempt whose step failed on an open dependency: Pending again, not before
    ``until`` (after the circuit's next probe), with ``failureCount`` unchanged: an outage is not the
    order's failure. ``outageWaitSince`` keeps when the wait began (bounded by the caller)."""
    if not is_expired(record, now) or record.locked_by != expired_owner:
        raise IllegalTransition(f"order {record.order_id}: no longer the expired attempt {expired_owner!r}")
    reason = waiting_reason(dependency)  # the supervisor's outage alert counts waiting orders by it
    return record.with_changes(
        now,
        "OutageWait",
        SUPERVISOR,
        f"attempt {record.attempt}: {reason}; retry not before {until.isoformat()}",
        process_state=ProcessState.PENDING,
        locked_by=None,
        complete_by=until,
        current_step=None,
        last_error=reason,
        outage_wait_since=since,
    )


def resubmit(record: StateRecord, operator: str, reason: str, now: datetime) -> StateRecord:
    """Operator action: Error -> Pending with the failure count reset. Each step refused for good
    (``refused_for_good``) gets a fresh idempotency key (the next generation): its provider recorded
    the refusal under the old key and would answer it again (docs/compensation.md); nothing happened
    there, so the new key cannot act twice. A step whose outcome is unknown keeps its key."""
    if record.process_state is not ProcessState.ERROR:
        raise IllegalTransition(f"order {record.order_id}: only an Error record can be resubmitted")
    refused = [name for name, state in record.steps.items() if refused_for_good(state)]
    detail = reason if not refused else f"{reason}; a fresh idempotency key for {', '.join(refused)}"
    return record.with_changes(
        now,
        "Resubmitted",
        operator,
        detail,
        key_generations=fresh_keys(record, refused),
        process_state=ProcessState.PENDING,
        locked_by=None,
        complete_by=None,
        failure_count=0,
        last_error=None,
        outage_wait_since=None,  # afresh: a later outage is a new wait with its own bound
    )
