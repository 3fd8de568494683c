"""The reply relay: turns an ``AgentReply`` on ``agent-replies`` into the Durable external event its
orchestration waits for.

A reply for an instance that is unknown or already finished is a late reply (the attempt timed out
and the supervisor took over): it is completed and logged, never retried forever. Only the raise's own
404/410 or a finished status says so: a failed raise followed by an empty status (the SDK's answer to a
500 too) is relayed again later (below). A reply whose
``instanceId`` is not an instance id this app builds for its ``orderId`` (``<orderId>:<attempt>`` or
``<orderId>:compensate:<round>``) never reaches the Durable client: the contract refuses it, and it is
dead-lettered ``InvalidFields``. A succeeded reply of a forward attempt whose result the app's agent would have
refused (``ResultTooLarge``: more than the state record keeps, or than the requests carrying it on hold;
``ResultNotExact``: an integer the record would round; ``order_agents.runtime.unkept_forward_result``) is not from
that agent: dead-lettered with that reason, the attempt left to hear nothing, as from a lost reply.

A reply the Durable backend cannot take now (the raise fails and the status read fails too, reads as nothing, or says
the instance still runs: a backend blip) is not abandoned: abandoned, it came back at once, five deliveries burnt
in under a second, and the broker dead-lettered it ``MaxDeliveryCountExceeded``, which pages an operator
(``deadLettersFound``) though the order recovers without the reply. It is sent to ``agent-replies`` again as the copy
of its next round, due after that round's delay (``relay_retry_delays``: 1 s doubling to 30 s, until they span the
step timeout), and completed; the copy is relayed as any reply (raised, or a late reply once its attempt moved on
or ended). A copy whose rounds are used up and still cannot be raised is completed (``ReplyLeftToDeadline``): its
attempt's deadline is behind it or at hand, where the attempt's durable timer ends it (``DeadlineExpired``) and the
supervisor retries the order under the same idempotency key, the agent answering with what its service did. Only a
copy that cannot be sent (Service Bus failing too) is abandoned as before. The round helpers are the store
retries' (``submission.store_outage.send_copy``)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any, Protocol

from adapters.servicebus.sender import SendError
from adapters.servicebus.settlement import ReceivedMessage, Settlement, body_bytes
from contracts.messages import AgentReply
from contracts.names import AGENT_REPLIES_QUEUE, AGENT_REPLY_EVENT
from contracts.parsing import InvalidMessage, parse
from dependencies import AppContext
from domain.ids import is_compensation_instance, url_instance_id
from observability.events import app_event
from orchestrators.raise_events import said_gone
from order_agents.runtime import unkept_forward_result
from submission.store_outage import send_copy

log = logging.getLogger(__name__)

FINISHED_STATUSES = frozenset({"Completed", "Failed", "Terminated", "Canceled"})

FIRST_RETRY = timedelta(seconds=1)  # soon: a reply raised late is worth less to an attempt the nearer its deadline
LONGEST_RETRY = timedelta(seconds=30)


def relay_retry_delays(step_timeout: timedelta) -> tuple[timedelta, ...]:
    """The delays between the rounds of a reply the Durable backend could not take: 1 s, doubling, at most 30 s
    apart, until together they reach ``step_timeout`` (``STEP_TIMEOUT_SECONDS``; 60 s: 1, 2, 4, 8, 16, 30 s, six
    rounds over 61 s). A reply is sent before its request's deadline, at most a step timeout after the step began,
    so the rounds last until that deadline whenever the reply came: past it, the attempt's timer has ended the wait
    and a copy is a late reply. The short first rounds take a reply through a blip of a second or two while most of
    the step's time is still ahead; the later ones, a backend failing for up to the rest of the step."""
    delays: list[timedelta] = []
    delay, total = FIRST_RETRY, timedelta(0)
    while total < step_timeout:
        delays.append(delay)
        total += delay
        delay = min(delay * 2, LONGEST_RETRY)
    return tuple(delays) or (FIRST_RETRY,)


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


async def relay_reply(client: DurableClient, message: ReceivedMessage, ctx: AppContext) -> Settlement:
    """Raises the reply in ``message`` as its instance's event; what a reply that cannot be raised becomes (a
    late reply, a copy for a later round, left to its deadline) is the module's docstring."""
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
            why = f"raise_event failed ({exc}) and so did get_status ({status_exc})"
            return await _retry_later(ctx, message, reply, why)
        if said_gone(exc) or status in FINISHED_STATUSES:  # not an empty status alone: a 500 reads as one
            log.info(
                "late reply for instance %s (%s): completed without an event",
                reply.instance_id,
                status or "unknown",
                extra=fields,
            )
            return Settlement.complete()
        return await _retry_later(ctx, message, reply, f"raise_event failed for {status} instance: {exc}")
    log.info("reply %s raised as event on %s", reply.request_id, reply.instance_id, extra=fields)
    return Settlement.complete()


async def _retry_later(ctx: AppContext, message: ReceivedMessage, reply: AgentReply, why: str) -> Settlement:
    """Sends ``message`` to ``agent-replies`` again for its next round and completes it; completes it at once when
    its rounds are used up (``ReplyLeftToDeadline``); abandons it, as before, when the copy cannot be sent."""
    fields = {"orderId": reply.order_id, "instanceId": reply.instance_id, "step": reply.step}
    delays = relay_retry_delays(ctx.settings.step_timeout)
    try:
        # A blocking send (the SDK's own retries): off the worker's event loop, as the settlement is.
        copy = await asyncio.to_thread(
            send_copy, ctx.sender, ctx.clock, AGENT_REPLIES_QUEUE, message, "AgentReply", delays
        )
    except SendError as send_exc:
        log.warning("%s; its retry could not be sent (%s): abandoning", why, send_exc, extra=fields)
        return Settlement.abandon(why)
    if copy is None:
        app_event(
            "ReplyLeftToDeadline",
            f"reply {reply.request_id} to {reply.instance_id} (step {reply.step}): {why}; its {len(delays)} rounds "
            "used up, completed without an event: the attempt recovers at its deadline (its durable timer ends it, "
            "the supervisor retries the order under the same idempotency key)",
            logging.WARNING,
            requestId=reply.request_id,
            messageId=message.message_id,
            rounds=len(delays),
            error=why,
            **fields,
        )
        return Settlement.complete()
    app_event(
        "ReplyRetryScheduled",
        f"reply {reply.request_id} to {reply.instance_id}: {why}; relayed again at {copy.due.isoformat()} "
        f"(round {copy.round} of {copy.rounds})",
        logging.WARNING,
        requestId=reply.request_id,
        messageId=message.message_id,
        retryMessageId=copy.message_id,
        round=copy.round,
        due=copy.due.isoformat(),
        error=why,
        **fields,
    )
    return Settlement.complete()
