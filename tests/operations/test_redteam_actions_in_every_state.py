"""Red team: every operator action on an order in every state, through the real runtime. Each answer is
a 200 that moved the record as documented (operations/actions.py), or a 4xx JSON error that left the
record exactly as it was: never a 500, never a half-applied action."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

import pytest

from domain import compensation, transitions
from domain.records import StateRecord
from domain.states import ProcessState
from tests.operations.harness import OpsHarness, first_review

pytestmark = pytest.mark.cosmos


def _write(ops: OpsHarness, before: StateRecord, after: StateRecord) -> StateRecord:
    assert ops.ctx is not None
    return ops.ctx.states.replace(replace(after, version=before.version))


def _compensating(ops: OpsHarness, order_id: str) -> StateRecord:
    record = ops.error(order_id)
    return _write(ops, record, compensation.enter_compensation(record, "ops", "why", ops.clock.now()))


def _compensation_round(ops: OpsHarness, order_id: str) -> StateRecord:
    record = _compensating(ops, order_id)
    claimed = compensation.claim_compensation(record, ops.clock.now(), timedelta(seconds=60), 5, "supervisor")
    return _write(ops, record, claimed)


def _compensated(ops: OpsHarness, order_id: str) -> StateRecord:
    record = _compensation_round(ops, order_id)
    done = compensation.finish_compensation(record, str(record.locked_by), ops.clock.now())
    return _write(ops, record, done)


def _compensation_failed(ops: OpsHarness, order_id: str) -> StateRecord:
    record = _compensating(ops, order_id)
    now = ops.clock.now()
    for _ in range(6):  # every round misses its deadline
        record = _write(ops, record, compensation.claim_compensation(record, now, timedelta(0), 5, "supervisor"))
        if record.process_state is ProcessState.COMPENSATION_FAILED:
            return record
    raise AssertionError("never CompensationFailed")


def _processed(ops: OpsHarness, order_id: str) -> StateRecord:
    record = ops.processing(order_id)
    return _write(ops, record, transitions.mark_processed(record, str(record.locked_by), ops.clock.now()))


STATES: dict[str, Callable[[OpsHarness, str], StateRecord]] = {
    "Pending": OpsHarness.pending,
    "Processing": OpsHarness.processing,
    "Processing, review pending": OpsHarness.awaiting_review,
    "Error": OpsHarness.error,
    "Compensating, due": _compensating,
    "Compensating, round running": _compensation_round,
    "Compensated": _compensated,
    "CompensationFailed": _compensation_failed,
    "Processed": _processed,
}
# (state, action) -> the state the action leads to; every pair not listed must be refused (409)
ALLOWED = {
    ("Error", "resubmit"): "Pending",
    ("Error", "compensate"): "Compensating",
    ("CompensationFailed", "compensate"): "Compensating",
    ("Pending", "cancel"): "Compensating",
    ("Processing", "cancel"): "Compensating",
    ("Processing, review pending", "cancel"): "Compensating",
    ("Error", "cancel"): "Compensating",
    # a review of the written-only pause is 409 too: no orchestration waits for it here (the paused
    # orchestration's answer is tests/operations/test_review_flow.py)
}


@pytest.mark.parametrize("action", ["resubmit", "cancel", "compensate", "review"])
@pytest.mark.parametrize("state", sorted(STATES))
def test_an_action_in_any_state_is_applied_whole_or_refused_with_a_4xx(ops, state, action):
    assert ops.ctx is not None
    order_id = "o-" + "".join(c for c in state.lower() if c.isalnum())[:20] + "-" + action
    before = STATES[state](ops, order_id)
    body = {"reason": "red team"} | (
        {"action": "fail", "reviewId": first_review(order_id)} if action == "review" else {}
    )
    status, answer = ops.post(f"/api/ops/orders/{order_id}/{action}", body)
    after = ops.ctx.states.get(order_id)
    expected = ALLOWED.get((state, action))
    if expected is None:
        assert status == 409 and isinstance(answer, dict) and answer.get("error"), (status, answer)
        # a refused answer to a review of the attempt holding the record that the record does not know proves the
        # version it read the latest by writing it back unchanged (operations.actions.read_is_latest): its _etag only
        assert replace(after, version=None) == replace(before, version=None), "a refused action changed the record"
    else:
        assert status == 200, (status, answer)
        assert after.process_state.value == expected, after.process_state
