"""The supervisor waits for a prepaid order's payment notification (supervisor/payment_wait.py) against
the Cosmos protocol server: an attempt whose payment step waited for the notification is released
without counting it, the submitter hears so once, a charged order's payment step missing its deadline
still counts, and ``PAYMENT_WAIT_MINUTES`` bounds the wait, the order given up saying why."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.state_store import CosmosStateStore, update_once
from contracts.names import OPERATOR_ALERTS_QUEUE
from dependencies import AppContext
from domain import transitions
from domain.compensation import complete_step_logged
from domain.payment_wait import PAYMENT_NOT_RECEIVED, WAITING_FOR_PAYMENT
from domain.records import StateRecord
from domain.states import ProcessState
from domain.workflow import WORKFLOW, prepaid_step
from settings import Settings
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.deadlines import just_past
from tests.fakes import RecordingSender
from tests.supervisor.conftest import MakeContext

pytestmark = pytest.mark.cosmos
STEP_TIMEOUT = Settings.from_env({}).step_timeout
PAYMENT_STEP = prepaid_step().name
FIRST_STEP = WORKFLOW[0].name


def order(ctx: AppContext, *, prepaid: bool, total: int = 5_000) -> None:
    ctx.orders.create_or_verify(
        {"id": "o1", "orderId": "o1", "prepaid": prepaid, "totalCents": total, "currency": "EUR", "lines": []}
    )


def at_payment_step(states: CosmosStateStore, clock: ManualClock) -> StateRecord:
    """The next attempt claimed now, the first step done (by it, or an earlier attempt), the payment step
    begun: waiting for the notification (a prepaid order) or for the charge's reply."""
    record = states.get("o1") or states.create(transitions.new_record("o1", "replies-1", clock.now()))
    now = clock.now()
    record = update_once(states, record, lambda r: transitions.claim(r, now, STEP_TIMEOUT))
    owner = str(record.locked_by)
    deadline = now + STEP_TIMEOUT

    def begin(r: StateRecord) -> StateRecord:
        if FIRST_STEP not in r.steps:
            r = transitions.begin_step(r, owner, FIRST_STEP, "inventory", f"{owner}:inv", deadline, now)
            r = complete_step_logged(r, owner, FIRST_STEP, {"reservationId": "r-1"}, deadline, now)
        return transitions.begin_step(r, owner, PAYMENT_STEP, "payment", f"{owner}:pay", deadline, now)

    return update_once(states, record, begin)


def after_deadline(ctx: AppContext, clock: ManualClock, scan: ScanState) -> StateRecord:
    clock.advance(just_past(STEP_TIMEOUT))
    run_supervisor(ctx, scan)
    record = ctx.states.get("o1")
    assert record is not None
    return record


def alerts(sender: RecordingSender) -> list[dict[str, Any]]:
    return sender.bodies(OPERATOR_ALERTS_QUEUE)


def test_attempts_waiting_for_the_notification_do_not_spend_the_retry_budget(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock, sender: RecordingSender
) -> None:
    ctx = make_ctx(MAX_FAILURES="3")
    order(ctx, prepaid=True)
    began = clock.now()
    scan = ScanState()
    for _ in range(5):  # more attempts than MAX_FAILURES
        at_payment_step(states, clock)
        record = after_deadline(ctx, clock, scan)
        assert record.process_state is ProcessState.PENDING, record.last_error
        assert (record.failure_count, record.last_error) == (0, WAITING_FOR_PAYMENT)
        assert record.history[-1].event == transitions.PAYMENT_WAIT
        assert record.payment_wait_since == began  # the first step's start, kept across attempts
        assert record.complete_by is not None and record.complete_by > clock.now()
        clock.set(record.complete_by)
    assert alerts(sender) == []
    statuses = [(m.message_id, json.loads(m.body)) for q, m in sender.sent if q == "replies-1"]
    assert [(i, s["status"], s["reason"]) for i, s in statuses] == [
        ("o1:Processing:1:waiting", "Processing", WAITING_FOR_PAYMENT)  # once per wait, not per attempt
    ]


def test_a_charged_orders_payment_step_missing_its_deadline_still_counts(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock
) -> None:
    ctx = make_ctx(MAX_FAILURES="3")
    order(ctx, prepaid=False)
    at_payment_step(states, clock)
    record = after_deadline(ctx, clock, ScanState())
    assert (record.process_state, record.failure_count) == (ProcessState.PENDING, 1)
    assert record.history[-1].event == "RetryScheduled" and record.payment_wait_since is None


def test_without_waiting_every_deadline_counts_as_before(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock
) -> None:
    ctx = make_ctx(MAX_FAILURES="3", PAYMENT_WAIT_MINUTES="0")
    order(ctx, prepaid=True)
    at_payment_step(states, clock)
    assert after_deadline(ctx, clock, ScanState()).failure_count == 1


def test_past_payment_wait_minutes_the_order_is_given_up_saying_why(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock, sender: RecordingSender
) -> None:
    ctx = make_ctx(MAX_FAILURES="3", PAYMENT_WAIT_MINUTES="5", REVIEW_AMOUNT_THRESHOLD_CENTS="1000")
    order(ctx, prepaid=True, total=5_000)  # at least the review threshold: Error and an alert
    began = clock.now()
    scan = ScanState()
    while True:
        at_payment_step(states, clock)
        record = after_deadline(ctx, clock, scan)
        if record.process_state is not ProcessState.PENDING:
            break
        assert record.complete_by is not None and record.complete_by <= began + timedelta(minutes=5)
        clock.set(record.complete_by)
    assert record.process_state is ProcessState.ERROR
    assert clock.now() - began <= timedelta(minutes=5) + STEP_TIMEOUT * 2  # about a deadline after the bound
    assert record.last_error is not None and record.last_error.startswith(PAYMENT_NOT_RECEIVED)
    assert "PAYMENT_WAIT_MINUTES=5" in record.last_error
    (alert,) = alerts(sender)
    assert alert["kind"] == "RetriesExhausted"
    assert alert["summary"].startswith(f"order o1: {PAYMENT_NOT_RECEIVED}: no payment notification within")
    assert "check with the payment provider whether the customer paid" in alert["summary"]
    failed = [
        json.loads(m.body) for q, m in sender.sent if q == "replies-1" and json.loads(m.body)["status"] == "Failed"
    ]
    assert [s["reason"] for s in failed] == [record.last_error]


def test_below_the_review_threshold_the_given_up_order_is_compensated(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock, sender: RecordingSender
) -> None:
    ctx = make_ctx(PAYMENT_WAIT_MINUTES="1")
    order(ctx, prepaid=True, total=5_000)
    at_payment_step(states, clock)
    clock.advance(timedelta(minutes=1))
    record = after_deadline(ctx, clock, ScanState())
    assert record.process_state is ProcessState.COMPENSATING  # the reservation is released
    assert record.last_error is not None and record.last_error.startswith(PAYMENT_NOT_RECEIVED)
    assert alerts(sender) == []
