"""A Durable outage at a start must not cost the order an attempt: an expired attempt that never began and whose
instance the backend does not know (the SDK's status read answered 404: its ``start_new`` failed) is released
uncounted (``supervisor.recovery``, ``transitions.start_missed``), up to ``MAX_STARTS_MISSED`` in a row; one whose
status cannot be read (the same outage failing the read: a 500) is left to a later run, up to
``SUPERVISOR_BACKEND_WAIT_SECONDS``. Before, both were counted as missed deadlines: with the runner's Durable API
failing 3-8 s of every 12 s (``durable.outages``), 32 of 100 orders ended Error (seed 11), each paging
``RetriesExhausted``. A start that can never succeed still ends in Error and pages, bounded."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from azure.functions.timer import TimerRequest

import dependencies
import supervisor.blueprint
from adapters.cosmos.state_store import update_once
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain import transitions
from domain.compensation import ROUND_BACKED_OFF, ROUND_START_MISSED, begin_undo
from domain.states import ProcessState
from localrun.durable.extension_api.handlers import json_answer
from supervisor.backend_wait import ABSENT, UNREAD, read_statuses
from supervisor.operator import compensate_action
from supervisor.run import Due, find_due, held_instances, run_supervisor
from supervisor.scan import ScanState
from tests.notifications.courier_clients import courier_client
from tests.supervisor.conftest import claimed, expired, expired_in_a_step
from tests.supervisor.test_backend_wait import round_claimed
from tests.supervisor.test_outage_wait import compensation_round_after_a_charge

pytestmark = pytest.mark.cosmos

ORCHESTRATOR = "process_order_v3"
WAIT = timedelta(seconds=600)  # SUPERVISOR_BACKEND_WAIT_SECONDS' default
# what the extension's HttpApiHandler answers when its storage fails (the runner's durable.outages)
STORAGE_FAILING = json_answer(500, {"Message": "Something went wrong", "ExceptionMessage": "storage timeout"})


def test_the_status_read_tells_an_unknown_instance_from_a_failing_extension() -> None:
    """The SDK's ``get_status`` returns the same empty status for a 404 and a 500; the HTTP code the read notes tells
    them apart (``orchestrators.raise_events.read_status``; a 500 without the error object too:
    ``test_redteam_status_500_without_error_object.py``)."""
    with courier_client(ORCHESTRATOR) as (_engine, real):
        real.run(real.client.start_new(ORCHESTRATOR, "o1:1", {}))
        assert real.run(read_statuses(real.client, ["o1:1", "o2:1"])) == {"o1:1": "Pending", "o2:1": ABSENT}
        real.api.before_answer = lambda method, path: STORAGE_FAILING
        assert real.run(read_statuses(real.client, ["o1:1", "o2:1"])) == {"o1:1": UNREAD, "o2:1": UNREAD}


def test_an_attempt_the_backend_never_had_is_released_uncounted(make_ctx, states, clock, caplog):
    ctx = make_ctx(MAX_FAILURES="3")
    expired(states, "o1", clock, timedelta(seconds=5))  # claimed, its start failed: the start grace passed

    report = run_supervisor(ctx, ScanState(), statuses={"o1:1": ABSENT})

    record = states.get("o1")
    assert record is not None and record.process_state is ProcessState.PENDING
    assert (record.failure_count, record.starts_missed, record.locked_by) == (0, 1, None)
    assert record.history[-1].event == transitions.START_MISSED
    assert record.complete_by is not None and record.complete_by > clock.now()  # after a backoff
    assert (report.starts_missed, report.recovered, report.escalated) == (1, 0, 0)
    assert report.to_terminate == ["o1:1"]  # a start that landed after all ends there (fenced anyway)
    [event] = [r for r in caplog.records if getattr(r, "event", None) == "SupervisorStartMissed"]
    assert getattr(event, "startsMissed", None) == 1


def test_an_attempt_that_began_is_counted_though_its_instance_is_unknown(make_ctx, states, clock):
    """Its instance did work (a step begun): an instance purged or lost is the attempt's failure as before."""
    ctx = make_ctx()
    expired_in_a_step(states, "o1", clock, timedelta(seconds=5))

    run_supervisor(ctx, ScanState(), statuses={"o1:1": ABSENT})

    record = states.get("o1")
    assert record is not None and (record.failure_count, record.starts_missed) == (1, 0)


