"""The local Durable engine runs registered orchestrators through the SDK's replay the way the host
does: activities (at-least-once across host restarts), timers on the injected clock, external events
(buffered before their wait), when-any races, cancelled timers, failures."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.durable_functions import OrchestrationRuntimeStatus

from adapters.clock import ManualClock
from localrun.durable.engine import RUNNING_ACTIVITY, DurableEngine
from localrun.durable.history import EventType, HistoryEvent, context_json
from localrun.durable.registry import registered_orchestrators
from localrun.durable.replay import replay
from tests.durable_history import History
from tests.localrun.durable_samples import DEADLINE, FUNCTIONS, REPLY_EVENT, reply_or_deadline
from tests.localrun.real_durable_client import RealDurableClient

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
ACTIVITY_TIME = timedelta(seconds=2)
ORDER = {"orderId": "order-1"}
SAMPLE = "reply_or_deadline_orchestrator"


class FakeActivities:
    """Activity implementations for the sample orchestrators. Each takes ACTIVITY_TIME on the clock
    and records its call; ``failures[name]`` is how many more calls of ``name`` raise."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.calls: list[tuple[str, Any]] = []
        self.failures: dict[str, int] = {}
        self.during: Callable[[str], None] | None = None

    def __call__(self, name: str, value: Any) -> Any:
        self.calls.append((name, value))
        self.clock.advance(ACTIVITY_TIME)
        if self.during is not None:
            self.during(name)
        if self.failures.get(name, 0) > 0:
            self.failures[name] -= 1
            raise RuntimeError(f"{name} boom")
        if name == "prepare":
            return "prepared"
        if name == "finish":
            return {"done": value["reply"]}
        return f"{name}:{value}"

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


class Harness:
    def __init__(self) -> None:
        self.clock = ManualClock(T0)
        self.activities = FakeActivities(self.clock)
        self.engine = DurableEngine(registered_orchestrators(FUNCTIONS), self.activities, self.clock)
        # The SDK's own client, over HTTP to the engine's Durable extension API (closed by the fixture).
        self.real = RealDurableClient(self.engine)
        self.client = self.real.client

    def run(self, coroutine: Any) -> Any:
        return self.real.run(coroutine)

    def start(self, name: str = SAMPLE, instance_id: str | None = "order-1:1", data: Any = ORDER) -> str:
        return str(self.run(self.client.start_new(name, instance_id, data)))

    def raise_reply(self, instance_id: str, payload: Any) -> None:
        self.run(self.client.raise_event(instance_id, REPLY_EVENT, payload))

    def status(self, instance_id: str) -> Any:
        return self.run(self.client.get_status(instance_id))

    def advance_to_next_timer(self) -> None:
        due = self.engine.next_due_time()
        assert due is not None
        self.clock.set(due)


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.real.close()


def test_it_runs_the_first_activity_then_waits_on_the_same_actions_the_replay_builder_shows(h):
    instance_id = h.start()
    assert h.status(instance_id).runtime_status is OrchestrationRuntimeStatus.Pending

    h.engine.run_until_idle()

    assert h.activities.calls == [("prepare", ORDER)]
    status = h.status(instance_id)
    assert status.runtime_status is OrchestrationRuntimeStatus.Running
    assert status.custom_status == {"waiting_since": (T0 + ACTIVITY_TIME).isoformat()}
    assert h.engine.next_due_time() == T0 + ACTIVITY_TIME + DEADLINE
    # Same history, same answer: the engine's history replays to what the builder's does.
    instance = h.engine.instance(instance_id)
    assert instance is not None
    engine_state = replay(reply_or_deadline, context_json(instance_id, instance.input_json, instance.history))
    built = History(instance_id, ORDER, start=T0)
    built.activity_completed("prepare", "prepared", input=ORDER, at=T0 + ACTIVITY_TIME)
    built.timer_created_not_fired(T0 + ACTIVITY_TIME + DEADLINE)
    assert engine_state.actions == built.run(reply_or_deadline).actions


