"""An in-process agent: the orchestrator calls it as an activity with an ``AgentRequest`` (camelCase
JSON) and gets the ``AgentReply`` (camelCase JSON) back, or None when the deadline passed."""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import ValidationError

from contracts.messages import AgentRequest
from contracts.parsing import describe
from dependencies import AppContext
from domain.workflow import agent, step
from order_agents.circuit_gate import gate_of
from order_agents.runtime import log_fields, run_agent_request

log = logging.getLogger(__name__)


class InvalidAgentInput(ValueError):
    """The activity input is not a request this agent serves (a bug in the caller: the activity fails)."""


def parse_activity_input(data: Any, agent_name: str) -> AgentRequest:
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise InvalidAgentInput(f"activity input is not JSON: {exc.msg}") from None
    try:
        request = AgentRequest.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as exc:
        raise InvalidAgentInput(describe(exc)) from None
    try:
        owner = step(request.step).agent
    except ValueError as exc:
        raise InvalidAgentInput(str(exc)) from None
    if owner != agent_name:
        raise InvalidAgentInput(f"step {request.step!r} belongs to agent {owner!r}, not {agent_name!r}")
    return request


def run_activity_agent(ctx: AppContext, agent_name: str, data: Any) -> dict[str, Any] | None:
    request = parse_activity_input(data, agent_name)
    service_name = agent(agent_name).service
    service = ctx.remote[service_name]
    reply = run_agent_request(request, service, ctx.clock, ctx.settings, ctx.rng, gate_of(ctx), dependency=service_name)
    if reply is None:
        log.info("no reply: the deadline passed", extra=log_fields(request))
        return None
    return reply.model_dump(mode="json", by_alias=True)
