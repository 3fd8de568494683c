"""Red team (compensation): the ops API's compensate of a ``CompensationFailed`` order whose refund its provider
refused for good, through the real Functions runtime.

Posted again as the alert said, the compensate sent the same refund under the same key, refused again, and the
order came back ``CompensationFailed`` with the reservation never released. Now the operator who refunded by hand
says so: ``{"reason": "...", "undoneByHand": [<seq>]}``; only an entry whose undo failed (409 otherwise, nothing
written), only on compensate (400 elsewhere), and the order's page shows who undid it (``undoneBy``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from domain import compensation, transitions
from domain.records import StateRecord
from tests.operations.harness import OpsHarness

pytestmark = pytest.mark.cosmos

OPERATOR_NAME = "ops@contoso.example"


def _write(ops: OpsHarness, before: StateRecord, after: StateRecord) -> StateRecord:
    assert ops.ctx is not None
    return ops.ctx.states.replace(replace(after, version=before.version))


def _refund_refused(ops: OpsHarness, order_id: str, *, undo_fails: bool = True) -> StateRecord:
    """Reserved and charged, the shipment refused; the round's refund (entry 2, the newest) refused for good
    (``undo_fails``; else every round misses its deadline until the rounds run out)."""
    record = ops.processing(order_id)
    owner, now = str(record.locked_by), ops.clock.now()
    later = now + timedelta(minutes=1)
    moved = record
    done: list[tuple[str, str, dict[str, Any]]] = [
        ("reserve-inventory", "inventory", {"reservationId": "res-1"}),
        ("charge-payment", "payment", {"chargeId": "ch-1", "amountCents": 1000}),
    ]
    for step, agent, result in done:
        moved = transitions.begin_step(moved, owner, step, agent, f"{owner}:{step}:{agent}", later, now)
        moved = compensation.complete_step_logged(moved, owner, step, result, later, now)
    moved = compensation.enter_compensation(moved, owner, "no carrier", now, owner=owner)
    moved = compensation.claim_compensation(moved, now, timedelta(seconds=60), 5, "supervisor")
    round_owner = str(moved.locked_by)
    moved = compensation.begin_undo(moved, round_owner, 2, f"{round_owner}:charge-payment:payment:undo:1", later, now)
    if undo_fails:
        moved = compensation.fail_compensation(moved, round_owner, 2, "payment rejected the refund", now)
    while moved.process_state.value == "Compensating":  # each round missed its deadline
        moved = compensation.claim_compensation(moved, later + timedelta(minutes=5), timedelta(0), 5, "supervisor")
    return _write(ops, record, moved)


def test_compensate_names_an_entry_undone_by_hand(ops):
    _refund_refused(ops, "o-hand")
    status, body = ops.post(
        "/api/ops/orders/o-hand/compensate", {"reason": "refunded at the provider", "undoneByHand": [2]}
    )
    assert status == 200 and body["order"]["processState"] == "Compensating", body
    status, page = ops.get("/api/ops/orders/o-hand")
    assert status == 200
    assert [(e["seq"], e["outcome"], e.get("undoneBy")) for e in page["compensation"]] == [
        (1, None, None),  # the reservation: the next round releases it
        (2, "Undone", OPERATOR_NAME),
    ]
    assert [h["event"] for h in page["state"]["history"][-2:]] == ["UndoneByHand", "CompensationRequested"]
    # posted again (its answer lost): taken already, nothing written
    again = ops.post("/api/ops/orders/o-hand/compensate", {"reason": "refunded at the provider", "undoneByHand": [2]})
    assert again[0] == 200 and again[1].get("repeated") is True


def test_an_entry_already_undone_or_unknown_is_409_and_nothing_is_written(ops):
    before = _refund_refused(ops, "o-hand-1")
    for given, why in [([3], "no compensation entry 3"), ([1, 5], "no compensation entry 5")]:
        status, body = ops.post("/api/ops/orders/o-hand-1/compensate", {"reason": "r", "undoneByHand": given})
        assert status == 409 and why in body["error"], body
    assert ops.ctx is not None and ops.ctx.states.get("o-hand-1").version == before.version
    ops.error("o-hand-error")  # not CompensationFailed: compensated as usual, nothing to settle by hand
    status, body = ops.post("/api/ops/orders/o-hand-error/compensate", {"reason": "r", "undoneByHand": [1]})
    assert status == 409 and "only the entries of a CompensationFailed order" in body["error"], body


def test_rounds_that_kept_dying_are_settled_by_hand_too(ops):
    """No undo failed: every round missed its deadline (its agent broken for this order) until the rounds ran out.
    The operator undoes both entries by hand; the next round finds nothing left and ends Compensated."""
    record = _refund_refused(ops, "o-dying", undo_fails=False)
    assert record.process_state.value == "CompensationFailed" and [e.outcome for e in record.compensation] == [
        None,
        None,
    ]
    status, body = ops.post("/api/ops/orders/o-dying/compensate", {"reason": "both by hand", "undoneByHand": [1, 2]})
    assert status == 200, body
    assert ops.ctx is not None
    moved = ops.ctx.states.get("o-dying")
    assert [(e.outcome, e.undone_by) for e in moved.compensation] == [("Undone", OPERATOR_NAME)] * 2
    now = ops.clock.now()
    claimed = compensation.claim_compensation(moved, now, timedelta(seconds=60), 5, "supervisor")
    done = compensation.finish_compensation(claimed, str(claimed.locked_by), now)
    assert done.process_state.value == "Compensated"


@pytest.mark.parametrize("given", [2, [True], ["2"], [0], [-1], [2.0], list(range(1, 30)), None])
def test_a_malformed_list_is_400(ops, given):
    _refund_refused(ops, "o-hand-2")
    status, body = ops.post("/api/ops/orders/o-hand-2/compensate", {"reason": "r", "undoneByHand": given})
    assert status == 400 and "undoneByHand" in body["error"], body


@pytest.mark.parametrize("action", ["resubmit", "cancel"])
def test_only_compensate_takes_it(ops, action):
    ops.error("o-other")
    status, body = ops.post(f"/api/ops/orders/o-other/{action}", {"reason": "r", "undoneByHand": [1]})
    assert status == 400 and "unknown fields: undoneByHand" in body["error"], body
