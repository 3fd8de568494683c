"""A Service Bus agent: takes an ``AgentRequest`` from its request queue, runs it, and sends the ``AgentReply`` to
``agent-replies``. Returns how the request message must be settled.

A reply send that fails (``SendError``, after the SDK's own retries) is tried again in the same invocation after a
backoff (``AGENT_RETRY_BASE_MS`` doubling to ``AGENT_RETRY_MAX_MS``, jittered), while the request's deadline is
ahead and the send can end within the host's lock renewal (``settings.LOCK_RENEWAL``, from the invocation's start).
After that the request is completed and ``AgentReplyUndelivered`` logged. The attempt recovers without the reply:
its timer ends it at the deadline, and the supervisor's retry asks again under the same idempotency key (the
service answers what it did).

Completing, not abandoning, is deliberate: redeliveries come back within seconds, use up the delivery count, and
dead-letter (``MaxDeliveryCountExceeded``) a request whose deadline has passed, paging an operator for an order
that recovers on its own (tests/agents/test_redteam51_reply_unsendable.py). A reply queue that refuses the app
(``QueueNotFound``: missing, disabled, the app's role gone) or a reply no send can carry (``MessageRejected``)
still abandons the request: no retry mends them, and the dead letter is the page they need."""

from __future__ import annotations

import logging
from datetime import datetime

from adapters.servicebus.sender import MessageRejected, OutgoingMessage, QueueNotFound, SendError
from adapters.servicebus.settlement import ReceivedMessage, Settlement, body_bytes, message_id_text
from contracts.messages import AgentReply, AgentRequest, foreign_ids
from contracts.names import AGENT_REPLIES_QUEUE
from contracts.parsing import InvalidMessage, parse
from dependencies import AppContext
from domain.ids import reply_message_id
from domain.retry import exponential_backoff
from domain.workflow import agent, step
from observability.events import app_event
from order_agents.circuit_gate import gate_of
from order_agents.runtime import log_fields, run_agent_request
from settings import LOCK_RENEWAL, SEND_TIMEOUT

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
    foreign = foreign_ids(request)
    if foreign is not None:
        raise InvalidMessage("InvalidFields", foreign)
    return request


def handle_agent_request(ctx: AppContext, agent_name: str, message: ReceivedMessage) -> Settlement:
    started = ctx.clock.now()
    try:
        request = parse_request(message, agent_name)
    except InvalidMessage as bad:
        log.error(
            "agent %s dead-letters message %s: %s",
            agent_name,
            message_id_text(message),
            bad,
            extra={"agent": agent_name},
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
    return _send_reply(ctx, request, reply, started)


def _send_reply(ctx: AppContext, request: AgentRequest, reply: AgentReply, started: datetime) -> Settlement:
    """Sends the reply, retrying after a backoff while it fails and there is time (see the module's docstring)."""
    outgoing = OutgoingMessage(
        body=reply.to_json(),
        message_id=reply_message_id(request.request_id),
        subject="AgentReply",
        correlation_id=request.request_id,
    )
    failures = 0
    while True:
        try:
            ctx.sender.send(AGENT_REPLIES_QUEUE, outgoing)
        except (QueueNotFound, MessageRejected) as exc:
            # Redelivery re-runs the request (the same idempotency key makes that safe) until the broker
            # dead-letters it: a queue refusing the app, or a reply it cannot take, is for an operator.
            log.warning("reply could not be sent, abandoning for redelivery: %s", exc, extra=log_fields(request))
            return Settlement.abandon(f"reply send failed: {exc}")
        except SendError as exc:
            failures += 1
            delay = exponential_backoff(failures, ctx.settings.agent_retry_base, ctx.settings.agent_retry_max, ctx.rng)
            now = ctx.clock.now()
            if now + delay < request.deadline and now + delay + SEND_TIMEOUT <= started + LOCK_RENEWAL:
                log.warning(
                    "reply could not be sent, sending it again in %.3fs: %s",
                    delay.total_seconds(),
                    exc,
                    extra=log_fields(request, sends=failures),
                )
                ctx.clock.sleep(delay.total_seconds())
                continue
            app_event(
                "AgentReplyUndelivered",
                f"reply {outgoing.message_id} could not be sent ({failures} tries) before the request's deadline: "
                f"the request is completed, its attempt recovers at the deadline: {exc}",
                logging.WARNING,
                **log_fields(request, instanceId=request.instance_id, sends=failures),
                error=str(exc),
            )
            return Settlement.complete()
        log.info(
            "reply %s sent (%s)", outgoing.message_id, reply.outcome, extra=log_fields(request, sends=failures + 1)
        )
        return Settlement.complete()