def test_a_status_unread_on_an_attempt_that_never_began_is_left_within_the_wait(make_ctx, states, clock):
    ctx = make_ctx()
    before = expired(states, "o1", clock, timedelta(seconds=5))

    report = run_supervisor(ctx, ScanState(), statuses={"o1:1": UNREAD})

    after = states.get("o1")
    assert after is not None and after.version == before.version  # not written, not counted
    assert report.left_to_backend == 1 and report.to_terminate == []

    clock.advance(WAIT)  # still unreadable past the wait: counted as before
    run_supervisor(ctx, ScanState(), statuses={"o1:1": UNREAD})
    after = states.get("o1")
    assert after is not None and after.process_state is ProcessState.PENDING and after.failure_count == 1


def test_a_wait_of_zero_still_reads_and_releases_a_missed_start(make_ctx, states, clock):
    ctx = make_ctx(SUPERVISOR_BACKEND_WAIT_SECONDS="0")
    expired(states, "o1", clock, timedelta(seconds=5))
    scan = ScanState()
    due = find_due(ctx, scan)
    assert held_instances(ctx, due) == ["o1:1"]

    run_supervisor(ctx, scan, due, {"o1:1": ABSENT})

    record = states.get("o1")
    assert record is not None and (record.failure_count, record.starts_missed) == (0, 1)


def _next_claim(states: Any, clock: Any) -> None:
    """The order claimed again once its not-before time passed, and that claim's start grace passed too."""
    record = states.get("o1")
    assert record is not None and record.complete_by is not None
    clock.set(record.complete_by)
    update_once(states, record, lambda r: transitions.claim(r, clock.now(), timedelta(seconds=60)))
    clock.advance(timedelta(seconds=61))


def test_a_start_that_can_never_succeed_still_ends_in_error_and_pages(make_ctx, states, clock, sender):
    """The orchestrator is not registered (the extension answers every start 400): each attempt's instance is
    unknown to the backend. ``MAX_STARTS_MISSED`` attempts are released uncounted, then each counts: Error at the
    ``MAX_FAILURES``-th, with one ``RetriesExhausted`` page saying that the backend never had it."""
    ctx = make_ctx(MAX_FAILURES="3")
    expired(states, "o1", clock, timedelta(seconds=1))
    scan = ScanState()
    runs = 0
    with courier_client(ORCHESTRATOR) as (_engine, real):
        while True:
            record = states.get("o1")
            assert record is not None
            with pytest.raises(Exception, match=r"doesn.t exist, is disabled, or is not an orchestrator"):
                real.run(real.client.start_new("not_registered", record.locked_by, {}))  # what the starter met
            due = find_due(ctx, scan)
            statuses = real.run(read_statuses(real.client, held_instances(ctx, due)))
            assert statuses == {record.locked_by: ABSENT}
            run_supervisor(ctx, scan, due, statuses)
            runs += 1
            record = states.get("o1")
            assert record is not None
            if record.process_state is not ProcessState.PENDING:
                break
            _next_claim(states, clock)
            assert runs < 20
    assert record.process_state is ProcessState.ERROR
    assert runs == transitions.MAX_STARTS_MISSED + 3
    assert (record.failure_count, record.starts_missed) == (3, transitions.MAX_STARTS_MISSED)
    assert "the Durable backend never had o1:8" in (record.last_error or "")
    alerts = [json.loads(m.body) for q, m in sender.sent if q == OPERATOR_ALERTS_QUEUE]
    assert [a["kind"] for a in alerts] == ["RetriesExhausted"]


def _trigger(functions: Any) -> Any:
    user = functions["supervisor"].func
    return getattr(user, "client_function", None) or user.__wrapped__


def test_the_timer_through_a_durable_outage_costs_the_order_no_attempt(make_ctx, functions, states, clock, monkeypatch):
    """The supervisor's timer with the SDK's real client: while the extension answers 500 (its storage failing) the
    claim whose start failed is left; once it answers again, 404, the attempt is released uncounted."""
    dependencies.use_context(make_ctx())
    monkeypatch.setattr(supervisor.blueprint, "SCAN_STATE", ScanState())
    try:
        expired(states, "o1", clock, timedelta(seconds=5))
        with courier_client(ORCHESTRATOR) as (_engine, real):
            trigger = _trigger(functions)
            real.api.before_answer = lambda method, path: STORAGE_FAILING
            real.run(trigger(timer=TimerRequest(past_due=False), client=real.client))
            record = states.get("o1")
            assert record is not None and (record.process_state, record.locked_by) == (ProcessState.PROCESSING, "o1:1")

            real.api.before_answer = lambda method, path: None  # the outage is over
            real.run(trigger(timer=TimerRequest(past_due=False), client=real.client))
    finally:
        dependencies.use_context(None)
    record = states.get("o1")
    assert record is not None and record.process_state is ProcessState.PENDING
    assert (record.failure_count, record.starts_missed) == (0, 1)


