"""Function registrations of this role (thin triggers calling plain code)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import azure.durable_functions as df
import azure.functions as func

from adapters.durable_client import bounded_client
from contracts.names import APP_QUEUES
from dependencies import get_context_async
from observability.events import app_event
from settings import DURABLE_CALL_TIMEOUT
from supervisor.backend_wait import read_statuses
from supervisor.budget import RunBudget
from supervisor.compensation_rounds import CompensationStart, release_untried_rounds, try_compensation_starts
from supervisor.dead_letters import watch_dead_letters
from supervisor.run import find_due, held_instances, phase_failed, run_supervisor
from supervisor.scan import ScanState
from supervisor.terminate import terminate_expired

bp = df.Blueprint()

# Per worker process: the run counter (catch-up cadence) and the cursor of an unfinished scan.
# Lost on restart, which only restarts the scan (recovery is idempotent by conditional update).
SCAN_STATE = ScanState()


@bp.timer_trigger(arg_name="timer", schedule="%SUPERVISOR_SCHEDULE%", run_on_startup=False, use_monitor=True)
@bp.durable_client_input(client_name="client")
async def supervisor(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
    if timer.past_due:
        app_event("SupervisorPastDue", "supervisor timer is past due")
    ctx = await get_context_async()
    # the whole run's: every phase starts no unit of work once it is spent (supervisor/budget.py)
    budget = RunBudget.start(ctx.clock)
    durable = bounded_client(client)
    due = await asyncio.to_thread(find_due, ctx, SCAN_STATE, budget)
    # the instances of the expired attempts and rounds: one the Durable backend has still to run is left to it
    statuses = await read_statuses(durable, held_instances(ctx, due, budget))
    loop = asyncio.get_running_loop()

    def start(starts: list[CompensationStart], grace: timedelta) -> None:
        # each batch of claims as soon as it is made, on this loop, whatever the budget (each claimed round is
        # started: one wave at least, within what is left of its first claim's start grace); never raises
        made = asyncio.run_coroutine_threadsafe(try_compensation_starts(durable, starts, grace), loop)
        try:  # bounded: the starts end within the grace and a wave (each call bounded), whatever the loop does
            tried = made.result((max(grace, DURABLE_CALL_TIMEOUT) + 2 * DURABLE_CALL_TIMEOUT).total_seconds())
        except Exception as exc:  # each start handles its own failure: one not made is left as after a failed start
            made.cancel()
            phase_failed("compensation starts", exc)
            return
        # the rounds whose start was never tried, released at once: on this thread once the wait is over (a store
        # write each, as the claims; a slow Cosmos DB inside the wait ran it out though every start was made)
        release_untried_rounds(ctx, tried.untried)

    report = await asyncio.to_thread(run_supervisor, ctx, SCAN_STATE, due, statuses, budget, start)
    # a round not started waits for a later run; a termination left is harmless (fenced)
    if budget.spent() and report.to_terminate:
        budget.stopped("terminations", done=0, left=len(report.to_terminate))
    elif report.to_terminate:
        await terminate_expired(durable, report.to_terminate, budget.left())
    # last: the rounds are started whatever the watch meets (it never raises; a queue it cannot read is logged)
    await asyncio.to_thread(watch_dead_letters, ctx, APP_QUEUES, budget)