def test_reply_first_cancels_the_timer_runs_the_last_activity_and_completes(h):
    instance_id = h.start()
    h.engine.run_until_idle()
    h.clock.advance(timedelta(seconds=30))

    h.raise_reply(instance_id, {"outcome": "ok"})
    h.engine.run_until_idle()

    assert h.activities.names() == ["prepare", "finish"]
    status = h.status(instance_id)
    assert status.runtime_status is OrchestrationRuntimeStatus.Completed
    assert status.output == {"outcome": "replied", "finished": {"done": {"outcome": "ok"}}}
    assert h.engine.next_due_time() is None


def test_a_finished_instance_keeps_its_history_but_not_the_encodings_its_replays_used(h):
    instance_id = h.start()
    h.engine.run_until_idle()
    instance = h.engine.instance(instance_id)
    assert any("_json_texts" in vars(e) for e in instance.history)  # replayed: encoded once, cached

    h.raise_reply(instance_id, {"outcome": "ok"})
    h.engine.run_until_idle()

    assert instance.is_finished
    assert not any("_json_texts" in vars(e) for e in instance.history)
    assert h.status(instance_id).runtime_status is OrchestrationRuntimeStatus.Completed
    assert [e.type for e in instance.history][-1] is EventType.EXECUTION_COMPLETED


def _reachable(root: Any) -> list[Any]:
    """Every object reachable from ``root`` (its attributes, their contents, and so on)."""
    import gc

    seen: dict[int, Any] = {}
    stack = [root]
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, type):
            continue
        seen[id(item)] = item
        stack.extend(gc.get_referents(item))
    return list(seen.values())


def test_a_finished_instance_holds_no_history_events_yet_its_status_still_shows_them(h):
    """Memory grows with the orders in flight: a finished instance's history is kept compressed,
    not as event objects; the status query (the ops API's showHistory) shows the same events."""
    instance_id = h.start()
    h.engine.run_until_idle()
    instance = h.engine.instance(instance_id)
    running = [e for e in _reachable(instance) if isinstance(e, HistoryEvent)]
    assert len(running) == len(instance.history) > 0
    events_so_far = list(instance.history)
    with_history = h.run(h.client.get_status(instance_id, show_history=True, show_history_output=True))
    assert with_history.historyEvents  # while it runs

    h.raise_reply(instance_id, {"outcome": "ok"})
    h.engine.run_until_idle()

    assert instance.is_finished
    assert [e for e in _reachable(instance) if isinstance(e, HistoryEvent)] == []
    history = instance.history
    assert history[: len(events_so_far)] == events_so_far
    assert [e.type for e in history][-1] is EventType.EXECUTION_COMPLETED
    assert h.engine.history_events(instance_id) == len(history) == h.engine.counters.history_events
    finished = h.run(h.client.get_status(instance_id, show_history=True, show_history_output=True))
    assert finished.historyEvents[: len(with_history.historyEvents)] == with_history.historyEvents
    assert finished.historyEvents[-1]["EventType"] == "ExecutionCompleted"
    assert finished.output == {"outcome": "replied", "finished": {"done": {"outcome": "ok"}}}


def test_a_cancelled_timer_still_fires_while_its_instance_runs_and_holds_nothing(h):
    """Cancelling takes a timer out of DurableTask.Core's open tasks (its instance can end), but the
    timer message its ``TimerCreated`` sent is not withdrawn: while the instance runs, its
    ``TimerFired`` comes (the extension ignores it as a duplicate; the SDK reads it)."""
    h.activities.during = lambda name: h.clock.advance(DEADLINE) if name == "finish" else None
    instance_id = h.start()
    h.engine.run_until_idle()
    h.raise_reply(instance_id, {"outcome": "ok"})

    h.engine.run_next()  # the episode that sees the reply: cancels the timer, schedules "finish"
    deadline = T0 + ACTIVITY_TIME + DEADLINE
    assert h.engine.next_due_time() == deadline  # still due
    h.engine.run_next()  # "finish" runs past the deadline
    assert h.engine.fire_due_timers() == 1
    h.engine.run_until_idle()

    instance = h.engine.instance(instance_id)
    assert instance is not None
    fired = [e for e in instance.history if e.type is EventType.TIMER_FIRED]
    assert [e.fields["TimerId"] for e in fired] == [1]
    assert h.status(instance_id).runtime_status is OrchestrationRuntimeStatus.Completed
    assert h.status(instance_id).output["outcome"] == "replied"


