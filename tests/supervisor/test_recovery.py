"""Recovery of expired attempts against the Cosmos DB protocol server."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest

from adapters.servicebus.sender import SendError
from contracts.names import OPERATOR_ALERTS_QUEUE
from dependencies import AppContext
from domain import transitions
from domain.records import StateRecord
from domain.states import ProcessState
from supervisor.recovery import RecoveryAction, recover
from supervisor.run import RECOVERY_BUDGET, SupervisorReport, run_supervisor
from supervisor.scan import ScanState
from tests.fakes import SlowStore
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


MAX_FAILURES = 3
BACKOFF_BASE = timedelta(seconds=10)
ESCALATION = {
    "MAX_FAILURES": str(MAX_FAILURES),
    "RETRY_BACKOFF_BASE_SECONDS": str(int(BACKOFF_BASE.total_seconds())),
    "RETRY_BACKOFF_MAX_SECONDS": "300",
}
JUST_PAST = timedelta(seconds=1)  # how far past an attempt's deadline the supervisor runs


@dataclass(frozen=True)
class SupervisorPass:
    report: SupervisorReport
    record: StateRecord  # as the run left it
    backoff: timedelta | None  # how long the order waits before its next claim (None: not retried)


def miss_every_deadline(ctx: AppContext, states: Any, clock: Any, scan: ScanState) -> list[SupervisorPass]:
    """Order o1 is claimed and misses its step deadline MAX_FAILURES times in a row, the supervisor running
    just past each deadline and the starter reclaiming it as soon as its backoff ends."""
    step_timeout = ctx.settings.step_timeout
    claimed(states, "o1", clock.now(), clock.now() + step_timeout)
    passes: list[SupervisorPass] = []
    for attempt in range(1, MAX_FAILURES + 1):
        clock.advance(step_timeout + JUST_PAST)
        report = run_supervisor(ctx, scan)
        record = states.get("o1")
        assert record is not None
        retried = attempt < MAX_FAILURES
        backoff = record.complete_by - clock.now() if retried and record.complete_by is not None else None
        passes.append(SupervisorPass(report, record, backoff))
        if retried and record.complete_by is not None:
            clock.set(record.complete_by)
            reclaim(states, "o1", clock.now(), step_timeout)
    return passes


def test_each_missed_deadline_terminates_that_attempt(make_ctx, states, clock):
    passes = miss_every_deadline(make_ctx(**ESCALATION), states, clock, ScanState())
    assert [p.report.to_terminate for p in passes] == [["o1:1"], ["o1:2"], ["o1:3"]]


def test_missed_deadlines_before_the_last_are_retried_after_a_doubling_backoff(make_ctx, states, clock):
    first, second, _ = miss_every_deadline(make_ctx(**ESCALATION), states, clock, ScanState())
    assert [(p.report.recovered, p.record.process_state) for p in (first, second)] == [(1, ProcessState.PENDING)] * 2
    assert first.backoff is not None and second.backoff is not None
    assert BACKOFF_BASE / 2 <= first.backoff <= BACKOFF_BASE  # the base, with up to half of it as jitter
    assert BACKOFF_BASE <= second.backoff <= 2 * BACKOFF_BASE  # doubled


def test_the_last_missed_deadline_escalates_the_order_to_error(make_ctx, states, clock):
    *_, last = miss_every_deadline(make_ctx(**ESCALATION), states, clock, ScanState())
    record = last.record
    assert last.report.escalated == 1
    assert (record.process_state, record.failure_count) == (ProcessState.ERROR, MAX_FAILURES)
    assert (record.locked_by, record.complete_by) == (None, None)
    assert record.last_error is not None
    assert record.last_error.startswith(f"retries exhausted after {MAX_FAILURES} failed attempts")
    # the escalation, then the acknowledgement of the alert and status it owed (nothing owed any more)
    assert [h.event for h in record.history[-2:]] == ["Escalated", "NotificationsDelivered"]


def test_the_escalation_sends_one_operator_alert(make_ctx, states, clock, sender):
    miss_every_deadline(make_ctx(**ESCALATION), states, clock, ScanState())
    [(queue, message)] = sender.sent
    assert (queue, message.message_id) == (OPERATOR_ALERTS_QUEUE, f"alert:RetriesExhausted:o1:{MAX_FAILURES}")
    body = json.loads(message.body)
    assert (body["type"], body["kind"], body["orderId"]) == ("OperatorAlert", "RetriesExhausted", "o1")
    assert body["summary"] == f"order o1 failed {MAX_FAILURES} attempts and needs an operator"
    assert body["details"]["failureCount"] == MAX_FAILURES


def test_an_escalated_order_is_not_recovered_or_alerted_again(make_ctx, states, clock, sender):
    ctx = make_ctx(**ESCALATION)
    scan = ScanState()
    miss_every_deadline(ctx, states, clock, scan)
    clock.advance(timedelta(hours=1))
    assert run_supervisor(ctx, scan).found == 0
    assert len(sender.sent) == 1


def test_a_failed_alert_send_leaves_the_record_in_error(make_ctx, states, clock):
    class FailingSender:
        def send(self, queue, message):
            raise SendError("Service Bus unavailable")

    ctx = make_ctx(sender=FailingSender(), MAX_FAILURES="1")
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
    states.replace(replace(waiting, complete_by=now - timedelta(minutes=1)))
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
        assert after.version == record.version, f"{order_id} was written"


def test_escalation_tells_the_submitter_failed_on_its_own_queue(make_ctx, states, clock, sender):
    ctx = make_ctx(MAX_FAILURES="3")
    record = transitions.claim(transitions.new_record("o9", "submitter-q", clock.now()), clock.now(), timedelta(0))
    states.create(replace(record, failure_count=2))
    clock.advance(timedelta(seconds=1))

    run_supervisor(ctx, ScanState())

    statuses = [(q, json.loads(m.body)) for q, m in sender.sent if q != OPERATOR_ALERTS_QUEUE]
    # no step ever began: nothing on the record says Received was heard, so it is said first (owe_before_failure)
    assert [(q, b["status"], b["orderId"], b["attempt"]) for q, b in statuses] == [
        ("submitter-q", "Received", "o9", 0),
        ("submitter-q", "Failed", "o9", 1),
    ]
    assert statuses[1][1]["reason"].startswith("retries exhausted")


def test_a_run_stops_recovering_once_its_budget_is_spent_and_a_later_run_finds_the_rest(
    make_ctx, states, clock, caplog
):
    """Under a Cosmos DB answering in 30 s (throttled, the SDK waiting out its retries), 40 recoveries took 20
    minutes and a run's 100 (``SUPERVISOR_MAX_RECORDS``) nearly an hour, past the host's functionTimeout (30 minutes),
    which kills the run and restarts the worker with every invocation on it. A run now starts no recovery past
    ``RECOVERY_BUDGET``; the records left are still expired, and the next run takes them."""
    for n in range(40):
        expired(states, f"o{n:02}", clock, timedelta(seconds=5))
    ctx = make_ctx(states=SlowStore(states, lambda s: clock.advance(timedelta(seconds=s)), 30.0), MAX_FAILURES="3")

    began = clock.now()
    with caplog.at_level("WARNING"):
        first = run_supervisor(ctx, ScanState())

    assert first.found == 40
    assert 0 < first.recovered < 40
    assert clock.now() - began < RECOVERY_BUDGET + timedelta(minutes=5)  # the rest of the run included
    stopped = [r for r in caplog.records if getattr(r, "event", "") == "SupervisorPhaseStopped"]
    assert [(getattr(r, "phase", None), getattr(r, "left", None)) for r in stopped] == [
        ("recoveries", 40 - first.recovered)
    ]

    second = run_supervisor(ctx, ScanState())
    assert second.found == 40 - first.recovered  # the ones left, still expired
    pending = [r for r in (states.get(f"o{n:02}") for n in range(40)) if r is not None]
    assert sum(r.process_state is ProcessState.PENDING for r in pending) == first.recovered + second.recovered
