"""Drives the real activities and agents (over the Cosmos protocol server and the simulators) the
way the scheduler and compensation orchestrations would, one step at a time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from activities import compensation_steps, scheduler_steps
from adapters.cosmos.state_store import update_once
from contracts.messages import AgentRequest
from contracts.names import AGENT_REPLIES_QUEUE
from dependencies import AppContext
from domain import transitions
from domain.compensation import claim_compensation, undo_idempotency_key, undo_request_id
from domain.ids import idempotency_key, request_id
from domain.payloads import step_payload
from domain.records import StateRecord
from domain.states import StepStatus
from domain.timefmt import to_text
from domain.workflow import Transport, agent
from order_agents.activity_agent import run_activity_agent
from order_agents.service_bus_agent import handle_agent_request
from tests.activity_calls import run
from tests.fakes import FakeReceivedMessage, RecordingSender
from tests.orchestrators.support import sample_order

ORDER: dict[str, Any] = sample_order()
# What the supervisor starts a compensation round with, beside its order and round: the flags of the changes a
# round started before them replays without (orchestrators/timers.py, orchestrators/status.py)
NEW_ROUND_INPUT: dict[str, Any] = {
    "timerPerRound": True,
    "holdsBackoff": True,
    "deadlineAtBegin": True,
    "releasesOpenCircuit": True,
    "answersGiveUp": True,
}


def stored_record(ctx: AppContext, order_id: str = "o1") -> StateRecord:
    """The state record as it is in the store now (it must exist)."""
    record = ctx.states.get(order_id)
    assert record is not None
    return record


def submitted_and_claimed(ctx: AppContext, order: dict[str, Any] = ORDER) -> StateRecord:
    ctx.orders.create_or_verify(order)
    record = ctx.states.create(transitions.new_record(order["orderId"], order.get("replyTo"), ctx.clock.now()))
    return update_once(ctx.states, record, lambda r: transitions.claim(r, ctx.clock.now(), ctx.settings.start_grace))


def call_agent(ctx: AppContext, agent_name: str, request: dict[str, Any]) -> dict[str, Any] | None:
    """Runs one agent request the way its transport does and returns the reply (camelCase)."""
    if agent(agent_name).transport is Transport.IN_PROCESS:
        return run_activity_agent(ctx, agent_name, request)
    sender = ctx.sender
    assert isinstance(sender, RecordingSender)
    before = len(sender.bodies(AGENT_REPLIES_QUEUE))
    body = AgentRequest.model_validate(request).to_json()  # as send_agent_request puts it on the queue
    handle_agent_request(ctx, agent_name, FakeReceivedMessage.of(body))
    replies = sender.bodies(AGENT_REPLIES_QUEUE)
    return replies[-1] if len(replies) > before else None


def carried(ctx: AppContext, results: dict[str, Any]) -> dict[str, Any] | None:
    """The step result the scheduler holds (``results``, its memory) and the record does not have
    yet, as the ``completes`` of its next fenced write (``begin_step`` or ``mark_processed``): at most
    one, since every such write records the one before it."""
    record = stored_record(ctx)
    pending = [
        {"step": name, "result": result}
        for name, result in results.items()
        if name not in record.steps or record.steps[name].status is not StepStatus.SUCCEEDED
    ]
    assert len(pending) <= 1, pending
    return pending[0] if pending else None


def forward_step(
    ctx: AppContext, owner: str, attempt: int, step_name: str, agent_name: str, results: dict[str, Any], tries: int = 1
) -> dict[str, Any] | None:
    """What the lean scheduler does for one step: ``begin_step`` records the previous step's result
    (``carried``) with this step's start and, for a Service Bus agent, sends the request; then the
    agent answers. On success the result joins ``results``: the next ``begin_step`` (or
    ``mark_processed``, ``finish_forward``) records it. Returns the reply."""
    deadline = ctx.clock.now() + ctx.settings.step_timeout
    rid = request_id(owner, step_name, agent_name) + ("" if tries == 1 else f":{tries}")
    request = {
        "requestId": rid,
        "instanceId": owner,
        "orderId": "o1",
        "step": step_name,
        "action": "do",
        "attempt": attempt,
        "deadline": to_text(deadline),
        "idempotencyKey": idempotency_key("o1", step_name),
        "payload": step_payload(step_name, ORDER, results),
    }
    begin: dict[str, Any] = {"request": request, "agent": agent_name}
    completes = carried(ctx, results)
    if completes is not None:
        begin["completes"] = completes
    queue = agent(agent_name).request_queue
    if queue is not None:
        begin["queue"] = queue
    sent_before = len(_sent_to(ctx, queue))
    assert run(scheduler_steps.begin_step, ctx, begin)["owned"]
    if queue is not None and isinstance(ctx.sender, RecordingSender):
        # begin_step put the request on the agent's queue, once: the very request the agent gets below
        [sent] = _sent_to(ctx, queue)[sent_before:]
        assert sent == AgentRequest.model_validate(request).to_json()
    reply = call_agent(ctx, agent_name, request)
    if reply is not None and reply["outcome"] == "succeeded":
        results[step_name] = reply["result"]
    return reply


def finish_forward(ctx: AppContext, owner: str, attempt: int, results: dict[str, Any]) -> dict[str, Any]:
    """``mark_processed``, recording the last step's result (``carried``) in the same write; its answer."""
    data: dict[str, Any] = {"orderId": "o1", "instanceId": owner, "attempt": attempt}
    completes = carried(ctx, results)
    if completes is not None:
        data["completes"] = completes
    answer: dict[str, Any] = run(scheduler_steps.mark_processed, ctx, data)
    return answer


