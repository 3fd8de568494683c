"""A Service Bus agent: takes an ``AgentRequest`` from its request queue, runs it, and sends the
``AgentReply`` to ``agent-replies``. Returns how the request message must be settled."""

from __future__ import annotations

import logging

from adapters.servicebus.sender import OutgoingMessage, SendError
from adapters.servicebus.settlement import ReceivedMessage, Settlement, body_bytes
from contracts.messages import AgentRequest
from contracts.names import AGENT_REPLIES_QUEUE
from contracts.parsing import InvalidMessage, parse
from dependencies import AppContext
from domain.ids import reply_message_id
from domain.workflow import agent, step
from order_agents.circuit_gate import gate_of
from order_agents.runtime import log_fields, run_agent_request

log = logging.getLogger(__name__)


def parse_request(message: ReceivedMessage, agent_name: str) -> AgentRequest:
    """The request, checked to be one this agent serves; ``InvalidMessage`` otherwise."""
    request = parse(body_bytes(message), {"AgentRequest": AgentRequest})
    try:
        the_step = step(request.step)
    except ValueError as exc:
        raise InvalidMessage("UnknownStep", f"field 'step': {exc}") from None
    if not the_step.serves(agent_name):  # the step's agent, or its fallback agent
        raise InvalidMessage(
            "WrongAgent",
            f"field 'step': step {request.step!r} belongs to agent {the_step.agent!r}, not {agent_name!r}",
        )
    return request


def handle_agent_request(ctx: AppContext, agent_name: str, message: ReceivedMessage) -> Settlement:
    try:
        request = parse_request(message, agent_name)
    except InvalidMessage as bad:
        log.error(
            "agent %s dead-letters message %s: %s", agent_name, message.message_id, bad, extra={"agent": agent_name}
        )
        return Settlement.deadletter(bad.reason, bad.description)

    service_name = agent(agent_name).service
    service = ctx.remote.get(service_name)
    if service is None:
        # A wiring error, not a bad message: let redelivery (and finally the dead-letter queue) show it.
        log.error("no remote service %r configured for agent %s", service_name, agent_name, extra=log_fields(request))
        return Settlement.abandon(f"no remote service {service_name!r}")

    reply = run_agent_request(request, service, ctx.clock, ctx.settings, ctx.rng, gate_of(ctx), dependency=service_name)
    if reply is None:
        return Settlement.complete()
    outgoing = OutgoingMessage(
        body=reply.to_json(),
        message_id=reply_message_id(request.request_id),
        subject="AgentReply",
        correlation_id=request.request_id,
    )
    try:
        ctx.sender.send(AGENT_REPLIES_QUEUE, outgoing)
    except SendError as exc:
        # Redelivery re-runs the request; the same idempotency key makes that safe, and duplicate
        # detection on agent-replies drops a second copy of a reply that did get through.
        log.warning("reply could not be sent, abandoning for redelivery: %s", exc, extra=log_fields(request))
        return Settlement.abandon(f"reply send failed: {exc}")
    log.info("reply %s sent (%s)", outgoing.message_id, reply.outcome, extra=log_fields(request))
    return Settlement.complete()
