"""A fenced activity run a second time, late, after its own orchestration moved on (Durable activities
run at least once: on the Azure Storage backend a worker that dies after the result reached the
orchestration, before it deleted the work item, leaves the item to reappear and run again). Its
instance still holds ``lockedBy``, so only the write's number (``domain.write_order``) can refuse it.
Each test makes the writes as the orchestration numbers them (``orchestrators.fenced.FencedWrites``),
then runs an earlier one again; every one of them failed before the numbering (a red team's finding)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

import pytest

from activities.compensation_steps import await_review, begin_undo, close_review, record_undo, request_compensation
from activities.scheduler_steps import begin_step, fail_order, mark_processed
from adapters.clock import ManualClock
from adapters.cosmos.state_store import CosmosStateStore
from contracts.activities import (
    NOT_OWNED,
    OWNED,
    AwaitReviewInput,
    BeginStepInput,
    BeginUndoInput,
    CloseReviewInput,
    FailOrderInput,
    MarkProcessedInput,
    Owned,
    Processed,
    RecordUndoInput,
    RequestCompensationInput,
    ReviewClosed,
    StepBegun,
    StepResult,
)
from contracts.names import OPERATOR_ALERTS_QUEUE, STATE_CONTAINER
from dependencies import AppContext
from domain import compensation, transitions
from domain.records import LastWrite
from domain.review import pending_review
from domain.states import ProcessState, StepStatus
from operations.actions import claim_answer, resubmit
from orchestrators.agent_call import agent_request
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.orchestrators.support import sample_order

pytestmark = pytest.mark.cosmos

CLIENT = "client-statuses"
STEP_TIMEOUT = timedelta(seconds=60)
RESERVED = {"reservationId": "res-1"}
CHARGED = {"chargeId": "ch-1", "amountCents": 1000}


def _later(ctx: AppContext, delta: timedelta) -> None:
    clock = ctx.clock
    assert isinstance(clock, ManualClock)
    clock.advance(delta)


def _claimed(ctx: AppContext, order_id: str) -> str:
    now = ctx.clock.now()
    ctx.orders.create_or_verify(sample_order(order_id))
    ctx.states.create(transitions.new_record(order_id, CLIENT, now))
    pending = ctx.states.get(order_id)
    assert pending is not None
    claimed = ctx.states.replace(transitions.claim(pending, now, ctx.settings.start_grace))
    assert claimed.locked_by is not None
    return claimed.locked_by


def _begin(
    order_id: str, owner: str, step: str, agent: str, deadline: datetime, number: int | None, tries: int = 1, **kw: Any
) -> BeginStepInput:
    """begin_step's input as the scheduler records it: what a duplicate execution runs again."""
    request = agent_request(
        request_id=f"{owner}:{step}:{agent}" + ("" if tries == 1 else f":{tries}"),
        instance_id=owner,
        order_id=order_id,
        step=step,
        action="do",
        attempt=1,
        deadline=deadline,
        idempotency_key=f"{order_id}:{step}",
        payload={"orderId": order_id},
    )
    return BeginStepInput(request=request, agent=agent, write_number=number, **kw)


def _review(order_id: str, owner: str, until: datetime) -> AwaitReviewInput:
    """``await_review``'s input for the charge's first review, as the attempt's third fenced write."""
    return AwaitReviewInput(
        order_id=order_id,
        instance_id=owner,
        step="charge-payment",
        attempt=1,
        review_id=f"{owner}:charge-payment:review:1",
        until=until,
        error="card declined",
        reason="high impact",
        default_action="compensate",
        amount_cents=250_000,
        write_number=3,
    )


def _charge(ctx: AppContext, order_id: str, owner: str) -> BeginStepInput:
    """begin_step of charge-payment at ``payment`` (write 2), recording the reservation in the same write."""
    return _begin(
        order_id,
        owner,
        "charge-payment",
        "payment",
        ctx.clock.now() + STEP_TIMEOUT,
        2,
        completes=StepResult(step="reserve-inventory", result=RESERVED),
        queue="payment-requests",
    )


