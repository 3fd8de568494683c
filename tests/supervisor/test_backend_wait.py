"""An expired attempt whose Durable instance the backend has not run yet (still ``Pending`` or ``Running``) is left
to it, not counted (``supervisor/backend_wait.py``): the backend's lateness is not the order's failure. Before, the
supervisor counted every attempt at its deadline, and with the runner's Durable backend delivering a tenth of its
messages 10-300 s late 18 of 150 happy-path orders ended ``Error`` or compensated (seed 18): attempts whose start or
step the backend held past the deadline, three in a row."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus
from azure.functions.timer import TimerRequest

import dependencies
import supervisor.backend_wait
import supervisor.blueprint
from adapters.cosmos.state_store import update_once
from domain import transitions
from domain.compensation import begin_undo, claim_compensation, enter_compensation
from domain.states import ProcessState
from supervisor.backend_wait import read_statuses
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.supervisor.conftest import claimed, expired
from tests.supervisor.test_outage_wait import compensation_round_after_a_charge

pytestmark = pytest.mark.cosmos

WAIT = timedelta(seconds=600)  # SUPERVISOR_BACKEND_WAIT_SECONDS' default


def step_started(states: Any, order_id: str, clock: Any, ago: timedelta) -> None:
    """Attempt 1 of ``order_id`` began its first step; its deadline passed ``ago`` before now."""
    deadline = clock.now() - ago
    began = deadline - timedelta(seconds=60)
    record = claimed(states, order_id, began, began + timedelta(seconds=60))
    update_once(
        states,
        record,
        lambda r: transitions.begin_step(r, f"{order_id}:1", "reserve", "inventory", "req-1", deadline, began),
    )


@pytest.mark.parametrize("status", ["Running", "Pending"])
def test_an_attempt_its_instance_has_not_run_yet_is_left_uncounted(make_ctx, states, clock, status):
    ctx = make_ctx(MAX_FAILURES="3")
    step_started(states, "o1", clock, timedelta(seconds=40))
    before = states.get("o1")

    report = run_supervisor(ctx, ScanState(), statuses={"o1:1": status})

    after = states.get("o1")
    assert after is not None and before is not None
    assert after.version == before.version  # not written
    assert (after.process_state, after.failure_count, after.locked_by) == (ProcessState.PROCESSING, 0, "o1:1")
    assert (report.found, report.left_to_backend, report.recovered) == (1, 1, 0)
    assert report.to_terminate == []  # not terminated either: its instance goes on


def test_a_claim_whose_start_the_backend_holds_is_left_uncounted(make_ctx, states, clock):
    ctx = make_ctx()
    expired(states, "o1", clock, timedelta(seconds=30))  # claimed, never started: the start grace passed

    report = run_supervisor(ctx, ScanState(), statuses={"o1:1": "Pending"})

    record = states.get("o1")
    assert record is not None and record.process_state is ProcessState.PROCESSING and record.failure_count == 0
    assert report.left_to_backend == 1


@pytest.mark.parametrize("status", ["Completed", "Failed", "Terminated", None, "Unread", "Absent"])
def test_an_attempt_whose_instance_ended_or_is_unknown_is_counted_as_before(make_ctx, states, clock, status):
    ctx = make_ctx()
    step_started(states, "o1", clock, timedelta(seconds=40))

    report = run_supervisor(ctx, ScanState(), statuses={"o1:1": status})

    record = states.get("o1")
    assert record is not None and record.process_state is ProcessState.PENDING and record.failure_count == 1
    assert (report.recovered, report.left_to_backend) == (1, 0)


def test_without_statuses_the_supervisor_counts_at_the_deadline(make_ctx, states, clock):
    step_started(states, "o1", clock, timedelta(seconds=40))
    run_supervisor(make_ctx(), ScanState())
    record = states.get("o1")
    assert record is not None and record.failure_count == 1


def test_an_attempt_that_released_itself_is_counted_though_its_instance_still_runs(make_ctx, states, clock):
    ctx = make_ctx()
    step_started(states, "o1", clock, timedelta(seconds=40))
    record = states.get("o1")
    assert record is not None
    update_once(states, record, lambda r: transitions.release_for_retry(r, "o1:1", "reserve", "503 x4", clock.now()))

    report = run_supervisor(ctx, ScanState(), statuses={"o1:1": "Running"})  # ending: its last episode not run yet

    assert report.recovered == 1
    assert states.get("o1").failure_count == 1  # type: ignore[union-attr]


def test_past_the_wait_a_late_instance_is_counted_saying_the_backend_kept_it(make_ctx, states, clock):
    ctx = make_ctx(SUPERVISOR_GRACE_SECONDS="15")
    step_started(states, "o1", clock, WAIT + timedelta(seconds=15))  # the wait ends now

    report = run_supervisor(ctx, ScanState(), statuses={"o1:1": "Running"})

    record = states.get("o1")
    assert record is not None and record.process_state is ProcessState.PENDING and record.failure_count == 1
    assert report.recovered == 1 and report.to_terminate == ["o1:1"]
    assert record.last_error is not None and "Durable backend had not run o1:1 (reserve)" in record.last_error


def test_a_backend_that_never_runs_an_attempt_still_escalates_at_max_failures(make_ctx, states, clock):
    ctx = make_ctx(MAX_FAILURES="2")
    step_started(states, "o1", clock, timedelta(seconds=1))
    scan = ScanState()
    for attempt in (1, 2):
        statuses = {f"o1:{attempt}": "Pending"}
        assert run_supervisor(ctx, scan, statuses=statuses).left_to_backend == 1
        clock.advance(WAIT)
        run_supervisor(ctx, scan, statuses=statuses)
        record = states.get("o1")
        assert record is not None
        if attempt == 1:
            assert record.process_state is ProcessState.PENDING and record.complete_by is not None
            clock.set(record.complete_by)
            update_once(states, record, lambda r: transitions.claim(r, clock.now(), timedelta(seconds=60)))
            clock.advance(timedelta(seconds=61))
    record = states.get("o1")
    assert record is not None and record.process_state is ProcessState.ERROR and record.failure_count == 2


def test_a_wait_of_zero_takes_the_attempt_at_its_deadline(make_ctx, states, clock):
    ctx = make_ctx(SUPERVISOR_BACKEND_WAIT_SECONDS="0")
    step_started(states, "o1", clock, timedelta(seconds=1))
    report = run_supervisor(ctx, ScanState(), statuses={"o1:1": "Running"})
    assert report.recovered == 1


# --- compensation rounds --------------------------------------------------------------------------------------


def round_claimed(states: Any, order_id: str, clock: Any, ago: timedelta) -> str:
    """``order_id`` cancelled before any step and its first compensation round claimed; the round's start grace
    passed ``ago`` before now. Returns the round's instance id."""
    claimed_at = clock.now() - ago - timedelta(seconds=60)
    record = claimed(states, order_id, claimed_at, claimed_at + timedelta(seconds=60))
    owner = f"{order_id}:1"
    record = update_once(states, record, lambda r: enter_compensation(r, owner, "cancelled", claimed_at, owner=owner))
    record = update_once(
        states, record, lambda r: claim_compensation(r, claimed_at, timedelta(seconds=60), 3, "supervisor")
    )
    assert record.locked_by is not None
    return record.locked_by


