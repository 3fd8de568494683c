"""The scheduler: one Durable orchestration per attempt of an order.

For each step of the workflow table it (1) records, with a fenced write, that the step started
and its deadline (``completeBy``), (2) invokes the step's agent, (3) races the agent's reply
against a durable timer at that deadline. Every state write is an activity fenced by
``lockedBy``; the moment this attempt no longer owns the record it ends quietly.

If the timer wins, the orchestration ends *without touching the record*: recovery is the
supervisor's job, with its own conditional update. A late reply then finds no one waiting.

Orchestrator code is deterministic: time comes from ``context.current_utc_datetime``, settings
from the ``load_order`` activity's recorded result, ids from ``domain.ids``; no I/O here.
"""

from __future__ import annotations

from collections.abc import Generator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df
from azure.durable_functions.models.Task import TaskState

from contracts.names import AGENT_REPLY_EVENT
from domain.ids import idempotency_key, request_id
from domain.payloads import step_payload
from domain.timefmt import to_text
from domain.workflow import WORKFLOW, Transport, agent
from orchestrators import names

Outcome = dict[str, Any]


def _outcome(result: str, **details: Any) -> Outcome:
    return {"result": result, **details}


def process_order(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Outcome]:
    started = context.get_input()
    order_id: str = started["orderId"]
    attempt: int = started["attempt"]
    me: str = context.instance_id

    plan = yield context.call_activity(names.LOAD_ORDER, {"orderId": order_id, "instanceId": me})
    if not plan["owned"]:
        return _outcome("FencingLost", at="load")
    order: dict[str, Any] = plan["order"]
    results: dict[str, dict[str, Any]] = dict(plan["completed"])
    step_timeout = timedelta(seconds=plan["stepTimeoutSeconds"])
    yield context.call_activity(names.PUBLISH_STATUS, {"orderId": order_id, "status": "Processing", "attempt": attempt})

    for step in WORKFLOW:
        if step.name in results:  # done by an earlier attempt: never run a step twice
            continue
        deadline = context.current_utc_datetime + step_timeout
        request = {
            "requestId": request_id(me, step.name, step.agent),
            "instanceId": me,
            "orderId": order_id,
            "step": step.name,
            "action": "do",
            "attempt": attempt,
            "deadline": to_text(deadline),
            "idempotencyKey": idempotency_key(order_id, step.name),
            "payload": step_payload(step.name, order, results),
        }
        began = yield context.call_activity(names.BEGIN_STEP, {"request": request, "agent": step.agent})
        if not began["owned"]:
            return _outcome("FencingLost", at=step.name)

        reply = yield from _invoke_agent(context, step.agent, request, deadline)
        if reply is None:
            # The deadline passed first. Leave the record alone: the supervisor recovers it.
            return _outcome("DeadlineExpired", step=step.name)

        fenced = {"orderId": order_id, "instanceId": me, "step": step.name, "attempt": attempt}
        if reply["outcome"] == "succeeded":
            done = yield context.call_activity(names.COMPLETE_STEP, {**fenced, "result": reply.get("result") or {}})
            if not done["owned"]:
                return _outcome("FencingLost", at=step.name)
            results[step.name] = reply.get("result") or {}
        elif reply.get("transient"):
            # The agent used up its retries before the deadline. Pull completeBy to now so the
            # supervisor's next run retries the order (it owns the retry budget).
            yield context.call_activity(names.RELEASE_FOR_RETRY, {**fenced, "error": reply.get("error")})
            return _outcome("TransientFailure", step=step.name, error=reply.get("error"))
        else:
            yield context.call_activity(names.FAIL_ORDER, {**fenced, "error": reply.get("error")})
            return _outcome("Failed", step=step.name, error=reply.get("error"))

    done = yield context.call_activity(
        names.MARK_PROCESSED, {"orderId": order_id, "instanceId": me, "attempt": attempt}
    )
    if not done["owned"]:
        return _outcome("FencingLost", at="processed")
    return _outcome("Processed")


def _invoke_agent(
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

    yield context.call_activity(
        names.SEND_AGENT_REQUEST, {"queue": agent(agent_name).request_queue, "request": request}
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
