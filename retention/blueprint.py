"""Function registrations of this role (thin triggers calling plain code)."""

from __future__ import annotations

import azure.durable_functions as df
import azure.functions as func

from adapters.durable_client import bounded_client
from dependencies import get_context_async
from retention.purge import purge_history

bp = df.Blueprint()

# Hourly, at a minute no other timer of the app favours.
PURGE_SCHEDULE = "0 41 * * * *"


@bp.timer_trigger(arg_name="timer", schedule=PURGE_SCHEDULE, run_on_startup=False, use_monitor=True)
@bp.durable_client_input(client_name="client")
async def history_purge(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
    ctx = await get_context_async()
    await purge_history(bounded_client(client), ctx.clock.now(), ctx.settings.durable_history_retention)