@pytest.mark.parametrize("status", ["Running", "Pending"])
def test_a_round_its_instance_has_not_run_yet_is_left_uncounted(make_ctx, states, clock, status):
    ctx = make_ctx()
    round_id = round_claimed(states, "o1", clock, timedelta(seconds=30))

    report = run_supervisor(ctx, ScanState(), statuses={round_id: status})

    record = states.get("o1")
    assert record is not None and record.locked_by == round_id and record.failure_count == 0
    assert report.left_to_backend == 1 and report.compensations == [] and report.to_terminate == []


def test_a_round_whose_instance_ended_is_counted_as_before(make_ctx, states, clock):
    ctx = make_ctx()
    round_id = round_claimed(states, "o1", clock, timedelta(seconds=30))

    report = run_supervisor(ctx, ScanState(), statuses={round_id: "Completed"})

    record = states.get("o1")
    assert record is not None and record.locked_by is None and record.failure_count == 1
    assert report.left_to_backend == 0 and report.to_terminate == [round_id]


def test_a_round_past_the_wait_is_counted_saying_the_backend_kept_it(make_ctx, states, clock):
    ctx = make_ctx()
    round_id = round_claimed(states, "o1", clock, WAIT)

    run_supervisor(ctx, ScanState(), statuses={round_id: "Pending"})

    record = states.get("o1")
    assert record is not None and record.locked_by is None and record.failure_count == 1
    assert record.last_error is not None and f"Durable backend had not run {round_id}" in record.last_error


