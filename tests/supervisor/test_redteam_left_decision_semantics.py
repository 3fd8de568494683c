"""Red team of 10ee105: the supervisor carries out a review decision the expired attempt never acted
on "as the attempt itself would have" (``domain.compensation.act_on_left_decision``). Where the attempt
does something other than what the close's action literally says, the supervisor does not follow it:
the outcome of one and the same decision then depends on whether a Cosmos DB outage (or a lost host)
hit the attempt between its close and its next write.

What the live attempt does with a decision (orchestrators/scheduler.py):

- ``_handle_permanent_failure``: ``alternative`` on a step without a fallback agent is ``Action.FAIL``
  (``choice == "alternative" and step.fallback_agent is not None`` is false, and the choice is not
  ``compensate``); ``arrange-shipment`` (the pivot) has no fallback and is reviewed (not past the
  pivot, undo pending, high impact);
- ``_review``: a second review of the same attempt left unanswered compensates, whatever the
  configured default ("reviews not answered in time twice: compensating"), although its
  ``ReviewClosed`` records the default;
- ``retry`` runs the step with ``step.agent`` (the primary), ``alternative`` with the fallback.

Each test states the expected behaviour (what the live attempt does); they failed on 10ee105 and pass since its fixes.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.state_store import CosmosStateStore, update_once
from domain import compensation, review, transitions
from domain.records import StateRecord
from domain.states import ProcessState
from domain.workflow import STEPS
from orchestrators.attempt_plan import plan_attempt
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.supervisor.conftest import MakeContext, note_answer

pytestmark = pytest.mark.cosmos

REPLIES = "order-status-o"
REVIEW_FOR = timedelta(minutes=30)
GRACE = timedelta(seconds=60)
OPERATOR = "ops@contoso.example"


def _claimed(states: CosmosStateStore, order_id: str, clock: ManualClock) -> StateRecord:
    now = clock.now()
    record = states.create(transitions.new_record(order_id, REPLIES, now))
    return update_once(states, record, lambda r: transitions.claim(r, now, GRACE))


def _done(record: StateRecord, owner: str, step: str, agent: str, result: dict[str, Any], now: datetime) -> StateRecord:
    begun = transitions.begin_step(record, owner, step, agent, f"req-{step}", now + timedelta(minutes=1), now)
    return compensation.complete_step_logged(begun, owner, step, result, now + timedelta(minutes=1), now)


def _paused_at_shipment(states: CosmosStateStore, order_id: str, clock: ManualClock) -> StateRecord:
    """Attempt 1: inventory reserved, payment charged, the shipment failed for good; paused for review."""
    record = _claimed(states, order_id, clock)
    owner = str(record.locked_by)
    now = clock.now()

    def move(r: StateRecord) -> StateRecord:
        r = _done(r, owner, "reserve-inventory", "inventory", {"reservationId": "res-1"}, now)
        r = _done(r, owner, "charge-payment", "payment", {"chargeId": "ch-1", "amountCents": 150000}, now)
        r = transitions.begin_step(
            r, owner, "arrange-shipment", "shipping", "req-ship", now + timedelta(minutes=1), now
        )
        review_id = f"{owner}:arrange-shipment:review:1"
        return compensation.await_review(
            r, owner, "arrange-shipment", review_id, now + REVIEW_FOR, now, keep_until=now + REVIEW_FOR + GRACE
        )

    return update_once(states, record, move)


def _note(states: CosmosStateStore, record: StateRecord, action: str, clock: ManualClock) -> StateRecord:
    return note_answer(states, record, action, clock, OPERATOR)


def test_alternative_on_the_shipment_which_has_no_fallback_fails_the_order_as_the_attempt_does(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock
) -> None:
    """Expected: Error (``Failed``), as the live attempt ends an ``alternative`` at ``arrange-shipment``
    (no fallback agent: ``Action.FAIL``). On 10ee105: the supervisor retries the order (Pending, failureCount
    1), so the next attempt runs the pivot step again and may ship an order the live attempt would have
    failed: the operator's one answer ships or fails depending on an outage."""
    ctx = make_ctx(MAX_FAILURES="5")
    assert STEPS["arrange-shipment"].fallback_agent is None
    _note(states, _paused_at_shipment(states, "o-alt", clock), "alternative", clock)
    clock.advance(REVIEW_FOR + GRACE + timedelta(seconds=5))  # the attempt died before acting: expired

    run_supervisor(ctx, ScanState())

    record = states.get("o-alt")
    assert record is not None
    assert record.process_state is ProcessState.ERROR, (
        f"the live attempt fails an 'alternative' at arrange-shipment; the supervisor left it "
        f"{record.process_state.value} (failureCount {record.failure_count}): the pivot step runs again"
    )


def test_the_default_alternative_closed_at_the_shipment_fails_the_order_as_the_attempt_does(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock
) -> None:
    """REVIEW_DEFAULT_ACTION=alternative: nobody answers, the attempt closes the review with the default
    and dies before its next write. Expected: Error, as the live attempt (``_handle_permanent_failure``:
    no fallback -> FAIL). On 10ee105: retried, the shipment runs again."""
    ctx = make_ctx(MAX_FAILURES="5", REVIEW_DEFAULT_ACTION="alternative")
    record = _paused_at_shipment(states, "o-alt-default", clock)
    pending = review.pending_review(record)
    assert pending is not None
    clock.advance(REVIEW_FOR)
    update_once(
        states,
        record,
        lambda r: review.close_review(r, str(r.locked_by), pending.review_id, "alternative", clock.now()),
    )
    clock.advance(GRACE + timedelta(seconds=5))

    run_supervisor(ctx, ScanState())

    moved = states.get("o-alt-default")
    assert moved is not None
    assert moved.process_state is ProcessState.ERROR, (moved.process_state, moved.history[-1])