def test_the_reads_are_bounded_and_concurrent_as_before() -> None:
    """A read that raises (the host unreachable) is ``UNREAD``, not ``ABSENT``: only an answer says absent."""

    class Unreachable:
        async def get_status(self, instance_id: str) -> Any:
            raise Exception("Cannot connect to host localhost:7071")

    assert asyncio.run(read_statuses(Unreachable(), ["o1:1"])) == {"o1:1": UNREAD}


# --- compensation rounds ----------------------------------------------------------------------------------------


def test_a_round_the_backend_never_had_is_released_uncounted(make_ctx, states, clock, caplog):
    """A round whose start failed was a stuck round, counted: ``MAX_FAILURES`` such rounds made the order
    ``CompensationFailed``, paged, though no undo ever ran."""
    ctx = make_ctx()
    round_id = round_claimed(states, "o1", clock, timedelta(seconds=5))
    before = states.get("o1")
    assert before is not None

    report = run_supervisor(ctx, ScanState(), statuses={round_id: ABSENT})

    record = states.get("o1")
    assert record is not None and record.process_state is ProcessState.COMPENSATING
    assert (record.locked_by, record.failure_count, record.starts_missed) == (None, before.failure_count, 1)
    assert record.history[-1].event == ROUND_START_MISSED
    assert report.to_terminate == [round_id] and report.compensations == []
    [event] = [r for r in caplog.records if getattr(r, "event", None) == "SupervisorCompensationStartMissed"]
    assert getattr(event, "startsMissed", None) == 1


def test_a_round_whose_status_is_unread_is_left_and_one_that_began_is_counted(make_ctx, states, clock):
    ctx = make_ctx()
    round_id = round_claimed(states, "o2", clock, timedelta(seconds=5))
    report = run_supervisor(ctx, ScanState(), statuses={round_id: UNREAD})
    record = states.get("o2")
    assert record is not None and record.locked_by == round_id and report.left_to_backend == 1

    claimed_round = compensation_round_after_a_charge(ctx, states, clock)
    owner = claimed_round.locked_by
    assert owner is not None
    deadline = clock.now() + timedelta(seconds=60)
    began = update_once(states, claimed_round, lambda r: begin_undo(r, owner, 1, "undo-req", deadline, clock.now()))
    clock.set(deadline + timedelta(seconds=1))
    run_supervisor(ctx, ScanState(), statuses={owner: ABSENT, round_id: UNREAD})
    record = states.get(began.order_id)
    assert record is not None and record.starts_missed == 0 and record.history[-1].event == ROUND_BACKED_OFF


def _rounds_never_started(ctx: Any, states: Any, clock: Any) -> Any:
    """Order o1's compensation rounds, each start failed (its instance unknown to the backend), until the
    supervisor stops claiming them: the record then."""
    scan = ScanState()
    runs = 0
    with courier_client(ORCHESTRATOR) as (_engine, real):
        while True:
            due = find_due(ctx, scan)
            statuses = real.run(read_statuses(real.client, held_instances(ctx, due)))
            assert set(statuses.values()) <= {ABSENT}
            run_supervisor(ctx, scan, due, statuses)  # releases, or counts; a later run claims the next round
            runs += 1
            record = states.get("o1")
            assert record is not None
            if record.process_state is not ProcessState.COMPENSATING:
                break
            clock.set(max(clock.now(), record.complete_by or clock.now()) + timedelta(seconds=61))
            assert runs < 40
    return record


def test_a_round_that_can_never_start_still_ends_compensation_failed_and_pages(make_ctx, states, clock, sender):
    ctx = make_ctx(MAX_FAILURES="3")
    round_claimed(states, "o1", clock, timedelta(seconds=5))
    record = _rounds_never_started(ctx, states, clock)
    assert record.process_state is ProcessState.COMPENSATION_FAILED
    assert record.starts_missed == transitions.MAX_STARTS_MISSED
    assert "the Durable backend never had" in (record.last_error or "")
    alerts = [json.loads(m.body) for q, m in sender.sent if q == OPERATOR_ALERTS_QUEUE]
    assert [a["kind"] for a in alerts] == ["CompensationFailed"]


