"""The scheduler orchestration and the starter's timer sweep."""

import asyncio
from collections.abc import Generator
from typing import Any

import azure.durable_functions as df
import azure.functions as func

from adapters.durable_client import bounded_client, grace_left
from dependencies import get_context_async
from orchestrators import names, starter
from orchestrators.alert import deliver_alert
from orchestrators.compensation import compensate_order
from orchestrators.result import OrchestrationResult
from orchestrators.retired import retire
from orchestrators.scheduler import process_order
from orchestrators.status import deliver_status

bp = df.Blueprint()


@bp.orchestration_trigger(context_name="context", orchestration=names.SCHEDULER, input_type=dict)
def process_order_v4(context: df.DurableOrchestrationContext) -> Generator[Any, Any, OrchestrationResult]:
    return process_order(context)


@bp.orchestration_trigger(context_name="context", orchestration=names.DRAINING_SCHEDULER, input_type=dict)
def process_order_v3(context: df.DurableOrchestrationContext) -> Generator[Any, Any, OrchestrationResult]:
    return process_order(context, closes_reviews=False)


@bp.orchestration_trigger(context_name="context", orchestration=names.RETIRED_SCHEDULERS[0], input_type=dict)
def process_order_v2(context: df.DurableOrchestrationContext) -> Generator[Any, Any, OrchestrationResult]:
    return retire(context, names.RETIRED_SCHEDULERS[0])


@bp.orchestration_trigger(context_name="context", orchestration=names.RETIRED_SCHEDULERS[1], input_type=dict)
def process_order_v1(context: df.DurableOrchestrationContext) -> Generator[Any, Any, OrchestrationResult]:
    return retire(context, names.RETIRED_SCHEDULERS[1])


@bp.orchestration_trigger(context_name="context", orchestration=names.COMPENSATION, input_type=dict)
def compensate_order_v1(context: df.DurableOrchestrationContext) -> Generator[Any, Any, OrchestrationResult]:
    return compensate_order(context)


@bp.orchestration_trigger(context_name="context", orchestration=names.DELIVER_STATUS, input_type=dict)
def deliver_status_v1(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    return deliver_status(context)


@bp.orchestration_trigger(context_name="context", orchestration=names.DELIVER_ALERT, input_type=dict)
def deliver_alert_v1(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    return deliver_alert(context)


@bp.timer_trigger(arg_name="timer", schedule="%STARTER_SCHEDULE%", run_on_startup=False, use_monitor=True)
@bp.durable_client_input(client_name="client")
async def starter_sweep(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
    ctx = await get_context_async()
    claims = await asyncio.to_thread(starter.sweep, ctx)
    # within what is left of the first claim's start grace (its completeBy), one wave at least; a claim whose start
    # was never tried is released at once (Pending again, not counted)
    left = grace_left((claim.start_by for claim in claims), ctx.clock.now(), ctx.settings.start_grace)
    await starter.start_claimed(bounded_client(client), claims, left, ctx)
