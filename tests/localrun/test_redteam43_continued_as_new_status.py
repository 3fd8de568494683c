"""Red team (s43, emulator fidelity): between an execution's ``continue_as_new`` and the new execution's
first episode, the Durable backend reports the instance ``ContinuedAsNew``, not ``Running``.

"ContinuedAsNew: The instance has restarted itself with a new history. This state is a transient state."
(https://learn.microsoft.com/azure/azure-functions/durable/durable-functions-instance-management, Query
instances). On Azure Storage, the backend this app deploys by default (``infra/main.bicep``
``durableBackend = 'storage'``), the episode that continues as new writes ``RuntimeStatus = ContinuedAsNew``
to the instances table (DurableTask.AzureStorage ``AzureTableTrackingStore.UpdateStateAsync``, case
``EventType.ContinueAsNew``); the new execution's ``ExecutionStarted`` sets it back to ``Running`` when
its first episode runs. The runner answered ``Running`` all along, so code that lists the "still active"
runtime statuses without ``ContinuedAsNew`` was never caught out: the supervisor skipped terminating
such an instance as one with "nothing to terminate" (``supervisor/terminate.py``)."""

from __future__ import annotations

from collections.abc import Generator
from datetime import UTC, datetime
from typing import Any

import azure.durable_functions as df
from azure.durable_functions import OrchestrationRuntimeStatus

from adapters.clock import ManualClock
from localrun.durable import history as ev
from localrun.durable.engine import DurableEngine
from localrun.durable.registry import registered_orchestrators
from supervisor.terminate import terminate_expired
from tests.localrun.real_durable_client import RealDurableClient

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
NAME = "continue_once"
GO = "Go"

app = df.DFApp()


def continue_once(context: df.DurableOrchestrationContext) -> Generator[Any, Any, str]:
    """The first execution waits for ``Go``, then continues as new; the second waits for ``Go`` again."""
    yield context.wait_for_external_event(GO)
    if not (context.get_input() or {}).get("continued"):
        context.continue_as_new({"continued": True})
        return "continued"
    return "done"


app.orchestration_trigger(context_name="context")(continue_once)
FUNCTIONS = app.get_functions()


def _engine() -> DurableEngine:
    def no_activities(name: str, value: Any) -> None:
        raise AssertionError(f"no activity expected, got {name}")

    return DurableEngine(
        registered_orchestrators(FUNCTIONS), no_activities, ManualClock(T0), context_fields=ev.AZURE_STORAGE_CONTEXT
    )


def _continue_as_new(engine: DurableEngine, real: RealDurableClient) -> str:
    """Starts an instance and runs it up to (and including) the episode that continues it as new, not the
    new execution's first episode."""
    instance_id = str(real.run(real.client.start_new(NAME, "can-1", {})))
    engine.run_until_idle()  # waiting for Go
    real.run(real.client.raise_event(instance_id, GO, None))
    step = engine.run_next()  # the episode that takes Go and continues as new
    assert step is not None and step.kind == "episode"
    return instance_id


def test_between_continue_as_new_and_the_next_episode_the_status_is_continued_as_new():
    engine = _engine()
    real = RealDurableClient(engine)
    try:
        instance_id = _continue_as_new(engine, real)
        between = real.run(real.client.get_status(instance_id))
        engine.run_until_idle()  # the new execution's first episode: Running again, waiting for Go
        after = real.run(real.client.get_status(instance_id))
        real.run(real.client.raise_event(instance_id, GO, None))
        engine.run_until_idle()
        done = real.run(real.client.get_status(instance_id))
    finally:
        real.close()

    assert between.runtime_status is OrchestrationRuntimeStatus.ContinuedAsNew
    assert after.runtime_status is OrchestrationRuntimeStatus.Running
    assert (done.runtime_status, done.output) == (OrchestrationRuntimeStatus.Completed, "done")


def test_an_event_raised_while_continued_as_new_is_taken_by_the_new_execution():
    """The extension's raise-event answers 410 only for Completed, Failed, Terminated and Canceled
    (``HttpApiHandler``): an instance that continued as new takes the event, for its new execution."""
    engine = _engine()
    real = RealDurableClient(engine)
    try:
        instance_id = _continue_as_new(engine, real)
        real.run(real.client.raise_event(instance_id, GO, None))
        engine.run_until_idle()
        done = real.run(real.client.get_status(instance_id))
    finally:
        real.close()

    assert (done.runtime_status, done.output) == (OrchestrationRuntimeStatus.Completed, "done")


def test_the_supervisor_terminates_an_expired_instance_that_just_continued_as_new():
    engine = _engine()
    real = RealDurableClient(engine)
    try:
        instance_id = _continue_as_new(engine, real)
        terminated = real.run(terminate_expired(real.client, [instance_id]))
        engine.run_until_idle()
        status = real.run(real.client.get_status(instance_id))
    finally:
        real.close()

    assert terminated == [instance_id]
    assert status.runtime_status is OrchestrationRuntimeStatus.Terminated


def test_the_ops_api_sees_an_instance_that_just_continued_as_new_as_taking_events():
    """So a review answer to a retiring attempt (one that continues as new, ``orchestrators/retired.py``)
    is refused by its version ("no longer takes answers"), not as an attempt that is not running."""
    from operations.instances import attempt_state

    engine = _engine()
    real = RealDurableClient(engine)
    try:
        instance_id = _continue_as_new(engine, real)
        state = real.run(attempt_state(real.client, instance_id))
    finally:
        real.close()

    assert (state.takes_events, state.name) == (True, NAME)
