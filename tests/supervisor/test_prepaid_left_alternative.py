"""A review decision ``alternative`` left by an attempt that died, on a prepaid order's payment step: the
supervisor carries it out as the attempt would (``domain.compensation.act_on_left_decision``), and for a
prepaid order no other provider can take the capture over (the customer paid at the first one). It is
read as on a step without a fallback: ``fail`` (Error, nothing undone), not a retry whose next attempt
captures at the backup provider."""

from __future__ import annotations

from datetime import timedelta

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.state_store import CosmosStateStore, update_once
from domain import compensation, transitions
from domain.records import StateRecord
from domain.states import ProcessState
from domain.workflow import STEPS
from orchestrators.attempt_plan import plan_attempt
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.orchestrators.support import sample_order
from tests.supervisor.conftest import MakeContext, note_answer
from tests.supervisor.test_redteam_left_decision_semantics import GRACE, OPERATOR, REVIEW_FOR, _claimed, _done

pytestmark = pytest.mark.cosmos


def _paused_at_capture(states: CosmosStateStore, order_id: str, clock: ManualClock) -> StateRecord:
    """Attempt 1 of a prepaid order: inventory reserved, the capture at the first provider refused for
    good (a prepaid order never falls back); paused for review."""
    record = _claimed(states, order_id, clock)
    owner = str(record.locked_by)
    now = clock.now()

    def move(r: StateRecord) -> StateRecord:
        r = _done(r, owner, "reserve-inventory", "inventory", {"reservationId": "res-1"}, now)
        r = transitions.begin_step(r, owner, "charge-payment", "payment", "req-1", now + timedelta(minutes=1), now)
        review_id = f"{owner}:charge-payment:review:1"
        return compensation.await_review(
            r, owner, "charge-payment", review_id, now + REVIEW_FOR, now, keep_until=now + REVIEW_FOR + GRACE
        )

    return update_once(states, record, move)


@pytest.mark.parametrize("prepaid", [True, False])
def test_an_alternative_left_on_a_prepaid_capture_fails_the_order(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock, prepaid: bool
) -> None:
    ctx = make_ctx(MAX_FAILURES="5")
    order_id = f"o-left-alt-{prepaid}"
    ctx.orders.create_or_verify(sample_order(order_id, total_cents=150000, prepaid=prepaid))
    note_answer(states, _paused_at_capture(states, order_id, clock), "alternative", clock, OPERATOR)
    clock.advance(REVIEW_FOR + GRACE + timedelta(seconds=5))

    run_supervisor(ctx, ScanState())

    after = states.get(order_id)
    assert after is not None
    if prepaid:
        assert after.process_state is ProcessState.ERROR, [(h.event, h.detail) for h in after.history[-3:]]
        return
    # a charged order's alternative: retried, the next attempt resumes the step with the backup provider
    assert after.process_state is ProcessState.PENDING
    plan = plan_attempt(ctx.settings, after, sample_order(order_id, total_cents=150000))
    assert plan.in_flight.get("charge-payment") == STEPS["charge-payment"].fallback_agent
