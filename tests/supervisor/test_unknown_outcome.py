"""Supervisor writes whose response is lost after Cosmos DB committed them, failed sends of the alert
and status a failure write owes, and per-record isolation of the compensation claims: no order may
end ``Error`` or ``CompensationFailed`` without its operator alert and its submitter's status."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from adapters.cosmos.state_store import CosmosStateStore
from adapters.servicebus.sender import SendError
from contracts.names import OPERATOR_ALERTS_QUEUE
from dependencies import AppContext
from domain import compensation, transitions
from domain.records import StateRecord
from domain.states import ProcessState
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.fakes import RecordingSender
from tests.lost_writes import FlakyStates

pytestmark = pytest.mark.cosmos


def about_to_escalate(states, clock, order_id: str = "o1") -> StateRecord:
    """Processing, attempt 1 with two failures behind it, its deadline just passed."""
    record = transitions.claim(transitions.new_record(order_id, "submitter-q", clock.now()), clock.now(), timedelta(0))
    created: StateRecord = states.create(replace(record, failure_count=2))
    clock.advance(timedelta(seconds=1))
    return created


def stuck_compensation(states: CosmosStateStore, clock, order_id: str, failures: int) -> StateRecord:
    """A Compensating round owned by an orchestration that missed its deadline."""
    record = states.create(transitions.new_record(order_id, "submitter-q", clock.now()))
    record = states.replace(compensation.enter_compensation(record, "cancellation", "cancelled", clock.now()))
    record = states.replace(
        replace(
            compensation.claim_compensation(record, clock.now(), timedelta(seconds=10), 9, "supervisor"),
            failure_count=failures,
        )
    )
    clock.advance(timedelta(seconds=30))
    return record


def handed_to_compensation(states: CosmosStateStore, clock, order_id: str) -> StateRecord:
    """A Compensating record handed over (unowned, due): the next supervisor run claims its round."""
    record = states.create(transitions.new_record(order_id, "submitter-q", clock.now()))
    record = states.replace(compensation.enter_compensation(record, "cancellation", "cancelled", clock.now()))
    clock.advance(timedelta(seconds=1))
    return record


def losing(make_ctx, states: CosmosStateStore, order_id: str, fail_reads: int = 0) -> AppContext:
    """A context whose next write of ``order_id`` commits and loses its response."""
    flaky = FlakyStates(states)
    flaky.lose[order_id] = 1
    flaky.fail_reads = fail_reads
    ctx: AppContext = make_ctx(states=flaky, MAX_FAILURES="3")
    return ctx


def owed_messages(sender: RecordingSender, order_id: str) -> list[tuple[str, str]]:
    """The alerts, then the statuses, sent about ``order_id``. These orders never began a step, so their
    failure status comes after a ``Received`` (``notifications.received.owe_before_failure``)."""
    kinds = [("alert", b["kind"]) for b in sender.bodies(OPERATOR_ALERTS_QUEUE) if b["orderId"] == order_id]
    return kinds + [("status", b["status"]) for b in sender.bodies("submitter-q") if b["orderId"] == order_id]


def test_an_escalation_whose_response_was_lost_still_alerts_and_tells_the_submitter(make_ctx, states, clock, sender):
    about_to_escalate(states, clock)
    ctx = losing(make_ctx, states, "o1")

    report = run_supervisor(ctx, ScanState())

    assert (report.escalated, report.failed) == (1, 0)
    assert owed_messages(sender, "o1") == [("alert", "RetriesExhausted"), ("status", "Received"), ("status", "Failed")]
    stored = states.get("o1")
    assert stored is not None and stored.process_state is ProcessState.ERROR
    assert stored.complete_by is None  # acknowledged: nothing owed any more


def test_when_even_the_re_read_fails_the_sweep_delivers_what_the_write_owes(make_ctx, states, clock, sender):
    about_to_escalate(states, clock)
    ctx = losing(make_ctx, states, "o1", fail_reads=1)

    report = run_supervisor(ctx, ScanState())

    # the recovery itself could not tell whether its write landed; the owed-notification sweep of
    # the same run finds the Error record owing its alert and status, delivers and acknowledges them
    assert (report.failed, report.notified) == (1, 1)
    assert owed_messages(sender, "o1") == [("alert", "RetriesExhausted"), ("status", "Received"), ("status", "Failed")]
    acknowledged = states.get("o1")
    assert acknowledged is not None and acknowledged.process_state is ProcessState.ERROR
    assert acknowledged.complete_by is None
    assert acknowledged.history[-1].event == "NotificationsDelivered"
    clock.advance(timedelta(minutes=5))
    run_supervisor(ctx, ScanState())
    assert len(sender.sent) == 3  # Received, the alert, Failed: delivered once acknowledged, never again


def test_failed_sends_stay_owed_until_a_run_delivers_them(make_ctx, states, clock, sender):
    class Down:
        def send(self, queue, message):
            raise SendError("Service Bus unavailable")

    ctx = make_ctx(sender=Down(), MAX_FAILURES="3")
    about_to_escalate(states, clock)
    run_supervisor(ctx, ScanState())
    stored = states.get("o1")
    assert stored is not None and stored.process_state is ProcessState.ERROR and stored.complete_by is not None

    ctx = replace(ctx, sender=sender)  # Service Bus is back
    clock.advance(timedelta(seconds=30))
    run_supervisor(ctx, ScanState())

    assert owed_messages(sender, "o1") == [("alert", "RetriesExhausted"), ("status", "Received"), ("status", "Failed")]
    assert sender.message_ids(OPERATOR_ALERTS_QUEUE) == ["alert:RetriesExhausted:o1:1"]  # the original alert id


def test_a_compensation_failure_whose_response_was_lost_still_alerts(make_ctx, states, clock, sender):
    stuck_compensation(states, clock, "c1", failures=2)
    ctx = losing(make_ctx, states, "c1")

    report = run_supervisor(ctx, ScanState())

    assert report.compensation_failed == 1
    assert owed_messages(sender, "c1") == [
        ("alert", "CompensationFailed"),
        ("status", "Received"),
        ("status", "CompensationFailed"),
    ]
    stored = states.get("c1")
    assert stored is not None and stored.process_state is ProcessState.COMPENSATION_FAILED
    assert stored.complete_by is None


def test_a_store_failure_mid_batch_keeps_the_compensation_claims_already_made(make_ctx, states, clock):
    for order_id in ("c1", "c2", "c3"):
        handed_to_compensation(states, clock, order_id)
    flaky = FlakyStates(states)
    flaky.refuse["c2"] = 1
    ctx = make_ctx(states=flaky, MAX_FAILURES="3")

    report = run_supervisor(ctx, ScanState())

    assert sorted(s.order_id for s in report.compensations) == ["c1", "c3"]
    for order_id in ("c1", "c3"):
        claimed = states.get(order_id)
        assert claimed is not None and claimed.locked_by == f"{order_id}:compensate:{claimed.attempt}"


def test_a_claim_whose_response_was_lost_is_started(make_ctx, states, clock):
    handed_to_compensation(states, clock, "c1")
    ctx = losing(make_ctx, states, "c1")

    report = run_supervisor(ctx, ScanState())

    [start] = report.compensations
    stored = states.get("c1")
    assert stored is not None and start.instance_id == stored.locked_by


def test_a_stuck_round_s_backoff_whose_response_was_lost_starts_nothing_and_counts_once(make_ctx, states, clock):
    stuck_compensation(states, clock, "c1", failures=0)
    ctx = losing(make_ctx, states, "c1")

    report = run_supervisor(ctx, ScanState())

    assert report.compensations == []  # released to wait out the backoff (read back after the lost answer)
    stored = states.get("c1")
    assert stored is not None and (stored.locked_by, stored.failure_count) == (None, 1)
    assert stored.complete_by is not None and stored.complete_by > clock.now()
    clock.advance(stored.complete_by - clock.now() + timedelta(seconds=1))
    [start] = run_supervisor(ctx, ScanState()).compensations
    claimed = states.get("c1")
    assert claimed is not None and (start.instance_id, claimed.failure_count) == (claimed.locked_by, 1)
