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


def _refund_refused(ops: OpsHarness, order_id: str) -> StateRecord:
    """Reserved and charged, the shipment refused; the round's refund (entry 2, the newest) refused for good."""
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
    moved = compensation.fail_compensation(moved, round_owner, 2, "payment rejected the refund", now)
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


def test_an_entry_that_did_not_fail_is_409_and_nothing_is_written(ops):
    before = _refund_refused(ops, "o-hand-1")
    status, body = ops.post("/api/ops/orders/o-hand-1/compensate", {"reason": "r", "undoneByHand": [1]})
    assert status == 409 and "has not failed" in body["error"], body
    status, body = ops.post("/api/ops/orders/o-hand-1/compensate", {"reason": "r", "undoneByHand": [9]})
    assert status == 409 and "no compensation entry 9" in body["error"], body
    assert ops.ctx is not None and ops.ctx.states.get("o-hand-1").version == before.version


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