def test_a_cancelled_timer_does_not_fire_once_its_instance_ended(h):
    instance_id = h.start()
    h.engine.run_until_idle()
    h.raise_reply(instance_id, {"outcome": "ok"})
    h.engine.run_until_idle()

    assert h.status(instance_id).runtime_status is OrchestrationRuntimeStatus.Completed
    assert h.engine.next_due_time() is None


def test_timer_first_times_out_at_the_deadline_and_a_late_reply_gets_the_410_message(h):
    instance_id = h.start()
    h.engine.run_until_idle()
    h.advance_to_next_timer()

    assert h.engine.fire_due_timers() == 1
    h.engine.run_until_idle()

    status = h.status(instance_id)
    assert status.runtime_status is OrchestrationRuntimeStatus.Completed
    assert status.output == {"outcome": "timed_out", "at": (T0 + ACTIVITY_TIME + DEADLINE).isoformat()}
    assert h.activities.names() == ["prepare"]
    with pytest.raises(Exception, match=r"^Instance with ID order-1:1 is gone: either completed or failed$"):
        h.raise_reply(instance_id, {"outcome": "late"})


def test_a_timer_is_not_due_before_its_time(h):
    h.start()
    h.engine.run_until_idle()
    due = h.engine.next_due_time()
    assert due is not None
    h.clock.set(due - timedelta(microseconds=1))

    assert h.engine.fire_due_timers() == 0
    assert not h.engine.has_work()


def test_raise_event_to_an_unknown_instance_gets_the_404_message(h):
    with pytest.raises(Exception, match=r"^No instance with ID nobody found\.$"):
        h.raise_reply("nobody", {"outcome": "ok"})


def test_get_status_of_an_unknown_instance_has_no_runtime_status(h):
    status = h.status("nobody")
    assert status.runtime_status is None
    assert not status


def test_a_reply_raised_before_the_orchestrator_waits_is_buffered_and_wins(h):
    instance_id = h.start()
    h.engine.run_next()  # first episode: schedules "prepare"
    h.raise_reply(instance_id, {"outcome": "early"})  # while "prepare" has not even run
    with pytest.warns(UserWarning, match="Potential duplicate Task completion"):
        h.engine.run_until_idle()

    assert h.activities.calls[-1] == ("finish", {"prepared": "prepared", "reply": {"outcome": "early"}})
    assert h.status(instance_id).output["outcome"] == "replied"


@pytest.mark.parametrize(("first", "outcome"), [("timer", "timed_out"), ("reply", "replied")])
def test_reply_and_timer_due_together_race_in_arrival_order(h, first, outcome):
    instance_id = h.start()
    h.engine.run_until_idle()
    h.advance_to_next_timer()

    if first == "timer":
        h.engine.fire_due_timers()
        h.raise_reply(instance_id, {"outcome": "at the wire"})  # accepted: the instance still runs
    else:
        h.raise_reply(instance_id, {"outcome": "at the wire"})
        h.engine.fire_due_timers()
    h.engine.run_until_idle()

    status = h.status(instance_id)
    assert status.runtime_status is OrchestrationRuntimeStatus.Completed
    assert status.output["outcome"] == outcome
    assert ("finish" in h.activities.names()) is (outcome == "replied")


def test_a_caught_activity_failure_reaches_the_orchestrator_with_the_activity_name_and_message(h):
    h.activities.failures["flaky"] = 1
    instance_id = h.start("failing_activity_orchestrator", "flaky:1", None)
    h.engine.run_until_idle()

    status = h.status(instance_id)
    assert status.runtime_status is OrchestrationRuntimeStatus.Completed
    assert status.output["first_error"].startswith("Activity function 'flaky' failed: flaky boom")
    assert status.output["second"] == "flaky:2"