def test_an_operators_compensate_gives_the_next_rounds_their_own_run_of_missed_starts(make_ctx, states, clock, sender):
    """Rounds that could never start made the order ``CompensationFailed`` with ``MAX_STARTS_MISSED`` misses on its
    record; the operator has the task hub fixed and compensates again. A Durable blip failing the next round's
    start is then released uncounted, as for any first round (``enter_compensation`` starts the misses afresh, as
    it starts the rounds' failures). Before, the misses stayed on the record: that round was counted at once, and
    ``MAX_FAILURES`` such blips made the order ``CompensationFailed`` again, paged, though no undo ran."""
    ctx = make_ctx(MAX_FAILURES="3")
    round_claimed(states, "o1", clock, timedelta(seconds=5))
    failed = _rounds_never_started(ctx, states, clock)
    assert failed.process_state is ProcessState.COMPENSATION_FAILED
    assert failed.starts_missed == transitions.MAX_STARTS_MISSED

    compensate_action(ctx, "o1", "ops@example.com", "task hub fixed")
    scan = ScanState()
    run_supervisor(ctx, scan)  # claims the next round; its start fails (a blip)
    claimed_round = states.get("o1")
    assert claimed_round is not None and claimed_round.locked_by is not None
    clock.advance(timedelta(seconds=61))

    run_supervisor(ctx, scan, statuses={claimed_round.locked_by: ABSENT})

    record = states.get("o1")
    assert record is not None and record.process_state is ProcessState.COMPENSATING
    assert record.history[-1].event == ROUND_START_MISSED
    assert (record.failure_count, record.starts_missed) == (0, 1)


def test_a_round_due_since_the_run_read_its_statuses_is_left_for_a_run_that_reads_its_own(make_ctx, states, clock):
    """The run reads the statuses of what it found due, then recovers (minutes under a slow Cosmos DB); recoveries that
    hand an order to compensation make the claims read the rounds' page again, which now holds rounds due since, their
    statuses never read. A round whose start failed was then counted as a stuck round (its instance unknown, not
    read); now it is left as one whose status could not be read, and the next run, which reads it, releases it
    uncounted."""
    ctx = make_ctx(MAX_FAILURES="3")
    began = clock.now() - timedelta(seconds=65)
    record = claimed(states, "o1", began, began + timedelta(seconds=60))
    record = update_once(  # a reservation whose outcome is unknown: compensated at its third failure
        states,
        record,
        lambda r: transitions.begin_step(
            r, "o1:1", "reserve-inventory", "inventory", "req-1", began + timedelta(seconds=60), began
        ),
    )
    states.replace(replace(record, failure_count=2))
    round_id = round_claimed(states, "o2", clock, timedelta(seconds=-30))  # due 30 s from now
    scan = ScanState()
    due = find_due(ctx, scan)
    assert due.rounds is not None and due.rounds.records == []  # o2's round not due yet: no status read
    clock.advance(timedelta(seconds=31))  # the recoveries took that long

    report = run_supervisor(ctx, scan, due, {"o1:1": "Completed"})

    assert report.compensating == 1
    record = states.get("o2")
    assert record is not None and (record.locked_by, record.failure_count) == (round_id, 0)  # left, unwritten
    assert report.left_to_backend == 1

    run_supervisor(ctx, ScanState(), statuses={round_id: ABSENT})  # the next run reads it: never had
    record = states.get("o2")
    assert record is not None and record.history[-1].event == ROUND_START_MISSED
    assert (record.failure_count, record.starts_missed) == (0, 1)


def test_a_round_whose_page_could_not_be_read_before_the_recoveries_is_left_too(make_ctx, states, clock):
    """The rounds' page could not be read when the run read its statuses (a 429 past the SDK's retries): the claims
    read it, and a round that never began, its status not read, is left as an unread one, not counted."""
    ctx = make_ctx()
    round_id = round_claimed(states, "o1", clock, timedelta(seconds=5))
    scan = ScanState()
    due = find_due(ctx, scan)

    run_supervisor(ctx, scan, Due(due.scan, None), {})

    record = states.get("o1")
    assert record is not None and (record.locked_by, record.failure_count) == (round_id, 0)
