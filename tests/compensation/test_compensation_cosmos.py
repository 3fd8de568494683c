"""Against the Cosmos protocol server: the step result, its log entry and the next step's start are
one write; a stale attempt cannot append to the log; the compensation moves are fenced; the supervisor hands exhausted
orders to compensation and runs rounds; a cancellation compensates or is refused."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from activities import compensation_steps, scheduler_steps
from adapters.cosmos.state_store import update_once
from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.names import OPERATOR_ALERTS_QUEUE
from dependencies import AppContext
from domain import transitions
from domain.compensation import compensation_instance_id, enter_compensation
from domain.records import StateRecord
from domain.states import ProcessState, StepStatus
from supervisor.compensation_rounds import claim_due_compensations
from supervisor.operator import compensate_order
from supervisor.recovery import RecoveryAction, recover
from tests.activity_calls import run
from tests.compensation.support import (
    NEW_ROUND_INPUT,
    begin_charge,
    carried,
    finish_forward,
    forward_step,
    shipment_request,
    stored_record,
    submitted_and_claimed,
)
from tests.contexts import context_with
from tests.deadlines import just_past
from tests.fakes import RecordingSender
from tests.orchestrators.support import sample_order

FORWARD = "o1:1"


class CountingStore:
    """The real store, counting the replaces that go through it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.replaces = 0

    def replace(self, record: StateRecord) -> StateRecord:
        self.replaces += 1
        return self.inner.replace(record)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_compensable_step_result_its_log_entry_and_the_next_start_are_one_write(ctx):
    submitted_and_claimed(ctx)
    counting = CountingStore(ctx.states)
    ctx = context_with(ctx, states=counting)
    results: dict[str, Any] = {}
    forward_step(ctx, FORWARD, 1, "reserve-inventory", "inventory", results)
    assert counting.replaces == 1  # begin_step; the result is the scheduler's until its next write
    assert stored_record(ctx).steps["reserve-inventory"].status is StepStatus.IN_PROGRESS
    begin_charge(ctx, FORWARD, results=results)
    assert counting.replaces == 2  # one more: the result, its entry and the charge's start together
    record = stored_record(ctx)
    assert record.steps["reserve-inventory"].status is StepStatus.SUCCEEDED
    assert record.steps["charge-payment"].status is StepStatus.IN_PROGRESS
    assert record.complete_by == ctx.clock.now() + ctx.settings.step_timeout  # the charge's deadline
    [entry] = record.compensation
    assert (entry.seq, entry.step, entry.agent, entry.undo_action, entry.attempt) == (
        1,
        "reserve-inventory",
        "inventory",
        "release",
        1,
    )
    assert entry.data == {"reservationId": results["reserve-inventory"]["reservationId"]}
    assert entry.outcome is None


def test_the_charge_entry_carries_references_only(ctx):
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    forward_step(ctx, FORWARD, 1, "reserve-inventory", "inventory", results)
    forward_step(ctx, FORWARD, 1, "charge-payment", "payment", results)
    forward_step(ctx, FORWARD, 1, "arrange-shipment", "shipping", results)  # its start records the charge
    charge = stored_record(ctx).compensation[1]
    assert set(charge.data) == {"chargeId", "amountCents"}
    assert charge.data["amountCents"] == 1000
    assert len(stored_record(ctx).compensation) == 2
    assert finish_forward(ctx, FORWARD, 1, results) == {"owned": True, "statusSent": True}
    record = stored_record(ctx)
    assert record.steps["arrange-shipment"].status is StepStatus.SUCCEEDED  # recorded with Processed
    assert record.process_state is ProcessState.PROCESSED
    assert len(record.compensation) == 2  # the pivot has no undo: no entry


def test_recording_the_same_result_twice_appends_one_entry(ctx, sender):
    """begin_step carrying the reservation, run twice (its retry after a try that landed but did not
    answer): one entry, and the request collapses on its MessageId."""
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    forward_step(ctx, FORWARD, 1, "reserve-inventory", "inventory", results)
    completes = carried(ctx, results)
    assert completes == {"step": "reserve-inventory", "result": results["reserve-inventory"]}
    request = {
        "requestId": "o1:1:charge-payment:payment",
        "instanceId": FORWARD,
        "orderId": "o1",
        "step": "charge-payment",
        "attempt": 1,
        "deadline": ctx.clock.now() + ctx.settings.step_timeout,
        "idempotencyKey": "o1:charge-payment",
        "payload": {},
    }
    begin = {"request": request, "agent": "payment", "completes": completes, "queue": "payment-requests"}
    for _ in range(2):
        assert run(scheduler_steps.begin_step, ctx, begin)["owned"]
    assert len(stored_record(ctx).compensation) == 1
    # the same MessageId twice: Service Bus duplicate detection drops the second
    assert sender.message_ids("payment-requests") == ["o1:1:charge-payment:payment"] * 2


