"""The reply relay: turns an ``AgentReply`` on ``agent-replies`` into the Durable external event its
orchestration waits for.

What becomes of a reply that cannot be raised:
- A late reply (its instance unknown or finished: the attempt timed out and the supervisor took over) is completed
  and logged. Only the raise's own 404/410 or a finished status says so: an empty status after a failed raise is
  also the SDK's answer to a 500, so that reply is retried.
- A reply whose ``instanceId`` is not one this app builds for its ``orderId`` (``<orderId>:<attempt>`` or
  ``<orderId>:compensate:<round>``) is refused by the contract and dead-lettered ``InvalidFields``.
- A succeeded forward reply whose result the app's own agent would have refused
  (``order_agents.runtime.unkept_forward_result``: ``ResultTooLarge``, ``ResultNotExact``) is dead-lettered with that
  reason; the attempt hears nothing, as from a lost reply.
- A reply the Durable backend cannot take now (the raise fails, and the status read fails, reads as nothing, or says
  the instance still runs) is sent to ``agent-replies`` again as the copy of its next round, due after that round's
  delay (``round_delay``), and completed. It is not abandoned: its redeliveries would burn the delivery count in a
  second and dead-letter it, paging an operator for an order that recovers anyway. The copy is relayed like any
  reply.
- The rounds last until the step's deadline, which the reply carries (``AgentReply.deadline``): the last is due
  ``RAISE_MARGIN`` before it (``round_before_deadline``). A reply from an agent older than that field has the rounds
  that span the current ``STEP_TIMEOUT_SECONDS`` (``relay_retry_delays``).
- A reply with no round left is completed (``ReplyLeftToDeadline``): the attempt's durable timer ends it
  (``DeadlineExpired``) and the supervisor retries the order under the same idempotency key. Only a copy that cannot
  be sent (Service Bus failing too) abandons the message.

The round helpers are the store retries' (``submission.store_outage.send_copy``)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from adapters.servicebus.sender import SendError
from adapters.servicebus.settlement import ReceivedMessage, Settlement, body_bytes, message_id_text
from contracts.messages import AgentReply, foreign_ids
from contracts.names import AGENT_REPLIES_QUEUE, AGENT_REPLY_EVENT
from contracts.parsing import InvalidMessage, parse
from contracts.store_retry import retry_round
from dependencies import AppContext
from domain.ids import is_compensation_instance, url_instance_id
from domain.timefmt import to_text
from observability.events import app_event
from orchestrators.raise_events import said_gone
from order_agents.runtime import unkept_forward_result
from submission.store_outage import ScheduledCopy, send_copy, send_copy_at

log = logging.getLogger(__name__)

FINISHED_STATUSES = frozenset({"Completed", "Failed", "Terminated", "Canceled"})

FIRST_RETRY = timedelta(seconds=1)  # soon: a reply raised late is worth less to an attempt the nearer its deadline
LONGEST_RETRY = timedelta(seconds=30)
# The last round of a reply that carries its step's deadline is due this long before it, so that its raise reaches
# the orchestration ahead of the timer's own message; a round that could not be is not sent.
RAISE_MARGIN = timedelta(seconds=1)
# Rounds of one reply at most, whatever its deadline: about an hour and a half of 30 s rounds (a step timeout of up to
# that is covered; a longer one's reply is left to its deadline after them).
MAX_RELAY_ROUNDS = 200


def round_delay(round_number: int) -> timedelta:
    """The delay of round ``round_number`` (from 1): 1 s, doubling, at most 30 s."""
    return min(FIRST_RETRY * (1 << min(max(round_number, 1) - 1, 16)), LONGEST_RETRY)


def relay_retry_delays(step_timeout: timedelta) -> tuple[timedelta, ...]:
    """The delays between the rounds of a reply without its step's deadline (from an agent older than
    ``AgentReply.deadline``): ``round_delay``'s, until together they reach ``step_timeout``.

    With ``STEP_TIMEOUT_SECONDS`` at 60 s: 1, 2, 4, 8, 16, 30 s. A reply comes at most a step timeout after its step
    began, so the rounds last until its deadline if the setting is the one the attempt began with. The short first
    rounds ride out a blip of a second or two; the later ones a backend failing for the rest of the step."""
    delays: list[timedelta] = []
    total = timedelta(0)
    while total < step_timeout:
        delays.append(round_delay(len(delays) + 1))
        total += delays[-1]
    return tuple(delays) or (FIRST_RETRY,)


@dataclass(frozen=True)
class NextRound:
    """The round a reply's copy is sent for: its number, the rounds its deadline leaves room for now, when it is due."""

    number: int
    rounds: int
    due: datetime


