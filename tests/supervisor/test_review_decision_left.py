"""The supervisor carries out a review decision the expired attempt never acted on (an operator's noted
answer, or the attempt's own close), against the Cosmos DB protocol server: the order goes where the
decision says, in one conditional write, with the alert and status a failure owes; never a retry as if
nobody had decided."""

from __future__ import annotations

from datetime import timedelta

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.state_store import CosmosStateStore, update_once
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain import compensation, review, transitions
from domain.records import StateRecord
from domain.states import ProcessState
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.fakes import RecordingSender
from tests.supervisor.conftest import MakeContext, note_answer

pytestmark = pytest.mark.cosmos

STEP = "charge-payment"
REPLIES = "order-status-o"
REVIEW_FOR = timedelta(minutes=30)
OPERATOR = "ops@contoso.example"


def paused(states: CosmosStateStore, order_id: str, clock: ManualClock) -> StateRecord:
    """Attempt 1 of ``order_id`` paused for review until REVIEW_FOR from now."""
    now = clock.now()
    record = states.create(transitions.new_record(order_id, REPLIES, now))
    record = update_once(states, record, lambda r: transitions.claim(r, now, timedelta(seconds=60)))
    owner = str(record.locked_by)
    review_id = f"{owner}:{STEP}:review:1"
    return update_once(
        states,
        record,
        lambda r: compensation.await_review(
            transitions.begin_step(r, owner, STEP, "payment", "req-1", now + timedelta(minutes=2), now),
            owner,
            STEP,
            review_id,
            now + REVIEW_FOR,
            now,
        ),
    )


def answer(states: CosmosStateStore, record: StateRecord, action: str, clock: ManualClock) -> StateRecord:
    return note_answer(states, record, action, clock, OPERATOR)


def test_an_answer_noted_to_an_attempt_that_died_is_carried_out_by_the_supervisor(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock, sender: RecordingSender
) -> None:
    ctx = make_ctx(MAX_FAILURES="3")
    answer(states, paused(states, "o-fail", clock), "fail", clock)
    answer(states, paused(states, "o-comp", clock), "compensate", clock)
    answer(states, paused(states, "o-retry", clock), "retry", clock)
    clock.advance(REVIEW_FOR - timedelta(seconds=5))
    early = run_supervisor(ctx, ScanState())
    assert early.found == 0  # the attempts may still act: nothing is done before their deadline

    clock.advance(timedelta(seconds=10))
    report = run_supervisor(ctx, ScanState())

    failed, compensating, retried = (states.get(o) for o in ("o-fail", "o-comp", "o-retry"))
    assert failed is not None and compensating is not None and retried is not None
    assert failed.process_state is ProcessState.ERROR, failed.history[-1]
    assert compensating.process_state is ProcessState.COMPENSATING, compensating.history[-1]
    assert retried.process_state is ProcessState.PENDING and retried.failure_count == 1
    for record, action in ((failed, "fail"), (compensating, "compensate"), (retried, "retry")):
        review_id = f"{record.order_id}:1:{STEP}:review:1"
        assert review.review_closed(record, review_id) == review.ClosedReview(review_id, action, "ops@contoso.example")
    # the failure's alert and status went out and were acknowledged, as for a failure by the attempt
    alerts = [a for a in sender.bodies(OPERATOR_ALERTS_QUEUE) if a["orderId"] == "o-fail"]
    assert [a["kind"] for a in alerts] == ["OrderFailed"]
    assert [s["status"] for s in sender.bodies(REPLIES) if s["orderId"] == "o-fail"] == ["Failed"]
    acknowledged = states.get("o-fail")
    assert acknowledged is not None and acknowledged.complete_by is None
    assert sorted(report.to_terminate) == ["o-comp:1", "o-fail:1", "o-retry:1"]


def test_the_attempts_own_close_with_its_default_is_carried_out(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock
) -> None:
    ctx = make_ctx()
    record = paused(states, "o-closed", clock)
    clock.advance(REVIEW_FOR)
    pending = review.pending_review(record)
    assert pending is not None
    update_once(
        states, record, lambda r: review.close_review(r, str(r.locked_by), pending.review_id, "compensate", clock.now())
    )
    clock.advance(timedelta(minutes=1))

    run_supervisor(ctx, ScanState())

    moved = states.get("o-closed")
    assert moved is not None
    assert moved.process_state is ProcessState.COMPENSATING
    assert moved.failure_count == 0  # the attempt's decision, not a counted failure
    assert "review not answered in time: default compensate" in (moved.last_error or "")