def _sent_to(ctx: AppContext, queue: str | None) -> list[str | bytes]:
    """The bodies sent onto ``queue`` so far (none when the sender records nothing)."""
    sender = ctx.sender
    if queue is None or not isinstance(sender, RecordingSender):
        return []
    return [m.body for q, m in sender.sent if q == queue]


def shipment_request(owner: str, deadline: Any, attempt: int = 1) -> dict[str, Any]:
    """The pivot's (arrange-shipment) first request of ``owner``'s attempt, as ``begin_step`` gets it."""
    return {
        "requestId": request_id(owner, "arrange-shipment", "shipping"),
        "instanceId": owner,
        "orderId": "o1",
        "step": "arrange-shipment",
        "attempt": attempt,
        "deadline": deadline,
        "idempotencyKey": idempotency_key("o1", "arrange-shipment"),
        "payload": {},
    }


def begin_charge(ctx: AppContext, owner: str, attempt: int = 1, results: dict[str, Any] | None = None) -> None:
    """``begin_step`` of charge-payment (recording the reservation in ``results``, as the scheduler
    carries it) and nothing more: the charge is in flight, its reply never comes."""
    request = {
        "requestId": request_id(owner, "charge-payment", "payment"),
        "instanceId": owner,
        "orderId": "o1",
        "step": "charge-payment",
        "attempt": attempt,
        "deadline": ctx.clock.now() + ctx.settings.step_timeout,
        "idempotencyKey": idempotency_key("o1", "charge-payment"),
        "payload": step_payload("charge-payment", ORDER, {}),
    }
    begin: dict[str, Any] = {"request": request, "agent": "payment"}
    completes = carried(ctx, results or {})
    if completes is not None:
        begin["completes"] = completes
    assert run(scheduler_steps.begin_step, ctx, begin)["owned"]


def compensation_round(ctx: AppContext, owner: str, round_number: int) -> list[dict[str, Any]]:
    """What the compensation orchestration does, against the real activities; returns the replies."""
    fenced = {"orderId": "o1", "instanceId": owner}
    plan = run(compensation_steps.load_compensation, ctx, fenced)
    assert plan["owned"]
    replies = []
    for entry in sorted(plan["entries"], key=lambda e: e["seq"], reverse=True):
        if entry["outcome"] == "Undone":
            continue
        deadline = ctx.clock.now() + timedelta(seconds=plan["stepTimeoutSeconds"])
        request = {
            "requestId": undo_request_id(owner, entry["step"], entry["agent"], 1),
            "instanceId": owner,
            "orderId": "o1",
            "step": entry["step"],
            "action": "undo",
            "attempt": round_number,
            "deadline": to_text(deadline),
            "idempotencyKey": undo_idempotency_key("o1", entry["step"]),
            "payload": {**entry["data"], "seq": entry["seq"]},
        }
        assert run(
            compensation_steps.begin_undo, ctx, {"request": request, "agent": entry["agent"], "seq": entry["seq"]}
        )["owned"]
        reply = call_agent(ctx, entry["agent"], request)
        assert reply is not None and reply["outcome"] == "succeeded", reply
        recorded = {**fenced, "seq": entry["seq"], "result": reply.get("result")}  # what the undo did, as sent
        assert run(compensation_steps.record_undo, ctx, recorded)["owned"]
        replies.append(reply)
    assert run(compensation_steps.finish_compensation, ctx, fenced)["owned"]
    # then, as the orchestration does after the fenced write, tell the submitter
    run(scheduler_steps.publish_status, ctx, {"orderId": "o1", "status": "Compensated", "attempt": round_number})
    return replies


def charge_declined(ctx: AppContext) -> None:
    """The reservation made, the charge declined: the order handed to compensation (``request_compensation``)."""
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    forward_step(ctx, "o1:1", 1, "reserve-inventory", "inventory", results)
    begin_charge(ctx, "o1:1", results=results)
    fenced = {"orderId": "o1", "instanceId": "o1:1", "step": "charge-payment", "attempt": 1}
    run(compensation_steps.request_compensation, ctx, {**fenced, "error": "declined"})


def claim_round(ctx: AppContext) -> StateRecord:
    """The supervisor's claim of the order's next compensation round (a due ``Compensating`` record), written."""
    settings = ctx.settings
    claimed = claim_compensation(
        stored_record(ctx), ctx.clock.now(), settings.start_grace, settings.max_failures, "supervisor"
    )
    return ctx.states.replace(claimed)
