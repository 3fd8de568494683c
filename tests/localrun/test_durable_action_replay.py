"""The extension replays an out-of-process orchestrator's actions one after another
(``OutOfProcOrchestrationShim.ProcessAsyncActionsV2`` awaits each before it invokes the next), and
DurableTask.Core matches the history against what that replay invoked: an action after one whose task
is not done in the extension's view is not scheduled yet, whatever the SDK says; the engine does the
same (``localrun.durable.action_replay``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import azure.durable_functions as df
from azure.durable_functions import OrchestrationRuntimeStatus

from adapters.clock import ManualClock
from localrun.durable.engine import DurableEngine
from tests.localrun.real_durable_client import RealDurableClient

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
DEADLINE = timedelta(minutes=5)


class Activities:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, name: str, value: Any) -> Any:
        self.calls.append(name)
        return name


def _engine(orchestrators: dict[str, Any]) -> tuple[DurableEngine, ManualClock, Activities]:
    clock = ManualClock(T0)
    activities = Activities()
    return DurableEngine(orchestrators, activities, clock), clock, activities


def _raise(engine: DurableEngine, instance_id: str, name: str, data: Any) -> None:
    with RealDurableClient(engine) as real:
        real.run(real.client.raise_event(instance_id, name, data))


def _start(engine: DurableEngine, name: str) -> str:
    with RealDurableClient(engine) as real:
        return str(real.run(real.client.start_new(name, f"{name}:1")))


def skips_other_replies(context: df.DurableOrchestrationContext) -> Any:
    """The wait loop of the scheduler's review and agent reply: a reply to something else is skipped
    and a new wait races the SAME timer; the SDK leaves an already scheduled task out of a when-any's
    actions, so the second when-any the extension sees holds the new wait alone."""
    timer = context.create_timer(context.current_utc_datetime + DEADLINE)
    while True:
        event = context.wait_for_external_event("Reply")
        winner = yield context.task_any([event, timer])
        if winner == timer:
            break
        if event.result == "mine":
            timer.cancel()
            return "replied"
    yield context.call_activity("after_deadline", None)
    return "timed out"


def test_a_task_after_a_when_any_the_extension_sees_as_waiting_is_not_scheduled():
    """A reply to something else, then the deadline: the SDK goes on to ``after_deadline``, but the
    extension's replay waits on the second when-any (the new wait alone) and never reaches it: the
    instance stays Running with nothing scheduled until another ``Reply`` completes that wait."""
    engine, clock, activities = _engine({"loop": skips_other_replies})
    instance_id = _start(engine, "loop")
    engine.run_until_idle()
    _raise(engine, instance_id, "Reply", "someone else's")
    engine.run_until_idle()

    clock.set(T0 + DEADLINE)
    engine.run_until_idle()

    instance = engine.instance(instance_id)
    assert instance is not None
    assert instance.status is OrchestrationRuntimeStatus.Running
    assert activities.calls == []
    assert engine.next_due_time() is None
    assert not engine.has_work()

    _raise(engine, instance_id, "Reply", "late")  # completes the extension's second wait
    engine.run_until_idle()
    assert activities.calls == ["after_deadline"]
    assert (instance.status, instance.output) == (OrchestrationRuntimeStatus.Completed, "timed out")


def test_the_same_loop_answered_goes_on_as_the_sdk_does():
    engine, _, _ = _engine({"loop": skips_other_replies})
    instance_id = _start(engine, "loop")
    engine.run_until_idle()
    _raise(engine, instance_id, "Reply", "someone else's")
    _raise(engine, instance_id, "Reply", "mine")
    engine.run_until_idle()

    instance = engine.instance(instance_id)
    assert instance is not None
    assert (instance.status, instance.output) == (OrchestrationRuntimeStatus.Completed, "replied")
    assert engine.next_due_time() is None


def cancels_then_fails(context: df.DurableOrchestrationContext) -> Any:
    timer = context.create_timer(context.current_utc_datetime + DEADLINE)
    event = context.wait_for_external_event("Reply")
    yield context.task_any([event, timer])
    timer.cancel()
    raise ValueError("bad reply")


def test_an_orchestrator_that_cancels_its_timer_then_raises_fails_at_once():
    """The extension replays the actions (the timer's cancel included) before it throws the
    orchestrator's error: no task is open, the instance fails there and then; before, the runner
    skipped the actions of a failed replay and held the instance Running until the timer fired."""
    engine, _, _ = _engine({"fails": cancels_then_fails})
    instance_id = _start(engine, "fails")
    engine.run_until_idle()
    _raise(engine, instance_id, "Reply", "x")
    engine.run_until_idle()

    instance = engine.instance(instance_id)
    assert instance is not None
    assert instance.status is OrchestrationRuntimeStatus.Failed
    assert "bad reply" in instance.output
    assert engine.next_due_time() is None


def test_an_activity_name_that_changes_only_in_case_is_the_same_task():
    """``HandleTaskScheduledEvent`` compares names with ``StringComparison.OrdinalIgnoreCase``."""
    name = {"first": "Prepare_Order"}

    def renamed(context: df.DurableOrchestrationContext) -> Any:
        yield context.call_activity(name["first"], None)
        return "done"

    engine, _, activities = _engine({"renamed": renamed})
    instance_id = _start(engine, "renamed")
    engine.run_next()  # schedules Prepare_Order
    name["first"] = "prepare_order"
    engine.run_until_idle()

    instance = engine.instance(instance_id)
    assert instance is not None
    assert (instance.status, instance.output) == (OrchestrationRuntimeStatus.Completed, "done")
    assert activities.calls == ["Prepare_Order"]


def answered_then_waits_six_days(context: df.DurableOrchestrationContext) -> Any:
    """An answer wins and its timer is cancelled: on every later replay the extension gets through that
    when-any at once (at the first episode's time) and reaches the next timer from there."""
    first = context.create_timer(context.current_utc_datetime + timedelta(hours=1))
    yield context.task_any([context.wait_for_external_event("Reply"), first])
    first.cancel()
    yield context.create_timer(context.current_utc_datetime + timedelta(days=6) - timedelta(minutes=10))
    return "waited"


def test_a_timer_the_extension_reaches_more_than_6_days_before_it_fires_is_refused_by_name():
    """The SDK makes a timer of at most 6 days from its own time (30 min in); the extension reaches it
    from the first episode's, 6 days and 20 minutes before it fires, and splits it itself
    (``DurableOrchestrationContext.CreateTimer``: other timers, other task ids than the SDK's). The
    runner does not model that: it fails the instance saying so, rather than go on as if it did not."""
    engine, clock, _ = _engine({"waits": answered_then_waits_six_days})
    instance_id = _start(engine, "waits")
    engine.run_until_idle()
    clock.set(T0 + timedelta(minutes=30))
    _raise(engine, instance_id, "Reply", "x")
    engine.run_until_idle()

    instance = engine.instance(instance_id)
    assert instance is not None
    assert instance.status is OrchestrationRuntimeStatus.Failed
    assert instance.output.startswith("The local runner does not model the extension splitting timer 1 itself")