def test_a_stale_attempt_cannot_append_to_the_log(ctx, clock, sender):
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    forward_step(ctx, FORWARD, 1, "reserve-inventory", "inventory", results)
    begin_charge(ctx, FORWARD, results=results)
    # The supervisor recovers attempt 1 and attempt 2 claims the order.
    clock.advance(just_past(ctx.settings.step_timeout))
    record = stored_record(ctx)
    update_once(ctx.states, record, lambda r: transitions.supervisor_retry(r, FORWARD, clock.now(), 3, timedelta(0)))
    update_once(
        ctx.states,
        stored_record(ctx),
        lambda r: transitions.claim(r, clock.now(), ctx.settings.start_grace),
    )
    before = stored_record(ctx)
    # attempt 1's charge reply comes late: its next write, the shipment's start carrying the charge, is fenced out
    late = {
        "request": shipment_request(FORWARD, clock.now() + ctx.settings.step_timeout),
        "agent": "shipping",
        "completes": {"step": "charge-payment", "result": {"chargeId": "C-9", "amountCents": 1}},
        "queue": "shipping-requests",
    }
    assert run(scheduler_steps.begin_step, ctx, late) == {"owned": False}
    after = stored_record(ctx)
    assert after.compensation == before.compensation
    assert after.version == before.version  # nothing written
    assert sender.message_ids("shipping-requests") == []  # and nothing sent: the request goes only after the write
    # nor can it finish the order with the late result
    processed = {"orderId": "o1", "instanceId": FORWARD, "attempt": 1, "completes": late["completes"]}
    assert run(scheduler_steps.mark_processed, ctx, processed) == {"owned": False}
    assert stored_record(ctx).version == before.version


def test_the_scheduler_hands_over_to_compensation_with_a_fenced_write(ctx):
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    forward_step(ctx, FORWARD, 1, "reserve-inventory", "inventory", results)
    begin_charge(ctx, FORWARD, results=results)  # the charge began (recording the reservation), then was declined
    fenced = {"orderId": "o1", "instanceId": FORWARD, "step": "charge-payment", "attempt": 1}
    assert run(compensation_steps.request_compensation, ctx, {**fenced, "error": "declined"}) == {"owned": True}
    record = stored_record(ctx)
    assert record.process_state is ProcessState.COMPENSATING
    assert record.locked_by is None and record.complete_by == ctx.clock.now()
    # The forward attempt has lost the record: its next write is refused.
    assert run(scheduler_steps.mark_processed, ctx, {"orderId": "o1", "instanceId": FORWARD, "attempt": 1}) == {
        "owned": False
    }
    # The same instance asking again (a retry whose first try landed) is told it is done; nothing is written.
    etag = stored_record(ctx).version
    assert run(compensation_steps.request_compensation, ctx, {**fenced, "error": "x"}) == {"owned": True}
    assert stored_record(ctx).version == etag
    # Another, stale, attempt asking is refused.
    stale = {**fenced, "instanceId": "o1:0"}
    assert run(compensation_steps.request_compensation, ctx, {**stale, "error": "x"}) == {"owned": False}


def test_retries_exhausted_before_the_pivot_go_to_compensation_not_error(ctx, clock):
    ctx = context_with(ctx, settings=ctx.settings.from_env({}, MAX_FAILURES="1"))
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    forward_step(ctx, FORWARD, 1, "reserve-inventory", "inventory", results)
    begin_charge(ctx, FORWARD, results=results)  # ... and the charge's reply never comes
    clock.advance(just_past(ctx.settings.step_timeout))
    result = recover(ctx, stored_record(ctx))
    assert result.action is RecoveryAction.COMPENSATING
    assert result.expired_instance == FORWARD
    record = stored_record(ctx)
    assert record.process_state is ProcessState.COMPENSATING
    assert record.locked_by is None
    # The charge's outcome is unknown: it gets an undo by its forward idempotency key at every agent
    # the step was started with (here only its own; the fallback, never asked, took nothing:
    # tests/domain/test_unknown_outcome_agents.py has the step that went to both).
    assert [(e.step, e.agent, e.data.get("outcomeUnknown")) for e in record.compensation] == [
        ("reserve-inventory", "inventory", None),
        ("charge-payment", "payment", True),
    ]
    assert record.compensation[1].data["forwardIdempotencyKey"] == "o1:charge-payment"