def round_before_deadline(now: datetime, message: ReceivedMessage, deadline: datetime) -> NextRound | None:
    """The next round of ``message``, a reply carrying its step's ``deadline``, at the host's ``now``; None when no
    round is left before it (or ``MAX_RELAY_ROUNDS`` are done).

    Sized by the step's own deadline, not by the current ``STEP_TIMEOUT_SECONDS``, which a deploy may have changed
    since the attempt began. The round's delay (``round_delay``) is cut so that the copy is due ``RAISE_MARGIN``
    before the deadline; the time left is read on the host's clock, as the deadline was written on the app's. The
    delay is added to the broker's time of the message (its enqueued time; a copy's is when it came due), not to the
    host's now, so a host clock off from Service Bus's neither stretches the rounds nor schedules copies in the past
    (as ``due_base``). A message that waited in the queue longer than its delay has its copy due at once."""
    done = retry_round(message.application_properties)
    room = deadline - now - RAISE_MARGIN
    if done >= MAX_RELAY_ROUNDS or room <= timedelta(0):
        return None
    number = done + 1
    delay = min(round_delay(number), room)
    rounds, left = number, room - delay
    while left > timedelta(0) and rounds < MAX_RELAY_ROUNDS:
        rounds += 1
        left -= round_delay(rounds)
    enqueued = message.enqueued_time_utc
    if enqueued is not None and enqueued.tzinfo is None:
        enqueued = enqueued.replace(tzinfo=UTC)
    return NextRound(number, rounds, (enqueued or now) + delay)


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
        foreign = foreign_ids(reply)
        if foreign is not None:
            raise InvalidMessage("InvalidFields", foreign)
    except InvalidMessage as bad:
        log.error("reply relay dead-letters message %s: %s", message_id_text(message), bad)
        return Settlement.deadletter(bad.reason, bad.description)
    fields = {"orderId": reply.order_id, "step": reply.step, "requestId": reply.request_id}
    refused = None
    if reply.outcome == "succeeded" and not is_compensation_instance(reply.instance_id):
        refused = unkept_forward_result(reply.result)
    if refused is not None:
        reason, why = refused
        log.error("reply relay dead-letters message %s: %s: %s", message_id_text(message), reason, why, extra=fields)
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
    its rounds are used up (``ReplyLeftToDeadline``); abandons it when the copy cannot be sent."""
    fields = {"orderId": reply.order_id, "instanceId": reply.instance_id, "step": reply.step}
    try:
        # A blocking send (the SDK's own retries): off the worker's event loop, as the settlement is.
        copy = await asyncio.to_thread(_send_next_round, ctx, message, reply)
    except SendError as send_exc:
        log.warning("%s; its retry could not be sent (%s): abandoning", why, send_exc, extra=fields)
        return Settlement.abandon(why)
    if copy is None:
        rounds = retry_round(message.application_properties)
        until = "" if reply.deadline is None else f" before its step's deadline {to_text(reply.deadline)}"
        app_event(
            "ReplyLeftToDeadline",
            f"reply {reply.request_id} to {reply.instance_id} (step {reply.step}): {why}; no round left{until} "
            f"after {rounds}, completed without an event: the attempt recovers at its deadline (its durable timer "
            "ends it, the supervisor retries the order under the same idempotency key)",
            logging.WARNING,
            requestId=reply.request_id,
            messageId=message_id_text(message),
            rounds=rounds,
            error=why,
            **fields,
        )
        return Settlement.complete()
    app_event(
        "ReplyRetryScheduled",
        f"reply {reply.request_id} to {reply.instance_id}: {why}; relayed again at {to_text(copy.due)} "
        f"(round {copy.round} of {copy.rounds})",
        logging.WARNING,
        requestId=reply.request_id,
        messageId=message_id_text(message),
        retryMessageId=copy.message_id,
        round=copy.round,
        due=to_text(copy.due),
        error=why,
        **fields,
    )
    return Settlement.complete()


def _send_next_round(ctx: AppContext, message: ReceivedMessage, reply: AgentReply) -> ScheduledCopy | None:
    """Sends the copy of ``message``'s next round (``round_before_deadline``; without the reply's deadline, the rounds
    of ``relay_retry_delays`` of the current step timeout); None when no round is left. Raises ``SendError``."""
    if reply.deadline is None:
        delays = relay_retry_delays(ctx.settings.step_timeout)
        return send_copy(ctx.sender, ctx.clock, AGENT_REPLIES_QUEUE, message, "AgentReply", delays)
    step = round_before_deadline(ctx.clock.now(), message, reply.deadline)
    if step is None:
        return None
    return send_copy_at(ctx.sender, AGENT_REPLIES_QUEUE, message, "AgentReply", step.number, step.rounds, step.due)
