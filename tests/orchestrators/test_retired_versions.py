"""An upgrade under in-flight attempts: an instance of a retired scheduler version
(``process_order_v1``, ``process_order_v2``) settles what it left at its next replay
(``settle_retired_attempt``: a record it still holds is released to the supervisor at once, an order
it had written ``Processed`` gets its ``Completed``) and ends; the supervisor retries the order under
the current version (orchestrators/retired.py, docs/design.md "Versions")."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df
import pytest
from azure.durable_functions import OrchestrationRuntimeStatus

from adapters.clock import ManualClock
from domain import transitions
from domain.states import ProcessState
from localrun.durable.engine import DurableEngine
from orchestrators import names
from orchestrators.status import FINAL_RETRY_DELAYS, LAST_TRY_REPEATS
from supervisor.recovery import RecoveryAction, recover
from tests.durable_history import History
from tests.orchestrators.support import T0, sample_order
from tests.runtime.harness import RuntimeHarness

V1 = "process_order_v1"
V2 = "process_order_v2"


def test_the_retired_name_is_registered_and_is_not_the_current_scheduler(functions: dict[str, Any]) -> None:
    assert {V1, V2} <= set(names.RETIRED_SCHEDULERS)
    assert names.SCHEDULER not in names.RETIRED_SCHEDULERS
    for name in (names.SCHEDULER, *names.RETIRED_SCHEDULERS):
        assert name in functions, name  # the worker indexed it: an old instance finds its function


def test_a_v1_history_mid_attempt_ends_superseded_and_schedules_nothing(functions: dict[str, Any]) -> None:
    """A v1 attempt recorded by the old code (load, Processing sent, step begun, request sent, waiting
    for the agent's reply) replays on the new app: it ends at once and asks the host for nothing."""
    order = sample_order()
    h = History("o1:1", {"orderId": "o1", "attempt": 1}, start=T0, name=V1)
    h.activity_completed("load_order", {"owned": True, "order": order, "completed": {}, "stepTimeoutSeconds": 60})
    h.activity_completed("publish_status", None, at=T0)
    h.activity_completed("begin_step", {"owned": True}, at=T0)
    h.activity_completed("send_agent_request", None, at=T0)
    h.timer_created_not_fired(T0 + timedelta(seconds=60))
    h.event_raised("AgentReply", {"requestId": "o1:1:charge-payment:payment", "outcome": "succeeded"}, at=T0)

    replayed = h.run(functions[V1].func)

    # its history is the old code's: nothing new is scheduled against it; the instance asks again for
    # the tasks it holds (the extension fails a replay that leaves one out), and continues as new
    assert replayed.error is None
    assert replayed.new_actions == []
    asked = [(a["type"], a.get("functionName"), a.get("isCanceled")) for a in replayed.actions]
    assert asked[1:6] == [
        ("CallActivity", "load_order", None),
        ("CallActivity", "publish_status", None),
        ("CallActivity", "begin_step", None),
        ("CallActivity", "send_agent_request", None),
        ("CreateTimer", None, True),  # the step deadline, cancelled: it does not hold the instance
    ]
    [restart] = [a for a in replayed.actions if a["type"] == "ContinueAsNew"]
    assert json.loads(restart["input"]) == {"orderId": "o1", "attempt": 1, "retiring": True, "answersGiveUp": True}

    fresh = History("o1:1", json.loads(restart["input"]), start=T0, name=V1)
    settling = fresh.run(functions[V1].func)
    assert [(a["type"], a["functionName"]) for a in settling.new_actions] == [
        ("CallActivity", names.SETTLE_RETIRED_ATTEMPT)
    ]
    assert json.loads(settling.new_actions[0]["input"]) == {"orderId": "o1", "instanceId": "o1:1", "attempt": 1}

    fresh.activity_completed(names.SETTLE_RETIRED_ATTEMPT, {"released": True, "completedStatus": None}, at=T0)
    settled = fresh.run(functions[V1].func)
    assert settled.is_done
    assert settled.output == {"result": "Superseded", "version": V1, "released": True}
    assert settled.new_actions == []


def test_a_v2_history_mid_attempt_ends_superseded_and_schedules_nothing(functions: dict[str, Any]) -> None:
    """A v2 attempt recorded by the old code (``load_order`` answered the plan and sent Processing, the
    first step begun, the in-process agent called, racing its deadline) replays on the new app: it
    continues as new with nothing scheduled against the old history, then settles."""
    order = sample_order()
    h = History("o1:2", {"orderId": "o1", "attempt": 2}, start=T0, name=V2)
    plan = {"owned": True, "order": order, "completed": {}, "stepTimeoutSeconds": 60, "statusSent": True}
    h.activity_completed("load_order", plan, at=T0)
    h.activity_completed("begin_step", {"owned": True}, at=T0)
    h.activity_scheduled(names.in_process_agent("inventory"))
    h.timer_created_not_fired(T0 + timedelta(seconds=60))

    replayed = h.run(functions[V2].func)

    assert replayed.error is None
    assert replayed.new_actions == []
    [restart] = [a for a in replayed.actions if a["type"] == "ContinueAsNew"]
    assert json.loads(restart["input"]) == {"orderId": "o1", "attempt": 2, "retiring": True, "answersGiveUp": True}
    fresh = History("o1:2", json.loads(restart["input"]), start=T0, name=V2)
    settling = fresh.run(functions[V2].func)
    assert [a["functionName"] for a in settling.new_actions] == [names.SETTLE_RETIRED_ATTEMPT]
    fresh.activity_completed(names.SETTLE_RETIRED_ATTEMPT, {"released": True, "completedStatus": None}, at=T0)
    assert fresh.run(functions[V2].func).output == {"result": "Superseded", "version": V2, "released": True}


def test_a_retired_attempt_that_had_written_processed_sends_completed_and_retries_it_if_it_fails(
    functions: dict[str, Any],
) -> None:
    fresh = History("o1:1", {"orderId": "o1", "attempt": 1, "retiring": True}, start=T0, name=V1)
    fresh.activity_completed(names.SETTLE_RETIRED_ATTEMPT, {"released": False, "completedStatus": False}, at=T0)
    retrying = fresh.run(functions[V1].func)
    assert [(a["type"], a.get("functionName")) for a in retrying.new_actions] == [
        ("CallActivity", names.PUBLISH_STATUS)
    ]
    assert json.loads(retrying.new_actions[0]["input"])["status"] == "Completed"


def test_a_retired_attempts_completed_whose_last_try_dies_is_repeated_then_logged_lost(
    functions: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """The execution a retired instance continues as is this code's from its first event, so its ``Completed`` is
    sent as any attempt's: a last try that dies (its worker killed at ``functionTimeout``) is repeated after each of
    ``LAST_TRY_REPEATS``, then logged ``LastTryLost`` (red team rt62b). Before, ``continue_as_new`` kept the old
    input, without ``answersGiveUp``: the killed last try ended the timers, the status dropped with nothing logged."""
    h = History("o1:1", {"orderId": "o1", "attempt": 1}, start=T0, name=V1)
    [restart] = [a for a in h.run(functions[V1].func).actions if a["type"] == "ContinueAsNew"]
    fresh = History("o1:1", json.loads(restart["input"]), start=T0, name=V1)
    tries: list[dict[str, Any]] = []

    def activity(name: str, data: dict[str, Any]) -> Any:
        if name == names.SETTLE_RETIRED_ATTEMPT:
            return {"released": False, "completedStatus": False}  # Processed written, its one try failed
        assert name == names.PUBLISH_STATUS
        tries.append(data)
        raise RuntimeError("Timeout value of 00:30:00 was exceeded by function: Functions.publish_status")

    with caplog.at_level(logging.INFO):
        output = fresh.play(functions[V1].func, activity)

    assert output == {"result": "Superseded", "version": V1, "released": False}
    assert len(tries) == len(FINAL_RETRY_DELAYS) + 1 + len(LAST_TRY_REPEATS)
    assert [t.get("answersGiveUp") for t in tries[-1 - len(LAST_TRY_REPEATS) :]] == [True] * (1 + len(LAST_TRY_REPEATS))
    [lost] = [r for r in caplog.records if getattr(r, "event", None) == "LastTryLost"]
    assert (vars(lost)["orderId"], vars(lost)["status"]) == ("o1", "Completed")


def test_an_instance_in_flight_at_the_upgrade_replays_under_the_extensions_rules(functions: dict[str, Any]) -> None:
    """Through the runner's Durable engine, which holds a replay to the extension's rules: a v2 attempt
    started by the old code (two activities done, the in-process agent racing its deadline) replays
    under the retired code when the agent's result arrives. The extension matches every task of the
    history against the replay's actions: the retired code asks for them again (the timer cancelled),
    so the instance continues as new and settles. Before, it asked for nothing and the extension
    failed it as non-deterministic ("the current replay execution hasn't (yet?) scheduled this task"):
    its record waited for its step deadline, and an order it had written Processed never got its
    Completed."""
    agent = names.in_process_agent("inventory")

    def old_v2(context: Any) -> Any:  # what process_order_v2 scheduled, by name and kind
        yield context.call_activity("load_order", None)
        yield context.call_activity("begin_step", None)
        deadline = context.create_timer(context.current_utc_datetime + timedelta(seconds=60))
        yield context.task_any([context.call_activity(agent, None), deadline])
        return "the old code's end"

    # what the host invokes: the function registered under the name, taking the context JSON
    deployed = {"handle": df.Orchestrator.create(old_v2)}

    def process_order_v2(context_json: str) -> Any:
        return deployed["handle"](context_json)

    def run_activity(name: str, value: Any) -> Any:
        if name == agent:
            deployed["handle"] = functions[V2].func  # the upgrade lands while the agent runs
        if name == names.SETTLE_RETIRED_ATTEMPT:
            return {"released": True, "completedStatus": None}
        return {"owned": True}

    clock = ManualClock(T0)
    engine = DurableEngine({V2: process_order_v2}, run_activity, clock)
    engine.start(V2, "o1:2", json.dumps({"orderId": "o1", "attempt": 2}))
    engine.run_until_idle()

    instance = engine.instance("o1:2")
    assert instance is not None
    assert instance.status is OrchestrationRuntimeStatus.Completed, instance.output
    assert instance.output == {"result": "Superseded", "version": V2, "released": True}
    assert engine.next_due_time() is None  # the old deadline was cancelled with the old execution


@pytest.fixture
def harness(cosmos_db: Any) -> Iterator[RuntimeHarness]:
    made = RuntimeHarness(cosmos_db=cosmos_db)
    yield made
    made.close()


@pytest.mark.cosmos
@pytest.mark.parametrize("version", [V1, V2])
def test_an_in_flight_retired_instance_releases_its_record_to_the_supervisor(
    harness: RuntimeHarness, version: str
) -> None:
    """Through the real runtime: the v1 or v2 instance releases the record it held (``completeBy`` = now,
    still its ``lockedBy``: only the supervisor moves it) and completes ``Superseded``; the supervisor's
    next run retries the order, without waiting out the start grace or a step deadline."""
    ctx = harness.ctx
    assert ctx is not None
    now = harness.clock.now()
    ctx.orders.create_or_verify(sample_order("o-v1"))
    ctx.states.create(transitions.new_record("o-v1", "client-statuses", now))
    pending = ctx.states.get("o-v1")
    assert pending is not None
    claimed = ctx.states.replace(transitions.claim(pending, now, ctx.settings.start_grace))
    assert claimed.locked_by == "o-v1:1"

    harness.host.engine.start(version, claimed.locked_by, json.dumps({"orderId": "o-v1", "attempt": 1}))
    harness.run_until_idle(timedelta(seconds=1))

    instance = harness.host.engine.instance("o-v1:1")
    assert instance is not None and instance.is_finished
    assert instance.output == {"result": "Superseded", "version": version, "released": True}
    released = ctx.states.get("o-v1")
    assert released is not None
    assert (released.process_state, released.locked_by) == (ProcessState.PROCESSING, "o-v1:1")
    assert released.complete_by is not None and released.complete_by <= harness.clock.now()
    assert released.last_error == "superseded by an upgrade"
    assert harness.broker.contents("client-statuses") == []  # nothing said to the submitter

    recovered = recover(ctx, released)
    assert recovered.action is RecoveryAction.RECOVERED
    assert recovered.record is not None
    assert (recovered.record.process_state, recovered.record.failure_count) == (ProcessState.PENDING, 1)


def _v1_points() -> dict[str, History]:
    """A ``process_order_v1`` attempt at each point an upgrade can find it (the tasks the old code
    scheduled, in its order: ``load_order``, ``publish_status``, per step ``begin_step`` and the agent, a
    deadline timer raced by the reply)."""
    order = sample_order()
    loaded = {"owned": True, "order": order, "completed": {}, "stepTimeoutSeconds": 60}
    reply = {"requestId": "o1:1:charge-payment:payment", "outcome": "succeeded"}
    points: dict[str, History] = {}

    def fresh() -> History:
        return History("o1:1", {"orderId": "o1", "attempt": 1}, start=T0, name=V1)

    h = fresh()
    h.activity_scheduled("load_order")
    points["its first activity running"] = h
    h = fresh()
    h.activity_completed("load_order", loaded)
    h.activity_scheduled("publish_status")
    points["an activity running"] = h
    h = fresh()
    h.activity_completed("load_order", loaded)
    h.activity_completed("publish_status", None)
    h.activity_completed("begin_step", {"owned": True})
    h.activity_scheduled(names.in_process_agent("inventory"))
    h.timer_created_not_fired(T0 + timedelta(seconds=60))
    points["an in-process agent racing its deadline"] = h
    h = fresh()
    h.activity_completed("load_order", loaded)
    h.activity_completed("publish_status", None)
    h.activity_completed("begin_step", {"owned": True})
    h.activity_completed("send_agent_request", None)
    h.timer_created_not_fired(T0 + timedelta(seconds=60))
    points["a reply's wait racing its deadline"] = h
    h = fresh()
    h.activity_completed("load_order", loaded)
    h.activity_completed("publish_status", None)
    h.activity_completed("begin_step", {"owned": True})
    h.activity_completed("send_agent_request", None)
    h.timer_created_not_fired(T0 + timedelta(seconds=60))
    h.event_raised("AgentReply", reply, at=T0 + timedelta(seconds=5))
    h.event_raised("AgentReply", reply, at=T0 + timedelta(seconds=6))  # and a duplicate
    points["replied, and a duplicate"] = h
    h = fresh()
    h.activity_completed("load_order", loaded)
    h.activity_completed("publish_status", None)
    h.activity_completed("await_review", {"owned": True})
    review = h.timer_created_not_fired(T0 + timedelta(days=1))
    h.event_raised(names.REVIEW_DECISION_EVENT, {"reviewId": "o1:1:charge-payment:review:1", "action": "retry"})
    h.fire_timer(review, T0 + timedelta(days=1))
    points["a review answered, then its timer"] = h
    h = fresh()
    h.activity_completed("load_order", loaded)
    h.activity_completed("publish_status", None)
    h.timer_fired(T0 + timedelta(seconds=10))  # a status retry's timer
    h.activity_scheduled(names.REQUEST_COMPENSATION)
    points["handing over to compensation"] = h
    return points


@pytest.mark.parametrize("point", list(_v1_points()))
def test_the_first_retire_replay_matches_the_history_at_every_point_of_an_attempt(
    functions: dict[str, Any], point: str
) -> None:
    """Read as the extension reads it (``localrun.durable.action_replay``): nothing non-deterministic,
    nothing new scheduled; it continues as new once one of the old tasks is done and none still runs
    (an activity of the old code still running holds it until it ends; a timer of the old code never
    does: it is cancelled)."""
    history = _v1_points()[point]

    replayed = history.run(functions[V1].func)

    assert replayed.error is None
    assert replayed.extension.non_determinism is None
    assert replayed.new_actions == []
    running = point in ("its first activity running", "an activity running", "an in-process agent racing its deadline")
    running = running or point == "handing over to compensation"
    continues = point != "its first activity running"
    assert bool([a for a in replayed.actions if a["type"] == "ContinueAsNew"]) == continues
    assert replayed.extension.reached_end == continues
    assert replayed.extension.open_tasks == running
