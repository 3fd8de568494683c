"""Invoking an agent from an orchestration and racing its reply against the step deadline: shared
by the scheduler (forward steps) and the compensation orchestration (undo steps)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import azure.durable_functions as df
from azure.durable_functions.models.Task import TaskState

from contracts.names import AGENT_REPLY_EVENT
from domain.workflow import Transport, agent
from orchestrators import names
from orchestrators.state_activity import call_state_activity


def invoke_agent(
    context: df.DurableOrchestrationContext, agent_name: str, request: dict[str, Any], deadline: Any
) -> Generator[Any, Any, dict[str, Any] | None]:
    """Invokes the agent and waits for its reply or the deadline, whichever comes first.
    Returns the reply, or None when the timer won."""
    transport = agent(agent_name).transport
    timer = context.create_timer(deadline)
    if transport is Transport.IN_PROCESS:
        call = context.call_activity(names.in_process_agent(agent_name), request)
        winner = yield context.task_any([call, timer])
        if winner == timer:
            return None
        timer.cancel()
        if call.state is TaskState.FAILED:  # the activity itself failed (crash, bug): treat as transient
            return {"outcome": "failed", "transient": True, "error": "in-process agent activity failed"}
        reply: dict[str, Any] | None = call.result
        if reply is None:  # the agent dropped the request (past its deadline); the timer decides
            yield timer
            return None
        return reply

    yield from call_state_activity(
        context, names.SEND_AGENT_REQUEST, {"queue": agent(agent_name).request_queue, "request": request}
    )
    while True:
        event = context.wait_for_external_event(AGENT_REPLY_EVENT)
        winner = yield context.task_any([event, timer])
        if winner == timer:
            return None
        candidate: dict[str, Any] = event.result
        if candidate.get("requestId") == request["requestId"]:
            timer.cancel()
            return candidate
        # A reply to some other request (an earlier attempt's, a duplicate): ignore it and keep
        # waiting until the same deadline.
