"""Red team (s43, emulator fidelity): an activity may run again after its result reached the orchestration.

"Durable Functions ensures that each activity runs at least once" (durable-functions-code-constraints,
https://learn.microsoft.com/azure/azure-functions/durable/durable-functions-code-constraints). On Azure
Storage a worker that dies after it sent an activity's result (the orchestration goes on with it) and before
it deleted the work-item message leaves that message to become visible again after
``WorkItemQueueVisibilityTimeout`` (5 minutes, DurableTask.AzureStorage): the activity runs a second time,
after the orchestration moved on, and its completion reaches the instance as a duplicate that
DurableTask.Core appends and ignores (``TaskOrchestrationContext``: "Duplicate TaskCompleted Event") and
the SDK sets aside. The runner's only repeat was an activity a host restart cut short, whose result never
came: the late second run the app defends against (docs/design.md, numbered fenced writes) never happened
in a run. ``DurableEngine.rerun_after_completion`` makes it happen (profile ``host.activity_rerun_rate``)."""

from __future__ import annotations

from collections.abc import Generator
from datetime import UTC, datetime, timedelta
from typing import Any

import azure.durable_functions as df
from azure.durable_functions import OrchestrationRuntimeStatus

from adapters.clock import ManualClock
from localrun.durable import history as ev
from localrun.durable.engine import WORK_ITEM_VISIBILITY_TIMEOUT, DurableEngine
from localrun.durable.registry import registered_orchestrators
from tests.localrun.real_durable_client import RealDurableClient

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
NAME = "act_then_wait"
GO = "Go"

app = df.DFApp()


def act_then_wait(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    first = yield context.call_activity("act", "a")
    yield context.wait_for_external_event(GO)
    second = yield context.call_activity("act", "b")
    return [first, second]


app.orchestration_trigger(context_name="context")(act_then_wait)
FUNCTIONS = app.get_functions()


def _run(go_after: timedelta, reruns: list[bool]) -> tuple[list[tuple[str, datetime]], Any, DurableEngine]:
    """``reruns``: the answers of ``rerun_after_completion``, one per execution in the order they end (then no)."""
    clock = ManualClock(T0)
    runs: list[tuple[str, datetime]] = []

    def act(name: str, value: Any) -> str:
        runs.append((value, clock.now()))
        return f"{value}#{len(runs)}"

    engine = DurableEngine(registered_orchestrators(FUNCTIONS), act, clock, context_fields=ev.AZURE_STORAGE_CONTEXT)
    answers = iter(reruns)
    engine.rerun_after_completion = lambda: next(answers, False)
    real = RealDurableClient(engine)
    try:
        instance_id = str(real.run(real.client.start_new(NAME, "late-1", None)))
        engine.run_until_idle()
        while (due := engine.next_due_time()) is not None and due <= T0 + go_after:
            clock.set(due)
            engine.run_until_idle()
        clock.set(T0 + go_after)
        engine.run_until_idle()
        real.run(real.client.raise_event(instance_id, GO, None))
        engine.run_until_idle()
        while (due := engine.next_due_time()) is not None:
            clock.set(due)
            engine.run_until_idle()
        status = real.run(real.client.get_status(instance_id, show_history=True))
    finally:
        real.close()
    return runs, status, engine


def test_a_completed_activity_runs_again_after_the_work_item_visibility_timeout_and_its_duplicate_is_ignored():
    go = timedelta(minutes=10)
    runs, status, engine = _run(go_after=go, reruns=[True, False, True, False])

    # "a" ran, its result went on; 5 minutes later it ran again, while the instance waited for Go; "b" too,
    # after the instance completed
    late = WORK_ITEM_VISIBILITY_TIMEOUT
    assert runs == [("a", T0), ("a", T0 + late), ("b", T0 + go), ("b", T0 + go + late)]
    assert engine.counters.activities_rerun_late == 2
    # the orchestration used the first run's results (the third run was b's first); the duplicate changed nothing
    assert (status.runtime_status, status.output) == (OrchestrationRuntimeStatus.Completed, ["a#1", "b#3"])
    completions = [e for e in status.historyEvents if e["EventType"] == "TaskCompleted"]
    assert len(completions) == 3  # a, its duplicate, b: the duplicate is in the history, as in Azure


def test_a_late_run_after_the_instance_completed_still_runs_but_reaches_nothing():
    runs, status, _ = _run(go_after=timedelta(seconds=0), reruns=[True, True])

    assert sorted(value for value, _ in runs) == ["a", "a", "b", "b"]
    assert (status.runtime_status, status.output) == (OrchestrationRuntimeStatus.Completed, ["a#1", "b#2"])


def test_a_late_run_comes_back_again_when_its_own_worker_dies_before_deleting_the_work_item():
    """Red team (s45): the late run's worker may die after sending its result and before deleting the work item
    too, and so may the next one's: the item comes back after each visibility timeout, at 10, 15 minutes..., past
    Service Bus's 10-minute duplicate detection of what the activity sends. The runner ran a late run once and never
    again (found: a round's ``Compensating`` told after ``Compensated``,
    tests/notifications/test_redteam45_compensating_run_late.py)."""
    late = WORK_ITEM_VISIBILITY_TIMEOUT
    runs, status, engine = _run(go_after=timedelta(minutes=30), reruns=[True, True, True])

    assert [run for run in runs if run[0] == "a"] == [
        ("a", T0),
        ("a", T0 + late),
        ("a", T0 + 2 * late),
        ("a", T0 + 3 * late),
    ]
    assert engine.counters.activities_rerun_late == 3
    assert (status.runtime_status, status.output) == (OrchestrationRuntimeStatus.Completed, ["a#1", "b#5"])


def test_an_activity_whose_orchestration_ended_meanwhile_may_run_again_too():
    """The work item comes back whatever its orchestration did since: a first run whose result reached an instance
    already completed (here the late run of ``b``, after the instance completed with the first) is run again."""
    runs, _, _ = _run(go_after=timedelta(seconds=0), reruns=[False, True, True])

    assert [value for value, _ in runs] == ["a", "b", "b", "b"]


def test_the_profile_takes_a_rerun_rate_as_a_probability():
    import pytest

    from localrun.profile import Profile, ProfileError

    assert Profile.parse({"host": {"activity_rerun_rate": 0.25}}).activity_rerun_rate == 0.25
    assert Profile.parse({}).activity_rerun_rate == 0.0
    with pytest.raises(ProfileError, match=r"host\.activity_rerun_rate"):
        Profile.parse({"host": {"activity_rerun_rate": 1.5}})