def _two_steps_in(ctx: AppContext, order_id: str) -> tuple[str, BeginStepInput, BeginStepInput]:
    """reserve-inventory began (write 1) and succeeded; charge-payment began 30 s later (write 2),
    recording the reservation in the same write."""
    owner = _claimed(ctx, order_id)
    reserve = _begin(
        order_id, owner, "reserve-inventory", "inventory", ctx.clock.now() + STEP_TIMEOUT, 1, announce=True
    )
    assert isinstance(begin_step(ctx, reserve), StepBegun)
    _later(ctx, timedelta(seconds=30))
    charge = _charge(ctx, order_id, owner)
    assert isinstance(begin_step(ctx, charge), StepBegun)
    return owner, reserve, charge


def test_a_late_begin_step_is_refused_and_sends_nothing(app_context: AppContext, sender: Any) -> None:
    ctx = app_context
    owner, reserve, charge = _two_steps_in(ctx, "o-late1")
    before = ctx.states.get("o-late1")
    sent_before = len(sender.sent)
    _later(ctx, timedelta(seconds=5))

    assert begin_step(ctx, reserve) == NOT_OWNED  # the late duplicate of write 1

    after = ctx.states.get("o-late1")
    assert after is not None and before is not None
    assert after.version == before.version  # nothing written
    assert after.steps["reserve-inventory"].status is StepStatus.SUCCEEDED
    assert (after.current_step, after.complete_by) == ("charge-payment", charge.request.deadline)
    assert after.last_write == LastWrite(by=owner, number=2)
    assert len(sender.sent) == sent_before  # no second Processing, no second request


def test_the_supervisor_leaves_a_live_attempt_alone_after_a_late_begin_step(app_context: AppContext) -> None:
    """Applied, the late write moved ``completeBy`` back to the first step's deadline: the supervisor
    retried the live attempt (a counted failure) while its charge still had 20 s."""
    ctx = app_context
    owner, reserve, charge = _two_steps_in(ctx, "o-late2")
    _later(ctx, timedelta(seconds=5))
    begin_step(ctx, reserve)
    _later(ctx, timedelta(seconds=35))
    assert ctx.clock.now() < charge.request.deadline

    report = run_supervisor(ctx, ScanState())

    record = ctx.states.get("o-late2")
    assert record is not None
    assert (report.recovered, record.process_state, record.locked_by) == (0, ProcessState.PROCESSING, owner)


def test_a_late_begin_step_never_points_compensation_at_a_provider_that_did_not_charge(app_context: AppContext) -> None:
    """The primary failed for good, the fallback charged. Applied, the late begin_step of the primary
    put the step back at ``payment``, and the next write logged the charge for compensation there."""
    ctx = app_context
    owner = _claimed(ctx, "o-late3")
    begin_step(ctx, _begin("o-late3", owner, "reserve-inventory", "inventory", ctx.clock.now() + STEP_TIMEOUT, 1))
    _later(ctx, timedelta(seconds=5))
    primary = _charge(ctx, "o-late3", owner)
    begin_step(ctx, primary)
    _later(ctx, timedelta(seconds=5))
    deadline = ctx.clock.now() + STEP_TIMEOUT
    backup = _begin("o-late3", owner, "charge-payment", "payment-backup", deadline, 3, tries=2)
    begin_step(ctx, backup)
    _later(ctx, timedelta(seconds=20))
    assert begin_step(ctx, primary) == NOT_OWNED  # the late duplicate of write 2
    _later(ctx, timedelta(seconds=5))
    ship = _begin(
        "o-late3",
        owner,
        "arrange-shipment",
        "shipping",
        ctx.clock.now() + STEP_TIMEOUT,
        4,
        completes=StepResult(step="charge-payment", result=CHARGED),
    )
    begin_step(ctx, ship)

    record = ctx.states.get("o-late3")
    assert record is not None
    handed = compensation.enter_compensation(
        record, owner, "arrange-shipment: rejected", ctx.clock.now(), owner=owner, failed_step="arrange-shipment"
    )
    assert [(e.step, e.agent) for e in handed.compensation if e.step == "charge-payment"] == [
        ("charge-payment", "payment-backup")
    ]