def test_retries_exhausted_on_a_high_impact_order_stay_error_for_an_operator(ctx, clock):
    ctx = context_with(ctx, settings=ctx.settings.from_env({}, MAX_FAILURES="1", REVIEW_AMOUNT_THRESHOLD_CENTS="500"))
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    forward_step(ctx, FORWARD, 1, "reserve-inventory", "inventory", results)
    begin_charge(ctx, FORWARD, results=results)
    clock.advance(just_past(ctx.settings.step_timeout))
    assert recover(ctx, stored_record(ctx)).action is RecoveryAction.ESCALATED
    assert stored_record(ctx).process_state is ProcessState.ERROR
    written = compensate_order(ctx, "o1", "ana", "reviewed: refund the customer")
    assert written.process_state is ProcessState.COMPENSATING
    assert written.history[-1].by == "ana"


def test_the_supervisor_claims_a_round_and_a_stuck_round_gets_the_next_one(ctx, clock):
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    forward_step(ctx, FORWARD, 1, "reserve-inventory", "inventory", results)
    begin_charge(ctx, FORWARD, results=results)  # the charge began (recording the reservation), then was declined
    fenced = {"orderId": "o1", "instanceId": FORWARD, "step": "charge-payment", "attempt": 1}
    run(compensation_steps.request_compensation, ctx, {**fenced, "error": "declined"})
    claims = claim_due_compensations(ctx)
    [start] = claims.starts
    assert (start.instance_id, start.round) == (compensation_instance_id("o1", 2), 2)
    assert start.orchestration_input() == {"orderId": "o1", "round": 2, **NEW_ROUND_INPUT}
    assert claims.stale_instances == []
    assert claim_due_compensations(ctx).starts == []  # not due again until its deadline
    clock.advance(just_past(ctx.settings.start_grace))  # round 2 never started (or died)
    claims = claim_due_compensations(ctx)
    assert claims.starts == []  # round 2 is counted and released; round 3 waits out a backoff
    assert claims.stale_instances == [compensation_instance_id("o1", 2)]
    # The stale round is fenced out of every compensation write.
    stale = {"orderId": "o1", "instanceId": compensation_instance_id("o1", 2)}
    assert run(compensation_steps.load_compensation, ctx, stale) == {"owned": False}
    assert run(compensation_steps.record_undo, ctx, {**stale, "seq": 1}) == {"owned": False}
    assert run(compensation_steps.finish_compensation, ctx, stale) == {"owned": False}
    assert stored_record(ctx).failure_count == 1
    clock.advance(just_past(ctx.settings.retry_backoff_base))
    claims = claim_due_compensations(ctx)
    assert [s.instance_id for s in claims.starts] == [compensation_instance_id("o1", 3)]
    assert claims.stale_instances == []  # the released round was terminated already
    assert stored_record(ctx).failure_count == 1  # and is not counted again


def compensation_stuck_for_max_rounds(ctx: AppContext, clock: Any) -> None:
    """o1 reserved, its charge declined, handed to compensation; rounds 2, 3, 4 all get stuck
    (MAX_FAILURES = 3), so the next claim finds it out of rounds."""
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    forward_step(ctx, FORWARD, 1, "reserve-inventory", "inventory", results)
    begin_charge(ctx, FORWARD, results=results)  # the charge began (recording the reservation), then was declined
    fenced = {"orderId": "o1", "instanceId": FORWARD, "step": "charge-payment", "attempt": 1}
    run(compensation_steps.request_compensation, ctx, {**fenced, "error": "declined"})
    claim_due_compensations(ctx)  # round 2
    for _ in range(2):
        clock.advance(just_past(ctx.settings.start_grace))  # the round never starts
        claim_due_compensations(ctx)  # counted; the next round backs off
        clock.advance(just_past(ctx.settings.retry_backoff_max))
        claim_due_compensations(ctx)  # rounds 3, 4
    clock.advance(just_past(ctx.settings.start_grace))  # round 4 never starts either


def test_a_compensation_stuck_for_max_failures_rounds_is_compensation_failed_with_an_alert(ctx, clock, sender):
    compensation_stuck_for_max_rounds(ctx, clock)
    claims = claim_due_compensations(ctx)
    assert claims.starts == [] and claims.failed == 1
    record = stored_record(ctx)
    assert record.process_state is ProcessState.COMPENSATION_FAILED
    assert "did not finish in 3 rounds" in (record.last_error or "")
    [alert] = [a for a in sender.bodies(OPERATOR_ALERTS_QUEUE) if a["kind"] == "CompensationFailed"]
    assert alert["orderId"] == "o1"
    assert [s["status"] for s in sender.bodies("client-statuses")][-1] == "CompensationFailed"