def test_a_second_review_left_unanswered_compensates_as_the_attempt_does(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock
) -> None:
    """REVIEW_DEFAULT_ACTION=retry. The attempt's first review times out (default retry: the step runs
    again), the step fails again, the second review times out too: the live attempt compensates
    ("reviews not answered in time twice", ``_review``), and its ``ReviewClosed`` says so (its close's
    default is compensate; it said ``retry`` on 10ee105). It dies between that close and
    ``request_compensation``. Expected: Compensating, not a retry that starts the review loop over (the next
    attempt's count of unanswered reviews starts at 0)."""
    ctx = make_ctx(MAX_FAILURES="5", REVIEW_DEFAULT_ACTION="retry")
    record = _claimed(states, "o-twice", clock)
    owner = str(record.locked_by)
    t0 = clock.now()
    first, second = f"{owner}:charge-payment:review:1", f"{owner}:charge-payment:review:2"
    t1 = t0 + REVIEW_FOR
    t2 = t1 + timedelta(minutes=2)

    def move(r: StateRecord) -> StateRecord:
        r = _done(r, owner, "reserve-inventory", "inventory", {"reservationId": "res-1"}, t0)
        r = transitions.begin_step(r, owner, "charge-payment", "payment-backup", "req-1", t0 + timedelta(minutes=1), t0)
        r = compensation.await_review(r, owner, "charge-payment", first, t1, t0, keep_until=t1 + GRACE)
        r = review.close_review(r, owner, first, "retry", t1)  # nobody answered: the default, retry
        r = transitions.begin_step(r, owner, "charge-payment", "payment", "req-2", t1 + timedelta(minutes=1), t1)
        # the primary declines again: its fallback (decide_compensation), which declines too; review 2
        r = transitions.begin_step(r, owner, "charge-payment", "payment-backup", "req-3", t2 + timedelta(minutes=1), t2)
        r = compensation.await_review(
            r, owner, "charge-payment", second, t2 + REVIEW_FOR, t2, keep_until=t2 + REVIEW_FOR + GRACE
        )
        # unanswered again: the attempt's close says what it does next (``_await_review``: compensate)
        return review.close_review(r, owner, second, "compensate", t2 + REVIEW_FOR)

    update_once(states, record, move)
    clock.advance(t2 + REVIEW_FOR + GRACE + timedelta(seconds=5) - t0)

    run_supervisor(ctx, ScanState())

    moved = states.get("o-twice")
    assert moved is not None
    assert moved.process_state is ProcessState.COMPENSATING, (
        f"the live attempt compensates after two unanswered reviews; the supervisor left it "
        f"{moved.process_state.value} (failureCount {moved.failure_count})"
    )


def test_an_operators_retry_runs_the_steps_own_agent_in_the_next_attempt(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock
) -> None:
    """charge-payment: the primary agent declined, its fallback (payment-backup) declined, the attempt
    paused; the operator answers ``retry`` (the live attempt runs the step again with ``step.agent``,
    payment; ``alternative`` would be the fallback). The attempt dies before acting; the supervisor
    "retries as usual" and docs/compensation.md says "the next attempt runs the step with its own
    agent". Expected: the next attempt's plan runs charge-payment with ``payment``. On 10ee105: its plan
    resumes the step with the agent left in flight, payment-backup, the one that just declined (so
    ``retry`` and ``alternative`` are the same answer once the attempt died), and when that declines
    again the fallback is used up: the order pauses for the same review again."""
    ctx = make_ctx(MAX_FAILURES="5")
    record = _claimed(states, "o-retry-agent", clock)
    owner = str(record.locked_by)
    now = clock.now()
    review_id = f"{owner}:charge-payment:review:1"

    def move(r: StateRecord) -> StateRecord:
        r = _done(r, owner, "reserve-inventory", "inventory", {"reservationId": "res-1"}, now)
        r = transitions.begin_step(r, owner, "charge-payment", "payment", "req-1", now + timedelta(minutes=1), now)
        r = transitions.begin_step(
            r, owner, "charge-payment", "payment-backup", "req-2", now + timedelta(minutes=1), now
        )
        return compensation.await_review(
            r, owner, "charge-payment", review_id, now + REVIEW_FOR, now, keep_until=now + REVIEW_FOR + GRACE
        )

    paused = update_once(states, record, move)
    _note(states, paused, "retry", clock)
    clock.advance(REVIEW_FOR + GRACE + timedelta(seconds=5))

    run_supervisor(ctx, ScanState())

    retried = states.get("o-retry-agent")
    assert retried is not None and retried.process_state is ProcessState.PENDING
    plan = plan_attempt(ctx.settings, retried, {"orderId": "o-retry-agent", "totalCents": 150000})
    step = STEPS["charge-payment"]
    assert plan.in_flight.get(step.name, step.agent) == step.agent, (
        f"the operator chose retry ({step.agent}); the next attempt runs {plan.in_flight.get(step.name)}"
    )