def test_an_unhandled_activity_failure_fails_the_orchestration(h, caplog):
    h.activities.failures["flaky"] = 2
    instance_id = h.start("failing_activity_orchestrator", "flaky:1", None)
    with caplog.at_level("WARNING", logger="localrun.durable.engine"):
        h.engine.run_until_idle()
    assert any(
        "orchestration flaky:1 (failing_activity_orchestrator) failed" in r.getMessage()
        and "flaky boom" in r.getMessage()
        for r in caplog.records
    )  # logged with its reason, as the host logs a failed orchestration

    status = h.status(instance_id)
    assert status.runtime_status is OrchestrationRuntimeStatus.Failed
    assert "Activity function 'flaky' failed: flaky boom" in status.output
    with pytest.raises(Exception, match="is gone"):
        h.raise_reply(instance_id, None)


def test_a_host_restart_during_an_activity_drops_its_result_and_runs_it_again(h):
    restarts: list[int] = []

    def restart_once(name: str) -> None:
        if name == "prepare" and not restarts:
            restarts.append(h.engine.restart_host())

    h.activities.during = restart_once
    instance_id = h.start()
    h.engine.run_until_idle()

    assert restarts == [1]
    assert h.activities.names() == ["prepare", "prepare"]
    assert h.engine.counters.activities_redelivered == 1
    instance = h.engine.instance(instance_id)
    assert instance is not None
    assert [e.type for e in instance.history].count(EventType.TASK_COMPLETED) == 1
    assert h.status(instance_id).runtime_status is OrchestrationRuntimeStatus.Running


def test_a_worker_restart_after_a_function_timeout_fails_the_activity_to_its_orchestration(h):
    """A function timeout restarts the worker process (``LocalHost._time_out``): the activity that timed out is
    reported failed to its orchestration (the extension's ``TaskActivityShim``: ``FunctionTimeoutError``), not
    run again as after a host restart; the result it might still return is dropped."""
    failed: list[int] = []

    def time_out_once(name: str) -> None:
        if name == "flaky" and not failed:
            failed.append(h.engine.restart_worker(RUNNING_ACTIVITY.get(), "Timeout value of 00:30:00 exceeded"))

    h.activities.during = time_out_once
    instance_id = h.start("failing_activity_orchestrator", "flaky:1", None)
    h.engine.run_until_idle()

    assert failed == [1]
    # the first call failed (not run again), the sample caught it and made its second call
    assert h.activities.calls == [("flaky", 1), ("flaky", 2)]
    assert h.engine.counters.activities_redelivered == 0
    status = h.status(instance_id)
    assert status.runtime_status is OrchestrationRuntimeStatus.Completed
    assert status.output == {
        "first_error": "Activity function 'flaky' failed: Timeout value of 00:30:00 exceeded"
        " \n FunctionTimeoutException",
        "second": "flaky:2",
    }


def test_a_host_restart_keeps_timers_and_queued_work(h):
    instance_id = h.start()
    h.engine.run_until_idle()
    h.raise_reply(instance_id, {"outcome": "ok"})

    assert h.engine.restart_host() == 0
    h.engine.run_until_idle()

    assert h.status(instance_id).output["outcome"] == "replied"


EXISTS = r"^\{{'Message': 'An Orchestration instance with the status {} already exists\.'\}}$"


def test_start_new_on_a_pending_or_running_instance_fails(h):
    """The extension answers 409 with ``{"Message": ...}``; the SDK raises ``Exception(<that body>)``."""
    h.start()
    with pytest.raises(Exception, match=EXISTS.format("Pending")):
        h.start()
    h.engine.run_next()
    with pytest.raises(Exception, match=EXISTS.format("Running")):
        h.start()


def test_start_new_on_a_finished_instance_replaces_it_and_drops_the_old_executions_work(h):
    instance_id = h.start()
    h.engine.run_next()  # "prepare" queued for the first execution

    def terminated_and_started_again_meanwhile(name: str) -> None:
        h.activities.during = None
        h.run(h.client.terminate(instance_id, "operator"))
        h.engine.run_next()  # the instance's episode takes the termination
        assert h.status(instance_id).runtime_status is OrchestrationRuntimeStatus.Terminated
        assert h.start(data={"orderId": "order-1", "again": True}) == instance_id

    h.activities.during = terminated_and_started_again_meanwhile
    report = h.engine.run_next()  # the first execution's "prepare", which outlives its execution

    assert report is not None
    assert (report.kind, report.outcome) == ("activity", "dropped")
    assert h.status(instance_id).runtime_status is OrchestrationRuntimeStatus.Pending
    h.engine.run_until_idle()
    assert h.activities.calls[-1] == ("prepare", {"orderId": "order-1", "again": True})
    instance = h.engine.instance(instance_id)
    assert instance is not None
    assert [e.type for e in instance.history].count(EventType.EXECUTION_STARTED) == 1