def test_an_undo_that_fails_for_good_records_compensation_failed_naming_the_entry(ctx, sender):
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    forward_step(ctx, FORWARD, 1, "reserve-inventory", "inventory", results)
    begin_charge(ctx, FORWARD, results=results)  # the charge began (recording the reservation), then was declined
    fenced = {"orderId": "o1", "instanceId": FORWARD, "step": "charge-payment", "attempt": 1}
    run(compensation_steps.request_compensation, ctx, {**fenced, "error": "declined"})
    [start] = claim_due_compensations(ctx).starts
    data = {"orderId": "o1", "instanceId": start.instance_id, "seq": 1, "error": "reservation R-1 expired"}
    assert run(compensation_steps.fail_compensation, ctx, data) == {"owned": True}
    record = stored_record(ctx)
    assert record.process_state is ProcessState.COMPENSATION_FAILED
    assert record.last_error == ("entry 1 (release of reserve-inventory via inventory) failed: reservation R-1 expired")
    assert record.compensation[0].outcome == "Failed"
    [alert] = [a for a in sender.bodies(OPERATOR_ALERTS_QUEUE) if a["kind"] == "CompensationFailed"]
    assert "entry 1" in alert["summary"]


class StatusQueueDown(RecordingSender):
    """Service Bus refuses every send to the submitter's queue (a transient SendError)."""

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue == "client-statuses":
            raise SendError("Service Bus unavailable")
        super().send(queue, message)


def test_a_lost_compensation_failed_status_does_not_stop_the_other_claims(ctx, clock):
    compensation_stuck_for_max_rounds(ctx, clock)
    other = submitted_and_claimed(ctx, sample_order("o2"))
    cancelled = enter_compensation(other, "test", "cancelled", clock.now())
    update_once(ctx.states, other, lambda r: cancelled)
    ctx = context_with(ctx, sender=StatusQueueDown())

    claims = claim_due_compensations(ctx)

    assert claims.failed == 1  # o1: CompensationFailed, its status lost (logged), its alert sent
    assert [s.order_id for s in claims.starts] == ["o2"]  # o2's round is still claimed, to be started
    assert stored_record(ctx).process_state is ProcessState.COMPENSATION_FAILED
    assert [a["kind"] for a in ctx.sender.bodies(OPERATOR_ALERTS_QUEUE)] == ["CompensationFailed"]


def test_a_retried_hand_over_write_that_already_landed_is_answered_as_done(app_context, clock):
    """mark_processed wrote Processed, then its activity failed before answering; the orchestration's
    retry of the same activity must hear "done", not "lost", or the submitter never hears Completed."""
    from activities import scheduler_steps
    from domain import transitions

    app_context.states.create(transitions.new_record("o7", "q", clock.now()))
    record = app_context.states.get("o7")
    claimed = transitions.claim(record, clock.now(), timedelta(seconds=60))
    shipping = transitions.begin_step(
        claimed, "o7:1", "arrange-shipment", "shipping", "o7:1:arrange-shipment:shipping", clock.now(), clock.now()
    )
    app_context.states.replace(replace(shipping, version=record.version))
    data = {
        "orderId": "o7",
        "instanceId": "o7:1",
        "attempt": 1,
        "completes": {"step": "arrange-shipment", "result": {"shipmentId": "S-7"}},
    }
    done = {"owned": True, "statusSent": True}
    assert run(scheduler_steps.mark_processed, app_context, data) == done
    assert run(scheduler_steps.mark_processed, app_context, data) == done  # the retry, result and all
    stored = app_context.states.get("o7")
    assert stored is not None and stored.steps["arrange-shipment"].result == {"shipmentId": "S-7"}
    # Completed went with each try under one MessageId: duplicate detection keeps one
    assert app_context.sender.message_ids("q") == ["o7:Completed:1"] * 2
    # but an instance that never held the record still hears "lost" (one numbered at or below the record's attempt:
    # an instance numbered above it cannot exist yet, its claim comes first, and such a read is a stale one,
    # tests/adapters/test_stale_reads.py)
    lost = {**data, "instanceId": "o7:compensate:1"}
    assert run(scheduler_steps.mark_processed, app_context, lost) == {"owned": False}
