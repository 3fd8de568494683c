"""Retired orchestrator versions: what an instance of an earlier scheduler version does when it
replays after an upgrade.

Its history was recorded by code that no longer exists, so it cannot be replayed step by step. It
settles what it left and ends: a record it still holds is released to the supervisor at once
(``completeBy`` = now), which retries the order under the current version on its next run, like any
attempt that stopped; an order it had already written ``Processed`` gets its ``Completed`` status
(the old version sent it after that write). An upgrade costs each order caught mid-attempt one
counted retry; disabling the two functions that claim and letting in-flight attempts finish first
avoids that (docs/design.md "Versions")."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import azure.durable_functions as df
from azure.durable_functions.models.history import HistoryEventType

from contracts.activities import SettleRetiredInput, parse_retired_settled
from orchestrators import names
from orchestrators.result import OrchestrationResult, orchestration_result
from orchestrators.state_activity import call_state_activity
from orchestrators.status import ANSWERS_GIVE_UP_INPUT, call_publish_status

# The input key that marks the new execution of a retired instance (after ``continue_as_new``).
RETIRING = "retiring"


def retire(context: df.DurableOrchestrationContext, version: str) -> Generator[Any, Any, OrchestrationResult]:
    """Settles an instance of the retired ``version`` and ends it with ``Superseded``.

    Its recorded history belongs to the old code, and the extension matches every task the history
    holds against the replay's actions, by task id, kind and activity name: a different task fails the
    instance as non-deterministic, and so does a task the replay leaves out ("the current replay
    execution hasn't (yet?) scheduled this task", DurableTask.Core). So the first replay asks again for
    exactly the tasks the old code scheduled (``_recorded_tasks``), then continues the instance as new,
    with a marked input and an empty history; that run settles (one activity)."""
    started = context.get_input() or {}
    if not started.get(RETIRING):
        recorded = _recorded_tasks(context)
        if recorded:
            yield context.task_any(recorded)
        # the new execution is this code's from its first event: its ``Completed``'s last try answers its give-up and
        # one that dies is repeated, then logged ``LastTryLost`` (``orchestrators.status``), as in any attempt started
        # now; one continued before replays as recorded (no flag)
        context.continue_as_new({**started, RETIRING: True, ANSWERS_GIVE_UP_INPUT: True})
        return orchestration_result("Superseded", version=version)
    order_id, attempt = str(started.get("orderId", "")), int(started.get("attempt", 0))
    settle = SettleRetiredInput(order_id=order_id, instance_id=context.instance_id, attempt=attempt)
    answer = yield from call_state_activity(context, names.SETTLE_RETIRED_ATTEMPT, settle.to_json())
    settled = parse_retired_settled(answer)
    if settled.completed_status is False:  # its one try failed: a final status is retried on durable timers
        yield from call_publish_status(context, order_id, "Completed", attempt)
    return orchestration_result("Superseded", version=version, released=settled.released)


def _recorded_tasks(context: df.DurableOrchestrationContext) -> list[Any]:
    """The tasks the history says the old code scheduled, asked for again in task-id order: an activity
    of the same name and a timer (neither an input nor a fire time is compared), the timer cancelled at
    once, so no timer of the old code (a step deadline, a review of a day) holds the instance until it
    fires (the extension ends an instance only when no task is open; an activity still running holds
    it until it ends). The replay waits for any of them to be done in the history (the old code's
    first task, an activity, always is, or is on its way), then continues as new."""
    recorded = sorted(
        (event for event in context.histories if event.event_type in _SCHEDULING_EVENTS),
        key=lambda event: event.event_id,
    )
    tasks: list[Any] = []
    for event in recorded:
        if event.event_type == HistoryEventType.TASK_SCHEDULED:
            tasks.append(context.call_activity(event.Name, None))
        else:
            timer = context.create_timer(context.current_utc_datetime)
            timer.cancel()
            tasks.append(timer)
    return tasks


_SCHEDULING_EVENTS = (HistoryEventType.TASK_SCHEDULED, HistoryEventType.TIMER_CREATED)