def test_a_late_begin_step_does_not_wipe_out_a_pending_review(app_context: AppContext) -> None:
    ctx = app_context
    owner, _, charge = _two_steps_in(ctx, "o-late4")
    _later(ctx, timedelta(seconds=10))
    until = ctx.clock.now() + timedelta(hours=24)
    paused = _review("o-late4", owner, until)
    await_review(ctx, paused)
    _later(ctx, timedelta(minutes=5))
    assert begin_step(ctx, charge) == NOT_OWNED  # the late duplicate of write 2, during the pause

    report = run_supervisor(ctx, ScanState())
    record = ctx.states.get("o-late4")
    assert record is not None
    assert pending_review(record) is not None
    assert report.recovered == 0


def test_a_late_await_review_does_not_reopen_a_review_the_attempt_acted_on(app_context: AppContext) -> None:
    ctx = app_context
    owner, _, _ = _two_steps_in(ctx, "o-late5")
    _later(ctx, timedelta(seconds=10))
    paused = _review("o-late5", owner, ctx.clock.now() + ctx.settings.review_timeout)
    await_review(ctx, paused)
    _later(ctx, timedelta(minutes=2))  # the operator answered "retry"; the attempt took it
    retry = _begin("o-late5", owner, "charge-payment", "payment", ctx.clock.now() + STEP_TIMEOUT, 4, tries=2)
    assert isinstance(begin_step(ctx, retry), StepBegun)
    _later(ctx, timedelta(minutes=3))
    assert await_review(ctx, paused) == NOT_OWNED  # the late duplicate of write 3

    record = ctx.states.get("o-late5")
    assert record is not None
    assert pending_review(record) is None
    _later(ctx, STEP_TIMEOUT)  # the retried charge's deadline passes unanswered
    assert run_supervisor(ctx, ScanState()).recovered == 1  # a step's timeout, not the review's day


def test_a_late_begin_undo_does_not_make_a_live_round_look_stuck(app_context: AppContext) -> None:
    ctx = app_context
    _two_steps_in(ctx, "o-late6")
    now = ctx.clock.now()
    record = ctx.states.get("o-late6")
    assert record is not None
    cancelled = ctx.states.replace(compensation.enter_compensation(record, "client", "cancel", now))
    claimed = ctx.states.replace(
        compensation.claim_compensation(
            cancelled, now, ctx.settings.start_grace, ctx.settings.max_failures, "supervisor"
        )
    )
    round_owner = claimed.locked_by
    assert round_owner is not None

    def undo(seq: int, deadline: datetime, number: int) -> BeginUndoInput:
        entry = next(e for e in claimed.compensation if e.seq == seq)
        request = agent_request(
            request_id=compensation.undo_request_id(round_owner, entry.step, entry.agent, 1),
            instance_id=round_owner,
            order_id="o-late6",
            step=entry.step,
            action=entry.undo_action,
            attempt=claimed.attempt,
            deadline=deadline,
            idempotency_key=compensation.undo_idempotency_key("o-late6", entry.step),
            payload={},
        )
        return BeginUndoInput(request=request, agent=entry.agent, seq=seq, write_number=number)

    # write 1 was load_compensation (a read)
    first = undo(1, ctx.clock.now() + STEP_TIMEOUT, 2)
    begin_undo(ctx, first)
    _later(ctx, timedelta(seconds=40))
    record_undo(ctx, RecordUndoInput(order_id="o-late6", instance_id=round_owner, seq=1, write_number=3))
    begin_undo(ctx, undo(2, ctx.clock.now() + STEP_TIMEOUT, 4))
    _later(ctx, timedelta(seconds=5))
    assert begin_undo(ctx, first) == NOT_OWNED  # the late duplicate of write 2
    _later(ctx, timedelta(seconds=25))  # entry 2's undo still has 30 s

    run_supervisor(ctx, ScanState())
    after = ctx.states.get("o-late6")
    assert after is not None
    assert (after.locked_by, after.failure_count) == (round_owner, 0)


