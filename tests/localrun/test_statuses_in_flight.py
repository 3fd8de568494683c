"""A status the app is still trying to deliver when the run's horizon cuts it is not missing: its give-up
(``StatusUndelivered``, after about six hours of tries on a full queue) is not due yet. Fuzz seed 8325 (300 orders):
submitter 4's queue full from 278 s to the end, ``ord-00144`` stored late and ``Processed``, its ``Completed`` with a
try left at the 8-hour horizon on its attempt's timers: ``missing_statuses`` 1. The report names such a status
(``statuses_in_flight_at_end``) instead; one whose orchestration finished without delivering it nor giving it up
still counts, and so does any in a run that was not cut."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta

import pytest
from azure.durable_functions import OrchestrationRuntimeStatus

from localrun.durable.history import HistoryEvent, execution_started, task_completed, task_failed, task_scheduled
from localrun.durable.instance import Instance
from localrun.profile import Profile
from localrun.report import build_report, summary
from localrun.simulation import START, SimulationConfig, SimulationResult, run_simulation
from localrun.statuses_in_flight import statuses_in_flight

# one submitter, its status queue full for good from the start: every status is tried for hours
FULL_FOR_GOOD = {"reply_queues": 1, "status_queues": {"refusing": [{"submitter": 1, "error": "quota_exceeded"}]}}


@pytest.fixture(scope="module")
def cut() -> SimulationResult:
    """Three orders, all ``Processed`` within minutes; the horizon (40 minutes) cuts the run while their statuses
    are still tried (the queue full: ``Received`` on its courier, ``Completed`` on the attempt's timers)."""
    config = SimulationConfig(orders=3, seed=1, profile=Profile.parse(FULL_FOR_GOOD), horizon=timedelta(minutes=40))
    return run_simulation(config)


def test_a_status_still_tried_at_the_horizon_is_named_not_missing(cut: SimulationResult) -> None:
    report = build_report(cut)
    assert report["horizon_reached"] is True and report["final_states"]["Processed"] == 3
    assert report["status_messages"] == 0  # the queue took none
    assert report["invariants"]["missing_statuses"] == 0  # 3 before
    named = report["statuses_in_flight_at_end"]
    for order_id in cut.workload.orders:
        assert f"{order_id}: Completed" in named and f"{order_id}: Received" in named
    assert "statuses still tried at the end" in summary(report) and named[0] in summary(report)


def test_a_status_whose_orchestration_finished_without_it_still_counts(cut: SimulationResult) -> None:
    """The same evidence, but each orchestration that was trying a status finished (its courier or attempt ended
    without delivering the status or giving it up): nothing tries it any more, and no alert stands for it."""
    running = [i for i in cut.host.engine.instances() if not i.is_finished]
    assert running
    try:
        for instance in running:
            instance.status = OrchestrationRuntimeStatus.Completed
        assert statuses_in_flight(cut.host.engine.instances(), {}) == set()
        report = build_report(cut)
    finally:
        for instance in running:
            instance.status = OrchestrationRuntimeStatus.Running
    assert report["invariants"]["missing_statuses"] == 3 and report["statuses_in_flight_at_end"] == []


def test_a_run_not_cut_by_its_horizon_excuses_nothing(cut: SimulationResult) -> None:
    report = build_report(dataclasses.replace(cut, horizon_reached=False))
    assert report["invariants"]["missing_statuses"] == 3 and report["statuses_in_flight_at_end"] == []


def _instance(
    name: str, tried: str | None, answer: HistoryEvent | None, *, timer: bool, input_status: str = "Completed"
) -> Instance:
    """An orchestration still running whose last activity is a ``publish_status`` try of ``tried`` (None: none yet),
    answered ``answer`` (None: not yet), with a timer pending (``timer``) or not."""
    status = {"orderId": "a", "status": input_status, "attempt": 1}
    instance = Instance("i", name, 1, json.dumps(status), START, START, OrchestrationRuntimeStatus.Running)
    events = [execution_started(START, name, json.dumps(status))]
    if tried is not None:
        events.append(task_scheduled(START, 7, "publish_status", json.dumps({**status, "status": tried})))
    if answer is not None:
        events.append(answer)
    instance.append_history(events)
    if timer:
        instance.pending_timers[8] = START + timedelta(hours=2)
    return instance


def _answered(answer: object) -> HistoryEvent:
    return task_completed(START, 7, json.dumps(answer))


def test_what_counts_as_a_status_still_tried() -> None:
    """Unit level: a try not answered yet, or one that failed, was refused or could not say the ``Received`` first
    with its next try's timer pending; a courier not run yet. Not: a try sent or given up, one failed with no timer
    pending, a progress status, a failure's status (the record owes it: ``owed_at_end``), another activity."""
    failed = task_failed(START, 7, "SendError")
    still = [
        _instance("process_order_v4", "Completed", None, timer=False),
        _instance("process_order_v4", "Completed", failed, timer=True),
        _instance("process_order_v4", "Completed", _answered({"refused": True, "error": ""}), timer=True),
        _instance("process_order_v4", "Completed", _answered({"unsent": "Received", "error": ""}), timer=True),
        _instance("deliver_status_v1", None, None, timer=False, input_status="CancellationRejected"),
    ]
    expected = [{("a", "Completed")}] * 4 + [{("a", "CancellationRejected")}]
    assert [statuses_in_flight([i], {}) for i in still] == expected
    ended = [
        _instance("process_order_v4", "Completed", _answered(None), timer=True),
        _instance("process_order_v4", "Completed", _answered({"givenUp": True, "error": ""}), timer=True),
        _instance("process_order_v4", "Completed", failed, timer=False),
        _instance("process_order_v4", "Processing", failed, timer=True),
        _instance("process_order_v4", "Failed", failed, timer=True),
        _instance("process_order_v4", None, None, timer=True),
    ]
    assert [statuses_in_flight([i], {}) for i in ended] == [set()] * len(ended)
    # a try of a status says the Received its record still owes first: a try of that Received too
    owing = {"a": {"receivedOwed": "2026-01-01T08:00:00Z"}}
    assert statuses_in_flight([still[1]], owing) == {("a", "Completed"), ("a", "Received")}