def test_terminate_stops_timers_and_later_results_and_reports_the_reason(h):
    instance_id = h.start()
    h.engine.run_until_idle()

    h.run(h.client.terminate(instance_id, "operator says stop"))
    h.engine.run_until_idle()
    h.run(h.client.terminate(instance_id, "again"))  # 410: ignored, as by the SDK

    status = h.status(instance_id)
    assert status.runtime_status is OrchestrationRuntimeStatus.Terminated
    assert status.output == "operator says stop"
    assert h.engine.next_due_time() is None
    with pytest.raises(Exception, match=r"^No instance with ID 'nobody' found\.$"):
        h.run(h.client.terminate("nobody", "x"))


def test_a_terminated_instance_runs_on_until_its_next_episode_takes_the_termination(h):
    """``TerminateAsync`` sends the instance an ``ExecutionTerminated`` message and answers 202 at once:
    until the instance's next episode processes it, the instance is still Running, a second terminate
    is 202 again, an event is still accepted (and lost), and an activity result that arrived first is
    processed in the same episode, which ends it Terminated with the first reason."""
    instance_id = h.start()
    h.engine.run_until_idle()  # prepared, waiting for the reply or the deadline

    h.run(h.client.terminate(instance_id, "operator says stop"))
    assert h.status(instance_id).runtime_status is OrchestrationRuntimeStatus.Running
    h.run(h.client.terminate(instance_id, "again"))  # still running: accepted again
    h.raise_reply(instance_id, {"outcome": "ok"})  # accepted: the instance is not gone yet
    h.engine.run_until_idle()

    status = h.status(instance_id)
    assert status.runtime_status is OrchestrationRuntimeStatus.Terminated
    assert status.output == "operator says stop"
    assert h.activities.names() == ["prepare"]  # the reply was never acted on


def test_start_new_of_an_unknown_orchestrator_fails_and_a_missing_id_is_generated_deterministically(h):
    with pytest.raises(Exception, match="doesn't exist"):
        h.start("no_such_orchestrator")
    first = h.start(instance_id=None)
    second = Harness().start(instance_id=None)
    assert first == second
    assert len(first) == 32


def test_task_all_runs_both_activities_and_returns_results_in_order(h):
    instance_id = h.start("two_in_parallel_orchestrator", "fan:1", None)
    h.engine.run_until_idle()

    assert h.activities.names() == ["echo", "echo"]
    assert h.status(instance_id).output == ["echo:a", "echo:b"]


def test_counters_and_histories_are_identical_across_two_runs_of_the_same_scenario():
    def scenario() -> tuple[list[str], int, int]:
        run = Harness()
        instance_id = run.start()
        run.engine.run_until_idle()
        run.advance_to_next_timer()
        run.engine.run_until_idle()
        instance = run.engine.instance(instance_id)
        assert instance is not None
        history = [json.dumps(e.to_json(is_played=False)) for e in instance.history]
        return history, run.engine.counters.history_events, run.engine.counters.episodes

    first, second = scenario(), scenario()
    assert first == second
    history, events, episodes = first
    # OS ES TaskScheduled OC | OS TaskCompleted TimerCreated OC | OS TimerFired OC ExecutionCompleted
    assert events == len(history) == 12
    assert episodes == 3


