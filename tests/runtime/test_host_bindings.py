"""The runner's host resolves ``%NAME%`` binding expressions as the Functions host does: from the app
settings it was given and nothing else. A function whose expression does not resolve is in error and
never runs; the others start. (The app's code defaults for the same names play no part.)"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from localrun.host import local_settings_example
from tests.runtime.harness import T0, RuntimeHarness


@pytest.fixture
def harness_for() -> Iterator[object]:
    made: list[RuntimeHarness] = []

    def make(settings: dict[str, str], cosmos_db: object = None) -> RuntimeHarness:
        made.append(RuntimeHarness(settings, cosmos_db=cosmos_db))
        return made[-1]

    yield make
    for harness in made:
        harness.close()


def settings_without(*names: str, **values: str) -> dict[str, str]:
    settings = {k: v for k, v in local_settings_example().items() if k not in names}
    settings.update(values)
    return settings


def timer_next_fire(harness: RuntimeHarness, function: str) -> datetime:
    return next(t.next_fire for t in harness.host.timers if t.function.name == function)


def test_every_function_starts_with_the_example_local_settings(harness_for):
    harness = harness_for(local_settings_example())
    assert harness.host.load_errors == {}
    assert set(harness.host.functions) == set(harness.host.worker.functions)


def test_a_schedule_that_does_not_resolve_puts_only_its_timer_in_error(harness_for):
    harness = harness_for(settings_without("STARTER_SCHEDULE"))
    assert set(harness.host.load_errors) == {"starter_sweep"}
    assert "'%STARTER_SCHEDULE%' does not resolve" in harness.host.load_errors["starter_sweep"]
    assert "starter_sweep" not in {t.function.name for t in harness.host.timers}
    assert "supervisor" in {t.function.name for t in harness.host.timers}


@pytest.mark.cosmos
def test_a_schedule_comes_from_the_app_setting_not_from_the_code_default(harness_for, cosmos_db):
    # The code default is every 20 s; the setting says every hour at minute 7.
    harness = harness_for(settings_without(STARTER_SCHEDULE="0 7 * * * *"), cosmos_db)
    assert timer_next_fire(harness, "starter_sweep") == T0 + timedelta(minutes=7)

    harness.run_until_idle(limit=timedelta(minutes=6))
    assert harness.host.executions.get("starter_sweep", 0) == 0
    harness.host.run_until(T0 + timedelta(minutes=7, seconds=1))
    assert harness.host.executions["starter_sweep"] == 1
    assert harness.scheduler.failures == []  # the sweep ran through the runtime and succeeded


def test_service_bus_triggers_without_a_configured_connection_are_in_error(harness_for):
    harness = harness_for(settings_without("ServiceBusConnection"))
    service_bus = {
        name for name, f in harness.host.worker.functions.items() if f.trigger["type"] == "serviceBusTrigger"
    }
    assert service_bus and set(harness.host.load_errors) == service_bus
    assert "ServiceBusConnection" in harness.host.load_errors["submit_order"]
    assert harness.host.queues == {}


def test_an_identity_based_connection_is_configured_by_its_namespace_setting(harness_for):
    settings = settings_without("ServiceBusConnection")
    settings["ServiceBusConnection__fullyQualifiedNamespace"] = "example.servicebus.windows.net"
    harness = harness_for(settings)
    assert harness.host.load_errors == {}


def test_a_schedule_that_is_not_ncrontab_puts_only_its_timer_in_error(harness_for):
    harness = harness_for(settings_without(STARTER_SCHEDULE="every twenty seconds"))
    assert set(harness.host.load_errors) == {"starter_sweep"}
    assert "not valid NCRONTAB" in harness.host.load_errors["starter_sweep"]
    assert "supervisor" in {t.function.name for t in harness.host.timers}


def test_a_timer_does_not_fire_again_while_its_previous_run_is_going(harness_for):
    harness = harness_for(settings_without(STARTER_SCHEDULE="*/5 * * * * *"))
    [timer] = [t for t in harness.host.timers if t.function.name == "starter_sweep"]
    timer.running = True  # the previous run has not finished
    harness.clock.advance_to(timer.next_fire)
    harness.host.pump()
    assert harness.host.executions.get("starter_sweep", 0) == 0
    timer.running = False
    harness.clock.advance_to(timer.next_fire)
    harness.host.pump()
    assert harness.host.executions.get("starter_sweep", 0) == 0  # started as a task, not run yet
    assert harness.scheduler.has_ready()


def test_a_binding_the_runner_does_not_emulate_puts_its_function_in_error():
    from localrun.worker.bindings import BindingError, resolve_binding

    blob = {"type": "blob", "direction": "IN", "name": "doc", "path": "orders/{id}", "connection": "Storage"}
    with pytest.raises(BindingError, match="does not emulate 'blob' bindings"):
        resolve_binding(blob, local_settings_example())
    output = {"type": "serviceBus", "direction": "OUT", "name": "out", "queueName": "q", "connection": "X"}
    with pytest.raises(BindingError, match="does not emulate 'serviceBus' bindings"):
        resolve_binding(output, local_settings_example())


def test_the_worker_reads_its_own_switches_from_the_app_settings():
    """``PYTHON_ENABLE_OPENTELEMETRY=true`` (local.settings.json.example) makes the worker declare the
    capability that tells the host the worker handles OpenTelemetry, as in Azure."""
    from localrun.worker.process import FunctionsWorker

    assert local_settings_example()["PYTHON_ENABLE_OPENTELEMETRY"] == "true"
    assert FunctionsWorker.get().capabilities.get("WorkerOpenTelemetryEnabled") == "true"


def test_a_blocking_sleep_on_the_worker_loop_is_counted(harness_for):
    import asyncio

    from localrun.worker.process import LOOP_THREAD

    harness = harness_for(local_settings_example())

    async def blocks() -> None:
        harness.clock.sleep(5)  # what a blocking call in an async function does to the loop

    asyncio.run_coroutine_threadsafe(blocks(), harness.host.worker.loop).result(timeout=10)
    assert harness.clock.untracked_sleeps[LOOP_THREAD] == 1