# --- the trigger reads the statuses before it recovers ---------------------------------------------------------


class StatusClient:
    def __init__(self, statuses: dict[str, str], hangs: frozenset[str] = frozenset()) -> None:
        self.statuses = statuses
        self.hangs = hangs
        self.terminated: list[str] = []

    async def get_status(self, instance_id: str) -> DurableOrchestrationStatus:
        if instance_id in self.hangs:
            await asyncio.sleep(3600)
        return DurableOrchestrationStatus(instanceId=instance_id, runtimeStatus=self.statuses[instance_id])

    async def terminate(self, instance_id: str, reason: str) -> None:
        self.terminated.append(instance_id)


def _trigger(functions: Any) -> Any:
    user = functions["supervisor"].func
    return getattr(user, "client_function", None) or user.__wrapped__


def test_the_timer_leaves_an_attempt_its_instance_has_not_run(make_ctx, functions, states, clock, monkeypatch):
    dependencies.use_context(make_ctx())
    monkeypatch.setattr(supervisor.blueprint, "SCAN_STATE", ScanState())
    try:
        step_started(states, "late", clock, timedelta(seconds=20))
        step_started(states, "dead", clock, timedelta(seconds=10))
        round_id = round_claimed(states, "undo", clock, timedelta(seconds=5))
        client = StatusClient({"late:1": "Running", "dead:1": "Completed", round_id: "Pending"})

        asyncio.run(_trigger(functions)(timer=TimerRequest(past_due=False), client=client))
    finally:
        dependencies.use_context(None)

    late, dead = states.get("late"), states.get("dead")
    assert late is not None and late.process_state is ProcessState.PROCESSING and late.failure_count == 0
    assert dead is not None and dead.process_state is ProcessState.PENDING and dead.failure_count == 1
    assert client.terminated == []  # "dead" ended already; "late" is left to run
    undo = states.get("undo")
    assert undo is not None and undo.locked_by == round_id and undo.failure_count == 0  # its start still to come


def test_a_status_read_that_does_not_answer_is_unknown_within_the_bound(monkeypatch):
    monkeypatch.setattr(supervisor.backend_wait, "DURABLE_CALL_TIMEOUT", timedelta(milliseconds=50))
    client = StatusClient({"a:1": "Running", "b:1": "Pending"}, hangs=frozenset({"b:1"}))

    statuses = asyncio.run(read_statuses(client, ["a:1", "b:1", "a:1"]))

    assert statuses == {"a:1": "Running", "b:1": "Unread"}


def test_a_round_taken_past_the_wait_names_the_undo_it_was_at(make_ctx, states, clock):
    """The reason a stuck round is counted ends in the ``CompensationFailed`` alert at the last round: it said the
    backend had not run the round's instance "(its start)" whatever the round had done, a round's record having no
    current step, so an operator read that the round never ran when its undo had begun and then waited on the backend
    (seen in a runner run with a fifth of the Durable messages 1-10 minutes late)."""
    ctx = make_ctx()
    record = compensation_round_after_a_charge(ctx, states, clock)
    round_id = record.locked_by
    assert round_id is not None
    deadline = clock.now() + timedelta(seconds=60)
    update_once(states, record, lambda r: begin_undo(r, round_id, 1, "undo-req", deadline, clock.now()))
    clock.set(deadline + WAIT)  # the undo's deadline and the wait passed, the instance still Running

    run_supervisor(ctx, ScanState(), statuses={round_id: "Running"})

    after = states.get("o1")
    assert after is not None and after.locked_by is None and after.failure_count == 1
    assert after.last_error is not None and f"Durable backend had not run {round_id}" in after.last_error
    assert "its start" not in after.last_error and "charge-payment" in after.last_error, after.last_error