def test_the_same_write_again_is_applied_and_an_unnumbered_one_is_not_judged(app_context: AppContext) -> None:
    """A retry after a lost response carries the same number: applied as before (found done). An
    input without a number (scheduled by code from before the numbering) is written as before."""
    ctx = app_context
    owner, _, charge = _two_steps_in(ctx, "o-late7")
    _later(ctx, timedelta(seconds=1))
    assert isinstance(begin_step(ctx, charge), StepBegun)  # write 2 again
    ship = _begin(
        "o-late7",
        owner,
        "arrange-shipment",
        "shipping",
        ctx.clock.now() + STEP_TIMEOUT,
        None,
        completes=StepResult(step="charge-payment", result=CHARGED),
    )
    assert isinstance(begin_step(ctx, ship), StepBegun)  # unnumbered: applied
    record = ctx.states.get("o-late7")
    assert record is not None
    assert record.current_step == "arrange-shipment"
    assert record.last_write == LastWrite(by=owner, number=2)  # an unnumbered write leaves it as it was
    assert isinstance(
        mark_processed(ctx, MarkProcessedInput(order_id="o-late7", instance_id=owner, attempt=1, write_number=5)),
        Processed,
    )


def _another_store(cosmos_db: Any) -> CosmosStateStore:
    """The state store of another host of the app: the same container, a cache of its own."""
    return CosmosStateStore(cosmos_db.get_container_client(STATE_CONTAINER))


def _shipping_then_processed(ctx: AppContext, order_id: str) -> MarkProcessedInput:
    """The order claimed and its last step begun (write 1); ``mark_processed``'s input as write 2."""
    owner = _claimed(ctx, order_id)
    begin_step(ctx, _begin(order_id, owner, "arrange-shipment", "shipping", ctx.clock.now() + STEP_TIMEOUT, 1))
    done = MarkProcessedInput(
        order_id=order_id,
        instance_id=owner,
        attempt=1,
        completes=StepResult(step="arrange-shipment", result={"shipmentId": "shp-1"}),
        write_number=2,
    )
    return done


def test_a_hand_over_found_done_by_an_earlier_run_counts_the_order_out_of_processing_once(
    app_context: AppContext,
) -> None:
    """A second run of ``mark_processed`` (the same write: a retry, or a late duplicate of the last one)
    finds its own ``Processed`` and answers done; the cached in-flight count moves once."""
    ctx = app_context
    _claimed(ctx, "o-late8-other")
    done = _shipping_then_processed(ctx, "o-late8")
    before = ctx.counts.get(ProcessState.PROCESSING)
    assert isinstance(mark_processed(ctx, done), Processed)
    _later(ctx, timedelta(seconds=1))
    assert isinstance(mark_processed(ctx, done), Processed)  # answered done: the orchestration may be waiting
    assert before - ctx.counts.get(ProcessState.PROCESSING) == 1


def test_a_late_run_of_the_newest_write_does_not_take_back_an_answer_noted_after_it(app_context: AppContext) -> None:
    """``await_review`` (write 3) runs again late, after the ops API noted the operator's answer: it is
    on the record already and is not made again, so the review's close (write 4) takes the answer.
    Made again, it appended a fresh ``ReviewRequested`` after the note and the close took the default."""
    ctx = app_context
    owner, _, _ = _two_steps_in(ctx, "o-late9")
    _later(ctx, timedelta(seconds=10))
    review_id = f"{owner}:charge-payment:review:1"
    paused = _review("o-late9", owner, ctx.clock.now() + ctx.settings.review_timeout)
    await_review(ctx, paused)
    _later(ctx, ctx.settings.review_timeout - timedelta(seconds=30))
    record = ctx.states.get("o-late9")
    assert record is not None
    pending = pending_review(record)
    assert pending is not None
    assert not isinstance(claim_answer(ctx, "o-late9", pending, "ana", "retry", "customer confirmed"), tuple)
    noted = ctx.states.get("o-late9")

    _later(ctx, timedelta(seconds=5))
    assert await_review(ctx, paused) is OWNED  # the late run: answered, nothing written
    again = ctx.states.get("o-late9")
    assert again is not None and noted is not None and again.version == noted.version

    _later(ctx, timedelta(seconds=30))
    closing = CloseReviewInput(
        order_id="o-late9",
        instance_id=owner,
        attempt=1,
        review_id=review_id,
        default_action="compensate",
        write_number=4,
    )
    closed = close_review(ctx, closing)
    assert isinstance(closed, ReviewClosed)
    assert (closed.action, closed.operator) == ("retry", "ana")


