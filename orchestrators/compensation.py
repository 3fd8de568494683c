"""The compensation orchestration: one Durable instance per order and compensation round
(``<order>:compensate:<round>``), fenced like a forward attempt (``lockedBy`` is its instance id).

It walks the compensation log newest first. For each entry not yet undone it records the undo in
flight and its deadline (fenced write), asks the entry's agent for the step's undo action with the
undo idempotency key (``<order>:<step>:undo``, the same in every round) and races the reply against
the deadline, exactly as a forward step does. Each outcome is recorded as it goes, so a round that
crashes resumes (next round) from the first entry not yet undone and never undoes one twice.

- reply ``succeeded``: the entry is marked Undone, keeping what the undo answered (``refundId``,
  ``amountCents``...: a refund of nothing succeeds too); next entry;
- reply ``failed`` and transient: tried again after a durable backoff timer, up to ``MAX_FAILURES``
  tries in all (each with the agent's own retries inside its deadline); rounds started with
  ``holdsBackoff`` first hold the record through the wait (``hold_undo``: ``completeBy`` past the next try),
  which may end after the try's deadline, so the supervisor does not take the round waiting for a stuck one;
- reply ``failed`` non-transient, or the tries used up: ``CompensationFailed`` naming the entry and
  why, and an ``OperatorAlert``;
- reply ``dependencyOpen`` (the service's circuit is open: no call was made): the round ends; rounds started with
  ``releasesOpenCircuit`` first release the record to the supervisor (``release_undo``: ``completeBy`` now less its
  grace, ``lockedBy`` kept), whose next run releases the round to wait the outage out, uncounted; a round started
  before leaves the record alone, taken only once the undo's deadline passed;
- the deadline passes first: the round ends without touching the record; the supervisor sees the
  expired ``completeBy`` and starts the next round (bounded by ``MAX_FAILURES`` rounds).

Every fenced write goes through ``orchestrators.fenced.call_fenced``: a round that lost the record
ends once, in ``compensate_order``, as ``FencingLost`` (with where).

Deterministic: time from ``context.current_utc_datetime``, rules from ``load_compensation``'s
recorded result, ids from ``domain.compensation``.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

from contracts.activities import (
    BeginUndoInput,
    CompensationPlan,
    FailCompensationInput,
    FinishCompensationInput,
    HoldUndoInput,
    LoadCompensationInput,
    RecordUndoInput,
    ReleaseUndoInput,
    UndoEntry,
    parse_begin_undo,
    parse_load_compensation,
    parse_write_result,
    tries_used_up,
)
from domain.compensation import UNDONE, undo_idempotency_key, undo_request_id, undo_result
from domain.retry import doubled_seconds
from orchestrators import names
from orchestrators.agent_call import agent_request, invoke_agent
from orchestrators.external_events import keep_early_events
from orchestrators.fenced import FencedWrites, call_fenced, ends_quietly_when_fenced_out, hand_over
from orchestrators.result import OrchestrationResult, orchestration_result
from orchestrators.status import call_publish_status
from orchestrators.timers import (
    DEADLINE_AT_BEGIN_INPUT,
    HOLDS_BACKOFF_INPUT,
    RELEASES_OPEN_CIRCUIT_INPUT,
    TIMER_PER_ROUND_INPUT,
)


def compensate_order(context: df.DurableOrchestrationContext) -> Generator[Any, Any, OrchestrationResult]:
    keep_early_events(context)  # every undo reply raised before its wait opens, in order
    return (yield from ends_quietly_when_fenced_out(_run_round(context)))


def _run_round(context: df.DurableOrchestrationContext) -> Generator[Any, Any, OrchestrationResult]:
    started = context.get_input()
    order_id: str = started["orderId"]
    round_number: int = started["round"]
    # a reply to another request leaves the undo's wait racing a timer of its own (rounds started since
    # that change say so: orchestrators.timers.next_round_timer)
    timer_per_round = bool(started.get(TIMER_PER_ROUND_INPUT))
    # the record held through an undo's backoff (rounds started since that change say so)
    holds_backoff = bool(started.get(HOLDS_BACKOFF_INPUT))
    # an undo's deadline is its begin_undo's time plus the timeout (rounds started since that change say so)
    deadline_at_begin = bool(started.get(DEADLINE_AT_BEGIN_INPUT))
    # an undo meeting an open circuit releases the record to the supervisor (rounds started since that change say so)
    releases_open_circuit = bool(started.get(RELEASES_OPEN_CIRCUIT_INPUT))
    me: str = context.instance_id
    writes = FencedWrites(context)  # numbers the round's fenced writes (a late duplicate of one is refused)

    loaded = LoadCompensationInput(order_id=order_id, instance_id=me)
    plan = yield from call_fenced(writes, names.LOAD_COMPENSATION, loaded, parse_load_compensation, at="load")
    if not plan.outage_wait:  # a round retrying an outage wait: "waiting for ..." was said once
        yield from call_publish_status(context, order_id, "Compensating", round_number, plan=plan)

    undone: list[int] = []
    for entry in sorted(plan.entries, key=lambda e: e.seq, reverse=True):
        if entry.outcome == UNDONE:  # done by an earlier round: never undo twice
            continue
        result = yield from _undo_entry(
            writes,
            plan,
            entry,
            order_id,
            round_number,
            timer_per_round,
            holds_backoff,
            deadline_at_begin,
            releases_open_circuit,
        )
        if result["result"] != "Undone":
            return result
        undone.append(entry.seq)

    finished = FinishCompensationInput(order_id=order_id, instance_id=me)
    yield from hand_over(
        writes,
        names.FINISH_COMPENSATION,
        finished,
        parse_write_result,
        at="finish",
        order_id=order_id,
        state="Compensated",
        attempt=round_number,
    )
    yield from call_publish_status(context, order_id, "Compensated", round_number, plan=plan)
    return orchestration_result("Compensated", undone=undone)


def _undo_entry(
    writes: FencedWrites,
    plan: CompensationPlan,
    entry: UndoEntry,
    order_id: str,
    round_number: int,
    timer_per_round: bool,
    holds_backoff: bool = False,
    deadline_at_begin: bool = False,
    releases_open_circuit: bool = False,
) -> Generator[Any, Any, OrchestrationResult]:
    context = writes.context
    me: str = context.instance_id
    seq, step_name, agent_name = entry.seq, entry.step, entry.agent
    at = f"undo {seq}"
    tries = max(1, int(plan.undo_tries))
    step_timeout = timedelta(seconds=plan.step_timeout_seconds)
    error: Any = None
    used_up = False  # the tries used up on transient failures (fail_compensation asks if an outage did it)
    still_working = False  # the last try's service answered it still works on the undo (an earlier call of the key)
    for number in range(1, tries + 1):
        deadline = context.current_utc_datetime + step_timeout
        request = agent_request(
            request_id=undo_request_id(me, step_name, agent_name, number),
            instance_id=me,
            order_id=order_id,
            step=step_name,
            action="undo",
            attempt=round_number,
            deadline=deadline,
            idempotency_key=undo_idempotency_key(order_id, step_name),
            payload={**entry.data, "seq": seq},
        )
        timeout = plan.step_timeout_seconds if deadline_at_begin else None
        began = BeginUndoInput(request=request, agent=agent_name, seq=seq, timeout_seconds=timeout)
        begun = yield from call_fenced(writes, names.BEGIN_UNDO, began, parse_begin_undo, at=at)
        if deadline_at_begin and begun.deadline is not None:
            # the deadline begin_undo wrote: its time plus the timeout, however long it waited for a worker
            deadline = begun.deadline
            request = request.model_copy(update={"deadline": deadline})
        reply = yield from invoke_agent(context, agent_name, request, deadline, timer_per_round=timer_per_round)
        if reply is None:
            # Leave the record alone: the supervisor starts the next round after completeBy.
            return orchestration_result("DeadlineExpired", seq=seq, step=step_name)
        if reply.succeeded:
            # what the undo did (a refund of nothing is a success too): the entry keeps it
            answer = undo_result(step_name, reply.result)  # only what the entry keeps crosses to the activity
            recorded = RecordUndoInput(order_id=order_id, instance_id=me, seq=seq, result=answer)
            yield from call_fenced(writes, names.RECORD_UNDO, recorded, parse_write_result, at=at)
            return orchestration_result("Undone", seq=seq)
        if reply.dependency_open:
            # The service's circuit is open: no call was made. The supervisor releases the round to wait the
            # outage out (not counted as a failed round): handed the record now, not after the undo's deadline
            if releases_open_circuit:
                said = None if reply.error is None else str(reply.error)
                released = ReleaseUndoInput(order_id=order_id, instance_id=me, seq=seq, error=said)
                yield from call_fenced(writes, names.RELEASE_UNDO, released, parse_write_result, at=at)
            return orchestration_result("DependencyOpen", seq=seq, step=step_name, error=reply.error)
        error, still_working = reply.error, reply.in_progress
        if not reply.transient:
            break
        if number < tries:
            delay = doubled_seconds(number, plan.retry_base_seconds, plan.retry_max_seconds)
            next_try = context.current_utc_datetime + timedelta(seconds=delay)
            if holds_backoff:
                # The wait may outlast this try's deadline (completeBy): hold the record past it, or the
                # supervisor takes the live round for a stuck one (counted, released, terminated)
                held = HoldUndoInput(order_id=order_id, instance_id=me, seq=seq, until=next_try)
                yield from call_fenced(writes, names.HOLD_UNDO, held, parse_write_result, at=at)
            yield context.create_timer(next_try)
        else:
            error, used_up = tries_used_up(error, tries), True
    failed = FailCompensationInput(order_id=order_id, instance_id=me, seq=seq, error=error, used_up_tries=used_up)
    if used_up and still_working:  # the undo is being done at its service: waited for, not failed
        failed = replace(failed, still_working=True)
    written = yield from call_fenced(writes, names.FAIL_COMPENSATION, failed, parse_write_result, at=at)
    if not written.moved_on:  # moved on: an operator compensated again since, the next round speaks
        yield from call_publish_status(
            context, order_id, "CompensationFailed", round_number, f"{step_name}: {error}", plan=plan
        )
    return orchestration_result("CompensationFailed", seq=seq, step=step_name, error=error)
