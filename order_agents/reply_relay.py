"""The reply relay: turns an ``AgentReply`` on ``agent-replies`` into the Durable external event its
orchestration waits for.

A reply for an instance that is unknown or already finished is a late reply (the attempt timed out
and the supervisor took over): it is completed and logged, never retried forever. Only the raise's own
404/410 or a finished status says so: a failed raise followed by an empty status (the SDK's answer to a
500 too) is abandoned and redelivered. A reply whose
``instanceId`` is not an instance id this app builds for its ``orderId`` (``<orderId>:<attempt>`` or
``<orderId>:compensate:<round>``) never reaches the Durable client: the contract refuses it, and it is
dead-lettered ``InvalidFields``. A succeeded reply of a forward attempt whose result the app's agent would have
refused (``ResultTooLarge``: more than the state record keeps, or than the requests carrying it on hold;
``ResultNotExact``: an integer the record would round; ``order_agents.runtime.unkept_forward_result``) is not from
that agent: dead-lettered with that reason, the attempt left to hear nothing, as from a lost reply."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from adapters.servicebus.settlement import ReceivedMessage, Settlement, body_bytes
from contracts.messages import AgentReply
from contracts.names import AGENT_REPLY_EVENT
from contracts.parsing import InvalidMessage, parse
from domain.ids import is_compensation_instance, url_instance_id
from orchestrators.raise_events import said_gone
from order_agents.runtime import unkept_forward_result

log = logging.getLogger(__name__)

FINISHED_STATUSES = frozenset({"Completed", "Failed", "Terminated", "Canceled"})


class InstanceStatus(Protocol):
    @property
    def runtime_status(self) -> Any: ...


class DurableClient(Protocol):
    """What the relay needs of ``azure.durable_functions.DurableOrchestrationClient``."""

    async def raise_event(self, instance_id: str, event_name: str, event_data: Any = None) -> None: ...

    async def get_status(self, instance_id: str) -> InstanceStatus | None: ...


def status_name(status: InstanceStatus | None) -> str | None:
    """The runtime status as text (the SDK gives an enum), or None for an unknown instance."""
    if status is None:
        return None
    runtime = status.runtime_status
    if runtime is None:
        return None
    return str(getattr(runtime, "value", runtime))


async def relay_reply(client: DurableClient, message: ReceivedMessage) -> Settlement:
    try:
        reply = parse(body_bytes(message), {"AgentReply": AgentReply})
    except InvalidMessage as bad:
        log.error("reply relay dead-letters message %s: %s", message.message_id, bad)
        return Settlement.deadletter(bad.reason, bad.description)
    fields = {"orderId": reply.order_id, "step": reply.step, "requestId": reply.request_id}
    refused = None
    if reply.outcome == "succeeded" and not is_compensation_instance(reply.instance_id):
        refused = unkept_forward_result(reply.result)
    if refused is not None:
        reason, why = refused
        log.error("reply relay dead-letters message %s: %s: %s", message.message_id, reason, why, extra=fields)
        return Settlement.deadletter(reason, f"field 'result' of step {reply.step!r}: {why}")
    instance = url_instance_id(reply.instance_id)  # the same text (the contract checked it), escaped all the same
    try:
        await client.raise_event(instance, AGENT_REPLY_EVENT, reply.model_dump(mode="json", by_alias=True))
    except Exception as exc:  # the SDK raises a plain Exception for 404 / 410 / anything else
        try:
            status = status_name(await client.get_status(instance))
        except Exception as status_exc:
            log.warning("raise_event failed (%s) and so did get_status (%s): abandoning", exc, status_exc, extra=fields)
            return Settlement.abandon(f"raise_event failed: {exc}")
        if said_gone(exc) or status in FINISHED_STATUSES:  # not an empty status alone: a 500 reads as one
            log.info(
                "late reply for instance %s (%s): completed without an event",
                reply.instance_id,
                status or "unknown",
                extra=fields,
            )
            return Settlement.complete()
        log.warning("raise_event failed for %s instance: %s; abandoning", status, exc, extra=fields)
        return Settlement.abandon(f"raise_event failed: {exc}")
    log.info("reply %s raised as event on %s", reply.request_id, reply.instance_id, extra=fields)
    return Settlement.complete()