@pytest.mark.parametrize("supervisor_host", ["this", "another"])
def test_the_newest_write_run_again_after_the_supervisor_took_the_record_is_not_answered_as_owned(
    app_context: AppContext, sender: Any, cosmos_db: Any, supervisor_host: str
) -> None:
    """``begin_step`` (write 2) runs again after its deadline passed and the supervisor retried the order: the
    write is on the record, but the record is no longer the attempt's. Answered "owned", the retired attempt
    sent its agent the step's request once more (after duplicate detection's window, a second call to the
    service) and went on as if it held the order. It is answered ``NotOwned`` and sends nothing; a hand-over
    found done (``mark_processed``) is still answered done whoever holds the record since.

    A supervisor on ``another`` host (a store of its own; red team fence41): the attempt's process judged "made
    already" on the version its own first run wrote (cached, ``lockedBy`` its own) and answered owned."""
    ctx = app_context
    owner, _, charge = _two_steps_in(ctx, "o-late10")
    _later(ctx, STEP_TIMEOUT + timedelta(seconds=1))
    if supervisor_host == "another":
        assert ctx.states.recent("o-late10") is not None  # the attempt's process has its write 2 cached
    supervisor = ctx if supervisor_host == "this" else dataclasses.replace(ctx, states=_another_store(cosmos_db))
    assert run_supervisor(supervisor, ScanState()).recovered == 1
    taken = supervisor.states.get("o-late10")
    assert taken is not None and taken.locked_by != owner
    sent_before = len(sender.sent)

    assert begin_step(ctx, charge) == NOT_OWNED  # write 2 again: made, but the record is not the attempt's now

    after = ctx.states.get("o-late10")
    assert after is not None and after.version == taken.version  # nothing written
    assert len(sender.sent) == sent_before  # no request to the agent for a retired attempt


def test_a_hand_over_run_again_after_the_next_attempt_claimed_the_record_is_answered_done(
    app_context: AppContext,
) -> None:
    ctx = app_context
    done = _shipping_then_processed(ctx, "o-late11")
    assert isinstance(mark_processed(ctx, done), Processed)
    record = ctx.states.get("o-late11")
    assert record is not None
    ctx.states.replace(record.with_changes(ctx.clock.now(), "Noted", "someone-else", "a later writer", locked_by="x"))
    _later(ctx, timedelta(seconds=1))
    assert isinstance(mark_processed(ctx, done), Processed)  # the hand-over is done: answered so


def _failed_then_resubmitted(ctx: AppContext, order_id: str, claimed: bool) -> FailOrderInput:
    """The order failed for good at its charge (``fail_order``, write 2); an operator resubmitted it and, with
    ``claimed``, the next attempt claimed it (its first numbered write not made yet). ``fail_order``'s input."""
    owner = _claimed(ctx, order_id)
    begin_step(ctx, _begin(order_id, owner, "charge-payment", "payment", ctx.clock.now() + STEP_TIMEOUT, 1))
    failed = FailOrderInput(
        order_id=order_id, instance_id=owner, step="charge-payment", attempt=1, error="declined", write_number=2
    )
    assert fail_order(ctx, failed) == OWNED  # the write made, its answer lost: Durable runs the activity again
    _later(ctx, timedelta(minutes=2))
    assert resubmit(ctx, order_id, "ana", "card replaced").status == 200
    if claimed:
        record = ctx.states.get(order_id)
        assert record is not None
        ctx.states.replace(transitions.claim(record, ctx.clock.now(), ctx.settings.start_grace))
    return failed


