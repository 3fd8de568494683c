"""The peek sweep's timer trigger (thin: plain code in ``deferral.sweep``)."""

import asyncio

import azure.durable_functions as df
import azure.functions as func

from adapters.durable_client import bounded_client
from deferral.sweep import SweepCursor, peek_sweep
from dependencies import get_context_async
from orchestrators.raise_events import raise_events

bp = df.Blueprint()
# Per worker process: where the next peek sweep run starts (lost on restart: it starts from the beginning).
CURSOR = SweepCursor()


@bp.timer_trigger(arg_name="timer", schedule="%PEEK_SWEEP_SCHEDULE%", run_on_startup=False, use_monitor=True)
@bp.durable_client_input(client_name="client")
async def deferred_peek_sweep(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
    report = await asyncio.to_thread(peek_sweep, await get_context_async(), CURSOR)
    await raise_events(bounded_client(client), report.events)
