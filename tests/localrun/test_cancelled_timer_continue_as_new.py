"""Red team (s30): a cancelled timer's ``TimerFired`` comes while its instance runs (as in Azure), but
only to the execution that created it. After ``continue_as_new`` the new execution numbers its tasks
from 0 again, so a timer of the old execution delivered to it would complete the new execution's task
of the same id (DurableTask.Core drops such a message: its ``ExecutionId`` is not the instance's,
``TaskOrchestrationDispatcher.ReconcileMessagesWithState``). Nor does it come once the instance has
completed, failed or been terminated (pinned in ``test_durable_engine.py``)."""

from __future__ import annotations

from collections.abc import Generator
from datetime import UTC, datetime, timedelta
from typing import Any

import azure.durable_functions as df
from azure.durable_functions import OrchestrationRuntimeStatus

from adapters.clock import ManualClock
from localrun.durable import history as ev
from localrun.durable.engine import DurableEngine
from localrun.durable.registry import registered_orchestrators
from tests.localrun.real_durable_client import RealDurableClient

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
NAME = "cancel_then_continue_as_new"
GO = "Go"
OLD_TIMER = timedelta(minutes=10)
NEW_TIMER = timedelta(minutes=30)

app = df.DFApp()


def cancel_then_continue_as_new(context: df.DurableOrchestrationContext) -> Generator[Any, Any, str]:
    """First execution: its task 0, a timer, loses to an event and is cancelled; it continues as new.
    The new execution's task 0 is a timer of its own, later: ``act`` runs when that one fires."""
    if not context.get_input().get("continued"):
        timer = context.create_timer(context.current_utc_datetime + OLD_TIMER)
        winner = yield context.task_any([context.wait_for_external_event(GO), timer])
        if winner != timer:
            timer.cancel()
        context.continue_as_new({"continued": True})
        return "continued"
    yield context.create_timer(context.current_utc_datetime + NEW_TIMER)
    yield context.call_activity("act", None)
    return "done"


app.orchestration_trigger(context_name="context")(cancel_then_continue_as_new)
FUNCTIONS = app.get_functions()


def test_a_cancelled_timer_of_an_execution_that_continued_as_new_never_fires_into_the_next():
    clock = ManualClock(T0)
    acts: list[datetime] = []

    def act(name: str, value: Any) -> None:
        acts.append(clock.now())

    engine = DurableEngine(registered_orchestrators(FUNCTIONS), act, clock, context_fields=ev.AZURE_STORAGE_CONTEXT)
    real = RealDurableClient(engine)
    try:
        instance_id = str(real.run(real.client.start_new(NAME, "can:1", {})))
        engine.run_until_idle()
        real.run(real.client.raise_event(instance_id, GO, None))
        engine.run_until_idle()  # the event wins, the timer is cancelled, the instance continues as new
        while (due := engine.next_due_time()) is not None:
            clock.set(due)
            engine.run_until_idle()
        instance = engine.instance(instance_id)
    finally:
        real.close()

    assert instance is not None
    assert (instance.status, instance.output) == (OrchestrationRuntimeStatus.Completed, "done")
    assert acts == [T0 + NEW_TIMER]  # not T0 + OLD_TIMER: the old timer 0 did not complete the new one
