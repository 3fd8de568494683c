"""An operator action posted again after its first answer was lost is still found as taken when submission
wrote a side note beside it since (``domain.records.SIDE_NOTES``): a prepaid order's payment notification
applied to the resubmitted ``Pending`` record, or a ``Received`` marked owed by a redelivery of the message
that created the record (its send failed; ``submittedAs`` says it again whatever the order did since).

Those notes are not a move of the record: the action is still its latest move, so the repeat is answered
200 ``repeated`` (nothing written), as with no note. Before, the note was taken for another writer's move
and the operator was told the action was refused (409 "not Error", "nothing to cancel"), although it had
been taken."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from adapters.cosmos.state_store import update_once
from contracts.messages import PaymentNotification
from deferral.payment import apply_notification
from domain import transitions
from domain.records import PAYMENT_NOTIFIED, RECEIVED_OWED, StateRecord
from notifications.received import owe_received
from tests.operations.harness import OpsHarness
from tests.operations.test_action_lost_response import ACTIONS, REASON, _lose_next_response
from tests.orchestrators.support import sample_order

pytestmark = pytest.mark.cosmos


def _payment_applied(ops: OpsHarness, order_id: str) -> None:
    """A prepaid order's payment notification, applied as the ``orders`` queue's handler applies it."""
    assert ops.ctx is not None
    ops.ctx.orders.create_or_verify(sample_order(order_id, total_cents=1000, prepaid=True))
    note = PaymentNotification(
        type="PaymentNotification",
        schema_version=1,
        notification_id="n-1",
        order_id=order_id,
        amount_cents=1000,
        currency="EUR",
        provider_reference="psp-1",
    )
    assert apply_notification(ops.ctx, note, 41, owed=[]).kind == "applied"


def _received_owed(ops: OpsHarness, order_id: str) -> None:
    """``Received`` marked owed, as submission marks it when its send failed (``_owe_received``)."""
    assert ops.ctx is not None
    record = ops.ctx.states.get(order_id)
    assert record is not None
    update_once(ops.ctx.states, record, lambda r: owe_received(r, ops.clock.now()))


SIDE_NOTES: dict[str, tuple[Callable[[OpsHarness, str], None], str]] = {
    "payment": (_payment_applied, PAYMENT_NOTIFIED),
    "received-owed": (_received_owed, RECEIVED_OWED),
}
CASES = [
    pytest.param("resubmit", "payment", id="resubmit-then-payment"),  # Pending stays payable
    *(pytest.param(action, "received-owed", id=f"{action}-then-received-owed") for action in sorted(ACTIONS)),
]


def _step_begun(ops: OpsHarness, order_id: str) -> StateRecord:
    """A ``Processing`` record whose attempt began its first step: a cancellation of it marks nothing (an order no
    attempt began a step of owes ``Received`` from its cancellation on, ``owe_before_failure``, so a redelivery's
    mark would write no side note after it)."""
    assert ops.ctx is not None
    record = ops.processing(order_id)
    owner = str(record.locked_by)
    now = ops.clock.now()
    begun = transitions.begin_step(
        record, owner, "reserve-inventory", "inventory", f"{owner}:reserve-inventory:inventory", now, now
    )
    return ops.ctx.states.replace(replace(begun, version=record.version))


# The record each action acts on here: as in test_action_lost_response, but a cancel's has a step begun.
MAKE: dict[str, Callable[[OpsHarness, str], StateRecord]] = {"cancel": _step_begun}


@pytest.mark.parametrize(("action", "note"), CASES)
def test_an_action_posted_again_past_a_side_note_is_answered_taken(
    ops: OpsHarness, monkeypatch: pytest.MonkeyPatch, action: str, note: str
) -> None:
    assert ops.ctx is not None
    make, expected, _event, _counted = ACTIONS[action]
    make = MAKE.get(action, make)
    write_note, note_event = SIDE_NOTES[note]
    order_id = f"o-note-{action}-{note}"
    make(ops, order_id)
    lost = _lose_next_response(ops, monkeypatch, reads_fail=True)  # the operator hears 503: taken or not?
    status, _body = ops.post(f"/api/ops/orders/{order_id}/{action}", REASON)
    assert status == 503 and len(lost) == 2
    write_note(ops, order_id)  # beside the action, before the operator posts it again
    before: StateRecord | None = ops.ctx.states.get(order_id)
    assert before is not None and before.history[-1].event == note_event

    again_status, again = ops.post(f"/api/ops/orders/{order_id}/{action}", REASON)

    assert (again_status, again.get("repeated")) == (200, True), again
    assert again["order"]["processState"] == expected.value
    after = ops.ctx.states.get(order_id)
    assert after is not None and after.process_state is expected
    assert [h.event for h in after.history].count(lost[0]) == 1  # taken once, nothing written again
    assert after.history == before.history
