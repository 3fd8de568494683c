"""Recovery of expired attempts against the Cosmos DB protocol server."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from adapters.servicebus.sender import SendError
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain import transitions
from domain.states import ProcessState
from supervisor.recovery import RecoveryAction, recover
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.supervisor.conftest import claimed, expired, reclaim

pytestmark = pytest.mark.cosmos


def test_expired_record_goes_back_to_pending_with_a_backoff(make_ctx, states, clock):
    ctx = make_ctx(RETRY_BACKOFF_BASE_SECONDS="10", MAX_FAILURES="3")
    expired(states, "o1", clock, timedelta(seconds=5))

    report = run_supervisor(ctx, ScanState())

    record = states.get("o1")
    assert record is not None
    assert record.process_state is ProcessState.PENDING
    assert record.failure_count == 1
    assert record.locked_by is None
    assert record.attempt == 1  # the starter's next claim makes it 2
    assert record.complete_by is not None
    assert clock.now() + timedelta(seconds=5) <= record.complete_by <= clock.now() + timedelta(seconds=10)
    assert record.history[-1].event == "RetryScheduled"
    assert (report.found, report.recovered, report.skipped, report.escalated) == (1, 1, 0, 0)
    assert report.to_terminate == ["o1:1"]


def test_third_missed_deadline_escalates_to_error_with_one_alert(make_ctx, states, clock, sender):
    ctx = make_ctx(MAX_FAILURES="3", RETRY_BACKOFF_BASE_SECONDS="10", RETRY_BACKOFF_MAX_SECONDS="300")
    scan = ScanState()
    claimed(states, "o1", clock.now(), clock.now() + timedelta(seconds=60))
    backoffs = []
    for attempt in (1, 2, 3):
        clock.advance(timedelta(seconds=61))
        report = run_supervisor(ctx, scan)
        assert report.to_terminate == [f"o1:{attempt}"]
        record = states.get("o1")
        assert record is not None
        if attempt < 3:
            assert report.recovered == 1
            assert record.process_state is ProcessState.PENDING
            assert record.complete_by is not None
            backoffs.append(record.complete_by - clock.now())
            clock.set(record.complete_by)
            reclaim(states, "o1", clock.now(), timedelta(seconds=60))
    assert timedelta(seconds=5) <= backoffs[0] <= timedelta(seconds=10)
    assert timedelta(seconds=10) <= backoffs[1] <= timedelta(seconds=20)

    assert report.escalated == 1
    assert record.process_state is ProcessState.ERROR
    assert record.failure_count == 3
    assert record.locked_by is None
    assert record.last_error is not None
    assert record.last_error.startswith("retries exhausted after 3 failed attempts")
    # the escalation, then the acknowledgement of the alert and status it owed (nothing owed any more)
    assert [h.event for h in record.history[-2:]] == ["Escalated", "NotificationsDelivered"]
    assert record.complete_by is None
    [(queue, message)] = sender.sent
    assert queue == OPERATOR_ALERTS_QUEUE
    assert message.message_id == "alert:RetriesExhausted:o1:3"
    body = json.loads(message.body)
    assert body["type"] == "OperatorAlert"
    assert body["kind"] == "RetriesExhausted"
    assert body["orderId"] == "o1"
    assert body["summary"] == "order o1 failed 3 attempts and needs an operator"
    assert body["details"]["failureCount"] == 3

    clock.advance(timedelta(hours=1))
    again = run_supervisor(ctx, scan)
    assert again.found == 0
    assert len(sender.sent) == 1


def test_a_failed_alert_send_leaves_the_record_in_error(make_ctx, states, clock):
    class FailingSender:
        def send(self, queue, message):
            raise SendError("Service Bus unavailable")

    ctx = make_ctx(MAX_FAILURES="1")
    ctx.sender = FailingSender()
    record = expired(states, "o1", clock, timedelta(seconds=1))

    result = recover(ctx, record)

    assert result.action is RecoveryAction.ESCALATED
    assert result.alert_sent is False
    stored = states.get("o1")
    assert stored is not None
    assert stored.process_state is ProcessState.ERROR


def test_records_that_are_not_expired_processing_are_untouched(make_ctx, states, clock):
    ctx = make_ctx()
    now = clock.now()
    expired(states, "late", clock, timedelta(seconds=1))
    claimed(states, "running", now - timedelta(seconds=10), now + timedelta(seconds=50))
    claimed(states, "due-now", now - timedelta(seconds=60), now)  # completeBy == now counts as expired
    states.create(transitions.new_record("pending", None, now - timedelta(hours=1)))
    waiting = states.create(transitions.new_record("backoff", None, now - timedelta(hours=1)))
    states.replace(waiting.model_copy(update={"complete_by": now - timedelta(minutes=1)}))
    done = claimed(states, "done", now - timedelta(minutes=5), now - timedelta(minutes=4))
    states.replace(transitions.mark_processed(done, "done:1", now - timedelta(minutes=4)))
    failed = claimed(states, "failed", now - timedelta(minutes=5), now - timedelta(minutes=4))
    states.replace(transitions.fail(failed, "failed:1", None, "card declined", now - timedelta(minutes=4)))
    before = {r: states.get(r) for r in ("running", "pending", "backoff", "done", "failed")}

    report = run_supervisor(ctx, ScanState())

    assert report.found == 2
    assert sorted(report.to_terminate) == ["due-now:1", "late:1"]
    for order_id, record in before.items():
        after = states.get(order_id)
        assert after is not None and record is not None
        assert after.etag == record.etag, f"{order_id} was written"


def test_escalation_tells_the_submitter_failed_on_its_own_queue(make_ctx, states, clock, sender):
    ctx = make_ctx(MAX_FAILURES="3")
    record = transitions.claim(transitions.new_record("o9", "submitter-q", clock.now()), clock.now(), timedelta(0))
    states.create(record.model_copy(update={"failure_count": 2}))
    clock.advance(timedelta(seconds=1))

    run_supervisor(ctx, ScanState())

    statuses = [(q, json.loads(m.body)) for q, m in sender.sent if q != OPERATOR_ALERTS_QUEUE]
    assert [(q, b["status"], b["orderId"], b["attempt"]) for q, b in statuses] == [("submitter-q", "Failed", "o9", 1)]
    assert statuses[0][1]["reason"].startswith("retries exhausted")