def test_an_action_the_engine_cannot_carry_out_fails_the_instance_with_a_clear_message():
    import azure.durable_functions as df

    def with_retry(context: df.DurableOrchestrationContext) -> Any:
        yield context.call_activity_with_retry("flaky", df.RetryOptions(1000, 3), 1)

    clock = ManualClock(T0)
    engine = DurableEngine({"with_retry": with_retry}, FakeActivities(clock), clock)
    with RealDurableClient(engine) as real:
        instance_id = real.run(real.client.start_new("with_retry", "r:1"))
    engine.run_until_idle()

    instance = engine.instance(instance_id)
    assert instance is not None
    assert instance.status is OrchestrationRuntimeStatus.Failed
    assert instance.output == "The local runner does not support the Durable action CallActivityWithRetry."


def test_orchestrator_code_that_changes_under_an_in_flight_instance_is_detected_as_non_deterministic():
    import azure.durable_functions as df

    first_activity = {"name": "old_step"}

    def changing(context: df.DurableOrchestrationContext) -> Any:
        yield context.call_activity(first_activity["name"], None)
        yield context.call_activity("second", None)

    clock = ManualClock(T0)
    engine = DurableEngine({"changing": changing}, FakeActivities(clock), clock)
    with RealDurableClient(engine) as real:
        instance_id = real.run(real.client.start_new("changing", "c:1"))
    engine.run_next()  # schedules old_step
    first_activity["name"] = "new_step"  # a deployment while the instance is in flight
    engine.run_until_idle()

    instance = engine.instance(instance_id)
    assert instance is not None
    assert instance.status is OrchestrationRuntimeStatus.Failed
    assert instance.output.startswith("Non-Deterministic workflow detected: task 0 is CallActivity old_step")


def test_orchestrator_code_that_no_longer_schedules_a_task_of_the_history_is_non_deterministic():
    """A task the history holds that the replay does not ask for: DurableTask.Core fails the
    orchestration (``HandleTaskScheduledEvent``: "the current replay execution hasn't (yet?) scheduled
    this task"); before, the runner went on and the orchestrator waited for ever."""
    import azure.durable_functions as df

    version = {"both": True}

    def changing(context: df.DurableOrchestrationContext) -> Any:
        if version["both"]:
            yield context.task_all([context.call_activity("first", None), context.call_activity("second", None)])
        else:
            yield context.call_activity("first", None)
            yield context.wait_for_external_event("Go")
        return "done"

    clock = ManualClock(T0)
    engine = DurableEngine({"changing": changing}, FakeActivities(clock), clock)
    with RealDurableClient(engine) as real:
        instance_id = real.run(real.client.start_new("changing", "c:1"))
    engine.run_next()  # schedules first and second
    version["both"] = False  # a deployment while the instance is in flight
    engine.run_until_idle()

    instance = engine.instance(instance_id)
    assert instance is not None
    assert instance.status is OrchestrationRuntimeStatus.Failed
    assert instance.output == (
        "Non-Deterministic workflow detected: task 1 is CallActivity second in the history, "
        "but the orchestrator no longer asks for it."
    )


@pytest.mark.parametrize(("length", "fails"), [(8701, False), (8702, True)])
def test_a_custom_status_over_16_kb_of_utf16_json_fails_the_orchestration(length, fails):
    """``SetCustomStatus`` refuses a custom status whose compact JSON is over 16 KB of UTF-16 (whole KB,
    rounded down): ``"x" * 8702`` is 8704 characters, 17 KB; one character less is 16 KB."""
    import azure.durable_functions as df

    def with_status(context: df.DurableOrchestrationContext) -> Any:
        context.set_custom_status("x" * length)
        yield context.wait_for_external_event("Go")

    clock = ManualClock(T0)
    engine = DurableEngine({"with_status": with_status}, FakeActivities(clock), clock)
    with RealDurableClient(engine) as real:
        instance_id = real.run(real.client.start_new("with_status", "s:1"))
    engine.run_until_idle()

    instance = engine.instance(instance_id)
    assert instance is not None
    if not fails:
        assert instance.status is OrchestrationRuntimeStatus.Running
        assert instance.custom_status == "x" * length
        return
    assert instance.status is OrchestrationRuntimeStatus.Failed
    assert instance.output == (
        "Orchestrator function 'with_status' failed: The UTF-16 size of the JSON-serialized payload must not "
        "exceed 16 KB. The current payload size is 17 KB."
    )


