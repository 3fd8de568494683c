"""Sample orchestrators for the Durable replay-builder and engine tests, registered on their own DFApp
so tests can drive them exactly as the host does (the registered function takes the context JSON)."""

from __future__ import annotations

from collections.abc import Generator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

REPLY_EVENT = "Reply"
DEADLINE = timedelta(minutes=5)
LONG_WAIT = timedelta(days=7)  # past the Azure Storage provider's 6-day maximum timer

app = df.DFApp()


def reply_or_deadline(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    """activity → task_any(deadline timer, reply event) → activity (reply) or give up (timer)."""
    order = context.get_input()
    prepared = yield context.call_activity("prepare", order)
    context.set_custom_status({"waiting_since": context.current_utc_datetime.isoformat()})
    deadline = context.create_timer(context.current_utc_datetime + DEADLINE)
    reply = context.wait_for_external_event(REPLY_EVENT)
    winner = yield context.task_any([deadline, reply])
    if winner == reply:
        deadline.cancel()
        finished = yield context.call_activity("finish", {"prepared": prepared, "reply": reply.result})
        return {"outcome": "replied", "finished": finished}
    return {"outcome": "timed_out", "at": context.current_utc_datetime.isoformat()}


def failing_activity(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    """Catches one activity failure and reports it; a second failure is unhandled."""
    try:
        yield context.call_activity("flaky", 1)
    except Exception as error:
        second = yield context.call_activity("flaky", 2)
        return {"first_error": str(error), "second": second}
    return {"first_error": None}


def two_in_parallel(context: df.DurableOrchestrationContext) -> Generator[Any, Any, list[Any]]:
    results = yield context.task_all([context.call_activity("echo", "a"), context.call_activity("echo", "b")])
    return list(results)


def reply_or_long_deadline(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    """task_any(a LONG_WAIT timer, reply event), as the scheduler's review pause with a long timeout."""
    deadline = context.create_timer(context.current_utc_datetime + LONG_WAIT)
    reply = context.wait_for_external_event(REPLY_EVENT)
    winner = yield context.task_any([deadline, reply])
    if winner == reply:
        deadline.cancel()
        return {"outcome": "replied", "at": context.current_utc_datetime.isoformat()}
    return {"outcome": "timed_out", "at": context.current_utc_datetime.isoformat()}


def reply_or_deadline_orchestrator(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    return (yield from reply_or_deadline(context))


def failing_activity_orchestrator(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    return (yield from failing_activity(context))


def two_in_parallel_orchestrator(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    return (yield from two_in_parallel(context))


def reply_or_long_deadline_orchestrator(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    return (yield from reply_or_long_deadline(context))


for _orchestrator in (
    reply_or_deadline_orchestrator,
    failing_activity_orchestrator,
    two_in_parallel_orchestrator,
    reply_or_long_deadline_orchestrator,
):
    app.orchestration_trigger(context_name="context")(_orchestrator)


# ``get_functions()`` may be called only once per app (a second call raises on "duplicate" names).
FUNCTIONS = app.get_functions()


def registered(name: str) -> Any:
    """The function the host would invoke for orchestrator ``name`` (the SDK's handle wrapper)."""
    for function in FUNCTIONS:
        if function.get_function_name() == name:
            return function.get_user_function()
    raise KeyError(name)
