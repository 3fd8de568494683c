"""The scheduler's activities, as plain functions of (context, input). Each state write is fenced:
it succeeds only while the calling instance still holds ``lockedBy``; otherwise it returns
``{"owned": False}`` and the orchestration ends quietly.

Store or send failures raise: the activity fails, the orchestration fails with it, and the record
(still Processing, with a ``completeBy``) is recovered by the supervisor."""

from __future__ import annotations

import logging
from typing import Any

from activities.compensation_steps import review_policy
from adapters.cosmos.state_store import update_fenced
from adapters.servicebus.sender import OutgoingMessage
from contracts.messages import AgentRequest, StatusName
from dependencies import AppContext
from domain import transitions
from domain.compensation import complete_step_logged
from domain.errors import FencingLost
from domain.states import ProcessState, StepStatus
from notifications.alerts import raise_alert_after_write
from notifications.status import publish_status
from observability.events import app_event

log = logging.getLogger(__name__)

NOT_OWNED: dict[str, Any] = {"owned": False}
OWNED: dict[str, Any] = {"owned": True}


def _fencing_lost(exc: FencingLost, where: str) -> dict[str, Any]:
    app_event(
        "FencingLost",
        f"{exc.expected} no longer owns order {exc.order_id} ({where}); stopping",
        orderId=exc.order_id,
        instanceId=exc.expected,
        lockedBy=exc.actual,
    )
    return NOT_OWNED


def load_order(ctx: AppContext, data: dict[str, Any]) -> dict[str, Any]:
    """The order, the results of steps done by earlier attempts, and the step timeout; ``owned``
    is False unless this instance holds the record."""
    order_id, me = data["orderId"], data["instanceId"]
    record = ctx.states.get(order_id)
    if record is None or record.locked_by != me or record.process_state is not ProcessState.PROCESSING:
        return NOT_OWNED
    order = ctx.orders.get(order_id)
    if order is None:
        raise RuntimeError(f"order {order_id} has a state record but no order document")
    completed = {name: step.result or {} for name, step in record.steps.items() if step.status is StepStatus.SUCCEEDED}
    return {
        "owned": True,
        "order": order,
        "completed": completed,
        "stepTimeoutSeconds": ctx.settings.step_timeout.total_seconds(),
        "review": review_policy(ctx.settings),
    }


def begin_step(ctx: AppContext, data: dict[str, Any]) -> dict[str, Any]:
    request = AgentRequest.model_validate(data["request"])
    now = ctx.clock.now()
    try:
        written = update_fenced(
            ctx.states,
            request.order_id,
            request.instance_id,
            lambda r: transitions.begin_step(
                r, request.instance_id, request.step, data["agent"], request.request_id, request.deadline, now
            ),
        )
    except FencingLost as exc:
        return _fencing_lost(exc, f"begin {request.step}")
    if written.payment is not None:
        # A prepaid order's PaymentNotification applied before this step began (in the same document,
        # so a notification written after this write sees the step in flight and is raised as an event).
        return {**OWNED, "payment": written.payment.model_dump(mode="json", by_alias=True)}
    return OWNED


def send_agent_request(ctx: AppContext, data: dict[str, Any]) -> None:
    request = AgentRequest.model_validate(data["request"])
    ctx.sender.send(
        data["queue"],
        OutgoingMessage(
            body=request.to_json(),
            message_id=request.request_id,  # a re-run of this activity collapses in duplicate detection
            subject="AgentRequest",
            correlation_id=request.order_id,
        ),
    )


def complete_step(ctx: AppContext, data: dict[str, Any]) -> dict[str, Any]:
    now = ctx.clock.now()
    next_deadline = now + ctx.settings.start_grace
    try:
        update_fenced(
            ctx.states,
            data["orderId"],
            data["instanceId"],
            lambda r: complete_step_logged(r, data["instanceId"], data["step"], data["result"], next_deadline, now),
        )
    except FencingLost as exc:
        return _fencing_lost(exc, f"complete {data['step']}")
    return OWNED


def release_for_retry(ctx: AppContext, data: dict[str, Any]) -> dict[str, Any]:
    now = ctx.clock.now()
    reason = str(data.get("error") or "transient failure")
    try:
        update_fenced(
            ctx.states,
            data["orderId"],
            data["instanceId"],
            lambda r: transitions.release_for_retry(r, data["instanceId"], data["step"], reason, now),
        )
    except FencingLost as exc:
        return _fencing_lost(exc, "release for retry")
    return OWNED


def fail_order(ctx: AppContext, data: dict[str, Any]) -> dict[str, Any]:
    now = ctx.clock.now()
    reason = f"{data['step']}: {data.get('error') or 'non-transient failure'}"
    try:
        record = update_fenced(
            ctx.states,
            data["orderId"],
            data["instanceId"],
            lambda r: transitions.fail(r, data["instanceId"], data["step"], reason, now),
        )
    except FencingLost as exc:
        return _fencing_lost(exc, "fail")
    raise_alert_after_write(
        ctx.sender,
        kind="OrderFailed",
        summary=f"order {record.order_id} failed at {data['step']}: {data.get('error')}",
        at=now,
        order_id=record.order_id,
        discriminator=record.attempt,
        details={"step": data["step"], "attempt": record.attempt, "error": data.get("error")},
    )
    # The submitter hears "Failed" from the orchestration, after this write (orchestrators.status).
    return OWNED


def mark_processed(ctx: AppContext, data: dict[str, Any]) -> dict[str, Any]:
    now = ctx.clock.now()
    try:
        update_fenced(
            ctx.states,
            data["orderId"],
            data["instanceId"],
            lambda r: transitions.mark_processed(r, data["instanceId"], now),
        )
    except FencingLost as exc:
        return _fencing_lost(exc, "processed")
    ctx.counts.bump(ProcessState.PROCESSING, -1)
    return OWNED


def publish_order_status(ctx: AppContext, data: dict[str, Any]) -> None:
    """Status updates go only to the order's own ``replyTo`` queue, which the record knows."""
    record = ctx.states.get(data["orderId"])
    if record is None:
        return
    status: StatusName = data["status"]
    publish_status(
        ctx.sender,
        reply_to=record.reply_to,
        order_id=record.order_id,
        status=status,
        attempt=int(data["attempt"]),
        at=ctx.clock.now(),
        reason=data.get("reason"),
    )