def test_an_orchestrator_that_returns_with_a_timer_pending_stays_running_until_it_fires():
    """DurableTask.Core ends an orchestration only when no task is open: a timer neither fired nor
    cancelled keeps the instance Running after its function returned (``CreateTimer``'s remarks)."""
    import azure.durable_functions as df

    def forgets_its_timer(context: df.DurableOrchestrationContext) -> Any:
        timer = context.create_timer(context.current_utc_datetime + timedelta(minutes=5))
        winner = yield context.task_any([context.call_activity("quick", None), timer])
        return "activity" if winner != timer else "timer"

    clock = ManualClock(T0)
    engine = DurableEngine({"forgets": forgets_its_timer}, FakeActivities(clock), clock)
    with RealDurableClient(engine) as real:
        instance_id = real.run(real.client.start_new("forgets", "f:1"))
    engine.run_until_idle()
    instance = engine.instance(instance_id)
    assert instance is not None
    assert instance.status is OrchestrationRuntimeStatus.Running  # returned "activity", the timer is pending

    due = engine.next_due_time()
    assert due == T0 + timedelta(minutes=5)
    clock.set(due)
    engine.run_until_idle()
    assert (instance.status, instance.output) == (OrchestrationRuntimeStatus.Completed, "activity")


def test_an_orchestrator_that_returns_with_an_activity_running_stays_running_until_it_ends():
    import azure.durable_functions as df

    def leaves_its_call(context: df.DurableOrchestrationContext) -> Any:
        timer = context.create_timer(context.current_utc_datetime + timedelta(seconds=1))
        winner = yield context.task_any([context.call_activity("slow", None), timer])
        return "timer" if winner == timer else "activity"

    clock = ManualClock(T0)
    activities = FakeActivities(clock)  # "slow" takes 2 s: the 1 s timer fires while it runs
    engine = DurableEngine({"leaves": leaves_its_call}, activities, clock)
    with RealDurableClient(engine) as real:
        instance_id = real.run(real.client.start_new("leaves", "l:1"))
    engine.run_next()  # the episode: "slow" queued, the 1 s timer set
    seen: list[OrchestrationRuntimeStatus] = []

    def timer_episode_meanwhile(name: str) -> None:
        engine.fire_due_timers()
        engine.run_next()  # the timer won: the orchestrator returns while "slow" still runs
        instance = engine.instance(instance_id)
        assert instance is not None
        seen.append(instance.status)

    activities.during = timer_episode_meanwhile
    engine.run_until_idle()  # "slow" ends: the next episode completes the instance

    instance = engine.instance(instance_id)
    assert instance is not None
    assert seen == [OrchestrationRuntimeStatus.Running]
    assert (instance.status, instance.output) == (OrchestrationRuntimeStatus.Completed, "timer")


def test_timers_due_together_fire_in_instance_creation_order_and_cancelled_ones_never_fire(h):
    """Timers come off a heap: same fire time → instance creation order; a timer cancelled by the
    reply, or whose instance finished, is skipped; an overwritten instance counts as created anew. (Starts
    answered before the engine is driven again are created in instance id order: test_determinism.)"""
    h.activities.during = lambda name: h.clock.set(T0 + ACTIVITY_TIME)  # every episode at the same time
    ids = []
    for n in (3, 1, 2):
        ids.append(h.start(instance_id=f"order-{n}:1"))
        h.engine.settle_requests()  # created in this order
    h.engine.run_until_idle()  # each ran "prepare" and set its deadline, all at T0 + 2 s + 5 min
    h.raise_reply("order-1:1", {"outcome": "ok"})
    h.engine.run_until_idle()  # order-1 completes: its deadline is cancelled
    h.start(instance_id="order-1:1")  # overwritten: a new execution, created after the others
    h.engine.run_until_idle()
    deadline = T0 + ACTIVITY_TIME + DEADLINE
    assert h.engine.next_due_time() == deadline

    h.clock.set(deadline)
    assert h.engine.fire_due_timers() == 3
    fired = [h.engine.run_next() for _ in range(3)]

    assert [r.instance_id for r in fired if r is not None] == [ids[0], ids[2], "order-1:1"]
    assert h.engine.next_due_time() is None
    assert h.engine.fire_due_timers() == 0
