"""Invoking an agent from an orchestration and racing its reply against the step deadline: shared
by the scheduler (forward steps) and the compensation orchestration (undo steps)."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from datetime import datetime
from typing import Any

import azure.durable_functions as df
from azure.durable_functions.models.Task import TaskState

from contracts.activities import (
    AgentAnswer,
    ProtocolError,
    SendAgentRequestInput,
    parse_agent_answer,
    reply_request_id,
)
from contracts.messages import AgentRequest
from contracts.names import AGENT_REPLY_EVENT
from domain.workflow import Transport, agent
from orchestrators import names
from orchestrators.external_events import abandon_wait, forget_delivered
from orchestrators.state_activity import call_state_activity
from orchestrators.timers import cancel_open_timers, cancel_timer, next_round_timer


def agent_request(
    *,
    request_id: str,
    instance_id: str,
    order_id: str,
    step: str,
    action: str,
    attempt: int,
    deadline: datetime,
    idempotency_key: str,
    payload: dict[str, Any],
) -> AgentRequest:
    """The one place an orchestration builds the request of a forward or undo step."""
    return AgentRequest(
        request_id=request_id,
        instance_id=instance_id,
        order_id=order_id,
        step=step,
        action=action,
        attempt=attempt,
        deadline=deadline,
        idempotency_key=idempotency_key,
        payload=payload,
    )


def _answer_to(data: Any, request_id: str) -> AgentAnswer | None:
    """The answer ``data`` gives to ``request_id``, or None for a reply to another request or malformed data.

    Malformed is anything ``AgentReply`` would not dump: not an object, an ``outcome`` that is neither
    ``succeeded`` nor ``failed``, a ``result`` that is not an object, an ``error`` that is not text. The relay only
    raises valid replies, but the Durable HTTP API's ``raiseEvent`` takes any JSON, so such data is skipped (as the
    review wait skips a malformed answer) rather than failing the attempt."""
    try:
        if reply_request_id(data) != request_id:
            return None
        answer = parse_agent_answer(data)
    except ProtocolError:
        return None
    if data["outcome"] not in ("succeeded", "failed"):
        return None
    if not isinstance(answer.result, Mapping | None) or not isinstance(answer.error, str | None):
        return None
    return answer


def invoke_agent(
    context: df.DurableOrchestrationContext,
    agent_name: str,
    request: AgentRequest,
    deadline: datetime,
    *,
    timer_per_round: bool,
    sent: bool = False,
) -> Generator[Any, Any, AgentAnswer | None]:
    """Invokes the agent and waits for its reply or the deadline, whichever comes first.

    Returns the reply, read once here (``parse_agent_answer``), or None when the timer won. ``sent``: a Service Bus
    agent's request already went out with the step's start (``begin_step``). ``timer_per_round``: after a reply to
    another request, the wait goes on against a timer of its own (``orchestrators.timers.next_round_timer``); an
    instance started before that flag keeps its one timer."""
    transport = agent(agent_name).transport
    detach = context if timer_per_round else None  # cancelled timers out of the SDK's open tasks (cancel_timer)
    timer = context.create_timer(deadline)
    if transport is Transport.IN_PROCESS:
        call = context.call_activity(names.in_process_agent(agent_name), request.activity_json())
        winner = yield context.task_any([call, timer])
        if winner == timer:
            return None
        if call.state is not TaskState.FAILED and call.result is None:
            # the agent dropped the request (past its deadline); the timer decides. Not cancelled: the
            # extension takes a cancelled timer as done at once, the SDK only when its TimerFired comes
            yield timer
            return None
        cancel_timer(timer, context=detach)
        if call.state is TaskState.FAILED:  # the activity itself failed (crash, bug): treat as transient
            return AgentAnswer(succeeded=False, transient=True, error="in-process agent activity failed")
        return parse_agent_answer(call.result)

    queue = agent(agent_name).request_queue
    if queue is None:  # the workflow table gives every Service Bus agent its queue (checked by its tests)
        raise RuntimeError(f"agent {agent_name} has no request queue")
    if not sent:
        yield from call_state_activity(
            context, names.SEND_AGENT_REQUEST, SendAgentRequestInput(queue=queue, request=request).to_json()
        )
    timers = [timer]
    while True:
        event = context.wait_for_external_event(AGENT_REPLY_EVENT)
        winner = yield context.task_any([event, timer])
        forget_delivered(context, AGENT_REPLY_EVENT)  # an early or duplicate reply answers this wait only
        if winner == timer:
            abandon_wait(context, AGENT_REPLY_EVENT, event)
            cancel_open_timers(timers, context=detach)  # an earlier round's, due now too
            return None
        answer = _answer_to(event.result, request.request_id)
        if answer is not None:
            cancel_open_timers(timers, context=detach)
            return answer
        # A reply to some other request (an earlier attempt's, a duplicate), or no reply at all: ignore it
        # and keep waiting until the same deadline.
        timer = next_round_timer(context, timers, deadline, timer_per_round=timer_per_round)