@pytest.mark.parametrize("claimed", [False, True], ids=["resubmitted", "claimed"])
def test_a_fail_order_run_again_after_a_resubmit_pages_nobody_and_tells_the_submitter_nothing(
    app_context: AppContext, sender: Any, claimed: bool
) -> None:
    """``fail_order`` run again after an operator resubmitted the order (and the next attempt claimed it): its
    write is made (answered done), but the order is no longer its to speak for. It paged ``OrderFailed`` a second
    time, under the next attempt's number (``record.attempt``, a new MessageId), and answered plain "owned", so the
    orchestration told the submitter ``Failed`` while the resubmitted order was being processed again."""
    ctx = app_context
    failed = _failed_then_resubmitted(ctx, f"o-late12-{claimed}", claimed)
    before = ctx.states.get(failed.order_id)
    paged = len(sender.bodies(OPERATOR_ALERTS_QUEUE))

    answer = fail_order(ctx, failed)

    assert sender.bodies(OPERATOR_ALERTS_QUEUE)[paged:] == []  # no second OrderFailed
    assert answer == Owned(moved_on=True)  # done, and the orchestration says nothing to the submitter
    after = ctx.states.get(failed.order_id)
    assert after is not None and before is not None and after.version == before.version  # nothing written


def test_a_compensation_request_run_again_after_the_round_claimed_it_is_done_and_logged_once(
    app_context: AppContext, caplog: Any
) -> None:
    """``request_compensation`` (the ``CompensationRequested`` hand-over) run again after the supervisor's round
    claimed the record: done (``MOVED_ON``), its ``CompensationRequested`` event not logged a second time."""
    ctx = app_context
    owner, _, _ = _two_steps_in(ctx, "o-late13")
    handed = RequestCompensationInput(
        order_id="o-late13",
        instance_id=owner,
        step="charge-payment",
        attempt=1,
        error="declined",
        reason="compensating",
        write_number=3,
    )
    assert request_compensation(ctx, handed) == OWNED  # its answer lost: Durable runs it again
    record = ctx.states.get("o-late13")
    assert record is not None
    now = ctx.clock.now()
    ctx.states.replace(
        compensation.claim_compensation(record, now, ctx.settings.start_grace, ctx.settings.max_failures, "supervisor")
    )

    assert request_compensation(ctx, handed) == Owned(moved_on=True)

    assert [r for r in caplog.records if getattr(r, "event", None) == "CompensationRequested"][1:] == []


def test_a_fail_order_run_again_after_the_supervisor_delivered_what_it_owed_loses_nothing(
    app_context: AppContext, sender: Any
) -> None:
    """Red team: ``moved_on`` is true for a record whose last move is the supervisor's acknowledgement
    (``NotificationsDelivered``), not an operator's action: ``fail_order`` run again after the owed sweep delivered
    and acknowledged what its write owed answers ``MOVED_ON`` (no page, no ``Failed`` from its orchestration). That
    loses nothing: the sweep sent the ``OrderFailed`` alert and the ``Failed`` status before it acknowledged them,
    so the submitter heard how the order ended, once."""
    from supervisor.owed import DELIVERED, deliver_owed

    ctx = app_context
    order_id = "o-late14"
    owner = _claimed(ctx, order_id)
    begin_step(ctx, _begin(order_id, owner, "charge-payment", "payment", ctx.clock.now() + STEP_TIMEOUT, 1))
    failed = FailOrderInput(
        order_id=order_id, instance_id=owner, step="charge-payment", attempt=1, error="declined", write_number=2
    )
    assert fail_order(ctx, failed) == OWNED  # the write made, its answer lost: Durable runs the activity again
    owed = ctx.states.get(order_id)
    assert owed is not None
    assert deliver_owed(ctx, owed)  # the supervisor's sweep, before the activity runs again
    acknowledged = ctx.states.get(order_id)
    assert acknowledged is not None and acknowledged.history[-1].event == DELIVERED
    paged = len(sender.bodies(OPERATOR_ALERTS_QUEUE))

    assert fail_order(ctx, failed) == Owned(moved_on=True)

    assert sender.bodies(OPERATOR_ALERTS_QUEUE)[paged:] == []
    kinds = [a["kind"] for a in sender.bodies(OPERATOR_ALERTS_QUEUE) if a.get("orderId") == order_id]
    assert "OrderFailed" in kinds
    heard = [(s["status"], s["attempt"]) for s in sender.bodies(CLIENT) if s["orderId"] == order_id]
    assert heard.count(("Failed", 1)) >= 1
    assert heard[-1] == ("Failed", 1)
