"""``CancelOrder`` through the orders-queue dispatcher, against the Cosmos protocol server: before the
pivot it compensates, after it the cancellation is rejected with a reason and nothing is undone."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from activities import compensation_steps, scheduler_steps
from adapters.cosmos.state_store import update_once
from adapters.remote.simulators.ledger import NetEffect
from adapters.servicebus.sender import SendError
from contracts.names import ORDERS_QUEUE
from contracts.store_retry import ROUND_PROPERTY
from dependencies import AppContext
from domain import transitions
from domain.payments import with_payment
from domain.records import PaymentReceived
from domain.states import ProcessState
from submission.intake import handle_orders_message
from submission.store_outage import STORE_RETRY_DELAYS, original_id
from supervisor.compensation_rounds import claim_due_compensations
from tests.activity_calls import run
from tests.compensation.support import (
    begin_charge,
    compensation_round,
    forward_step,
    shipment_request,
    stored_record,
    submitted_and_claimed,
)
from tests.fakes import FakeReceivedMessage, RecordingSender

FORWARD = "o1:1"


def cancel(ctx: AppContext, order_id: str = "o1") -> Any:
    body = {"type": "CancelOrder", "schemaVersion": 1, "orderId": order_id, "reason": "changed my mind"}
    return handle_orders_message(ctx, FakeReceivedMessage.of(json.dumps(body), message_id=f"cancel-{order_id}"))


def statuses(sender: RecordingSender) -> list[dict[str, Any]]:
    return sender.bodies("client-statuses")


def test_a_cancellation_before_the_pivot_compensates_everything_done_so_far(ctx, ledger, sender, clock):
    """The charge replied, but its result is the scheduler's until its next write (the shipment's
    start): on the record the charge is still in flight, so the round waits for its deadline and
    undoes it by its forward key at each payment agent."""
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    forward_step(ctx, FORWARD, 1, "reserve-inventory", "inventory", results)
    forward_step(ctx, FORWARD, 1, "charge-payment", "payment", results)
    assert ledger.net("o1") == NetEffect(reserved_units=2, charged_cents=1000)
    result = cancel(ctx)
    assert result.settlement.kind == "complete"
    cancelled = stored_record(ctx)
    assert cancelled.process_state is ProcessState.COMPENSATING
    assert cancelled.last_error == "cancelled by the client: changed my mind"
    # The forward attempt lost the record: it cannot go on to the pivot (nor record the charge, nor send the shipment).
    shipment = {
        "request": shipment_request(FORWARD, clock.now() + timedelta(seconds=60)),
        "agent": "shipping",
        "completes": {"step": "charge-payment", "result": results["charge-payment"]},
        "queue": "shipping-requests",
    }
    assert run(scheduler_steps.begin_step, ctx, shipment) == {"owned": False}
    assert sender.message_ids("shipping-requests") == []
    assert claim_due_compensations(ctx).starts == []  # the charge is in flight on the record
    clock.advance(timedelta(seconds=60))
    [start] = claim_due_compensations(ctx).starts
    compensation_round(ctx, start.instance_id, start.round)
    assert stored_record(ctx).process_state is ProcessState.COMPENSATED
    assert ledger.net("o1") == NetEffect()


def test_a_cancellation_while_a_step_is_in_flight_waits_for_that_steps_deadline(ctx, clock):
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    forward_step(ctx, FORWARD, 1, "reserve-inventory", "inventory", results)
    begin_charge(ctx, FORWARD, results=results)  # records the reservation with the charge's start
    cancel(ctx)
    cancelled = stored_record(ctx)
    assert cancelled.complete_by == clock.now() + timedelta(seconds=60)
    assert [(e.step, e.agent) for e in cancelled.compensation] == [
        ("reserve-inventory", "inventory"),
        ("charge-payment", "payment"),  # the one agent the charge went to
    ]
    # a known result (the reservation id), not an unknown outcome
    assert cancelled.compensation[0].data == {"reservationId": results["reserve-inventory"]["reservationId"]}
    assert claim_due_compensations(ctx).starts == []  # the charge may still be in flight
    clock.advance(timedelta(seconds=60))
    assert len(claim_due_compensations(ctx).starts) == 1


def test_a_cancellation_during_a_review_pause_compensates_now_not_at_the_review_deadline(ctx, clock):
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    forward_step(ctx, FORWARD, 1, "reserve-inventory", "inventory", results)
    begin_charge(ctx, FORWARD, results=results)  # records the reservation with the charge's start
    review = {
        "orderId": "o1",
        "instanceId": FORWARD,
        "step": "charge-payment",
        "attempt": 1,
        "reviewId": f"{FORWARD}:charge-payment:review:1",
        "until": (clock.now() + timedelta(hours=24)).isoformat(),
        "defaultAction": "compensate",
        "error": "card declined",
    }
    assert run(compensation_steps.await_review, ctx, review) != {"owned": False}
    assert stored_record(ctx).complete_by > clock.now() + timedelta(hours=24)

    cancel(ctx)

    cancelled = stored_record(ctx)
    assert cancelled.process_state is ProcessState.COMPENSATING
    assert cancelled.complete_by == clock.now()
    assert len(claim_due_compensations(ctx).starts) == 1  # not a day later


def test_a_cancellation_of_an_order_not_yet_started_ends_compensated_with_nothing_undone(ctx, sender):
    ctx.orders.create_or_verify({"id": "o1", "orderId": "o1", "totalCents": 1})
    ctx.states.create(transitions.new_record("o1", "client-statuses", ctx.clock.now()))
    cancel(ctx)
    [start] = claim_due_compensations(ctx).starts
    assert compensation_round(ctx, start.instance_id, start.round) == []
    assert stored_record(ctx).process_state is ProcessState.COMPENSATED
    assert statuses(sender)[-1]["status"] == "Compensated"


def test_a_cancellation_after_the_pivot_is_rejected_and_nothing_is_undone(ctx, ledger, sender):
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    for step, agent in (("reserve-inventory", "inventory"), ("charge-payment", "payment")):
        forward_step(ctx, FORWARD, 1, step, agent, results)
    forward_step(ctx, FORWARD, 1, "arrange-shipment", "shipping", results)
    before = stored_record(ctx)
    result = cancel(ctx)
    assert result.settlement.kind == "complete"
    rejected = statuses(sender)[-1]
    assert rejected["status"] == "CancellationRejected"
    assert "point of no return" in rejected["reason"]
    assert stored_record(ctx).version == before.version
    assert ledger.effects("o1", "refund") == [] and ledger.effects("o1", "release") == []


def test_a_cancellation_while_the_pivot_is_in_flight_is_rejected(ctx, sender, clock):
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    for step, agent in (("reserve-inventory", "inventory"), ("charge-payment", "payment")):
        forward_step(ctx, FORWARD, 1, step, agent, results)
    request = shipment_request(FORWARD, clock.now() + timedelta(seconds=60))
    run(scheduler_steps.begin_step, ctx, {"request": request, "agent": "shipping"})
    cancel(ctx)
    assert statuses(sender)[-1]["status"] == "CancellationRejected"
    assert stored_record(ctx).process_state is ProcessState.PROCESSING


def test_a_second_cancellation_changes_nothing(ctx):
    submitted_and_claimed(ctx)
    cancel(ctx)
    before = stored_record(ctx)
    assert cancel(ctx).settlement.kind == "complete"
    assert stored_record(ctx).version == before.version


def test_a_cancellation_for_an_unknown_order_is_dead_lettered_after_looking_again(app_context, sender):
    """Its order may still be on its way (submission/store_outage.py): it looks again later, on the
    orders' own retry schedule, and after the last round it is dead-lettered ``UnknownOrder``."""
    first = cancel(app_context, "nobody")
    assert first.settlement.kind == "complete"
    assert [original_id(m) for m in sender.message_ids(ORDERS_QUEUE)] == ["cancel-nobody"]
    body = {"type": "CancelOrder", "schemaVersion": 1, "orderId": "nobody", "reason": "changed my mind"}
    last = FakeReceivedMessage.of(json.dumps(body), message_id=f"cancel-nobody:store-retry:{len(STORE_RETRY_DELAYS)}")
    last.application_properties = {ROUND_PROPERTY: len(STORE_RETRY_DELAYS)}
    result = handle_orders_message(app_context, last)
    assert result.settlement.kind == "deadletter"
    assert result.settlement.reason == "UnknownOrder"


def _prepaid_record(app_context: AppContext) -> None:
    from domain.records import PaymentReceived

    app_context.orders.create_or_verify({"id": "o1", "orderId": "o1", "totalCents": 2500})
    record = transitions.new_record("o1", "client-statuses", app_context.clock.now())
    paid = PaymentReceived(
        notification_id="pay-o1",
        amount_cents=2500,
        currency="EUR",
        provider_reference="psp-123",
        received_at=app_context.clock.now(),
    )
    app_context.states.create(replace(record, payment=paid))


def test_a_prepayment_never_captured_before_a_cancellation_raises_a_release_alert(app_context, sender):
    _prepaid_record(app_context)
    cancel(app_context)
    [start] = claim_due_compensations(app_context).starts
    compensation_round(app_context, start.instance_id, start.round)

    assert stored_record(app_context).process_state is ProcessState.COMPENSATED
    alerts = [a for a in sender.bodies("operator-alerts") if a["kind"] == "PrepaymentToRelease"]
    assert len(alerts) == 1
    assert alerts[0]["orderId"] == "o1"
    assert "psp-123" in alerts[0]["summary"]


def _apply_payment(ctx: AppContext) -> None:
    """The provider's notification applied to the record, as ``deferral.apply`` does for a Processing order."""
    paid = PaymentReceived(
        notification_id="pay-o1",
        amount_cents=1000,
        currency="EUR",
        provider_reference="psp-123",
        received_at=ctx.clock.now(),
    )
    update_once(ctx.states, stored_record(ctx), lambda r: with_payment(r, paid, ctx.clock.now()))


def _release_alerts(sender: RecordingSender) -> list[dict[str, Any]]:
    return [a for a in sender.bodies("operator-alerts") if a["kind"] == "PrepaymentToRelease"]


def test_a_captured_prepayment_is_refunded_by_its_undo_and_raises_no_release_alert(ctx, ledger, sender):
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    forward_step(ctx, FORWARD, 1, "reserve-inventory", "inventory", results)
    forward_step(ctx, FORWARD, 1, "charge-payment", "payment", results)
    _apply_payment(ctx)
    cancel(ctx)  # the capture replied; its result is not on the record yet: entries with their outcome unknown
    ctx.clock.advance(ctx.settings.step_timeout)  # the step's deadline passes: the round is due
    [start] = claim_due_compensations(ctx).starts
    compensation_round(ctx, start.instance_id, start.round)

    final = stored_record(ctx)
    assert final.process_state is ProcessState.COMPENSATED
    assert ledger.net("o1") == NetEffect(reserved_units=0, charged_cents=0)  # the undo returned the money
    refunds = [e.undo_result for e in final.compensation if e.step == "charge-payment"]
    assert {"amountCents": 1000} in [{"amountCents": r["amountCents"]} for r in refunds if r]
    assert any(r and r["refundId"] for r in refunds)
    assert _release_alerts(sender) == []


def test_a_prepayment_whose_capture_never_ran_raises_a_release_alert_after_a_cancel(ctx, ledger, sender):
    """Red team (operator actions): the payment step began (it waits for the notification, no capture
    sent), the notification was applied, then the order was cancelled. ``enter_compensation`` logs
    unknown-outcome entries for the started step; their undo by key finds nothing to refund and
    succeeds. Those entries are no proof the money was returned: the undo's own answer says nothing
    was, so the prepayment must be released (``PrepaymentToRelease``)."""
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    forward_step(ctx, FORWARD, 1, "reserve-inventory", "inventory", results)
    begin_charge(ctx, FORWARD, 1, results)  # the capture waits for the notification: no call is made
    _apply_payment(ctx)
    cancel(ctx)
    ctx.clock.advance(ctx.settings.step_timeout)
    [start] = claim_due_compensations(ctx).starts
    compensation_round(ctx, start.instance_id, start.round)

    final = stored_record(ctx)
    assert final.process_state is ProcessState.COMPENSATED
    assert ledger.net("o1") == NetEffect(reserved_units=0, charged_cents=0)  # nothing was captured
    payment_entries = [e for e in final.compensation if e.step == "charge-payment"]
    assert [e.agent for e in payment_entries] == ["payment"]  # unknown outcome: the agent the step went to
    assert all(e.undo_result == {"refundId": None, "amountCents": 0} for e in payment_entries)
    [alert] = _release_alerts(sender)
    assert alert["orderId"] == "o1"
    assert "psp-123" in alert["summary"]
    assert alert["details"]["providerReference"] == "psp-123"


class AlertsFailOnce(RecordingSender):
    """A sender whose first send to ``operator-alerts`` fails (Service Bus unavailable for a moment)."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def send(self, queue: str, message: Any) -> None:
        if queue == "operator-alerts" and not self.failed:
            self.failed = True
            raise SendError("send to 'operator-alerts' failed")
        super().send(queue, message)


def test_a_release_alert_whose_send_fails_fails_the_activity_and_its_retry_sends_it(app_context):
    """Money left at the provider: a failed send of ``PrepaymentToRelease`` is not only logged (found by the
    runner's ``unreleased_prepayments`` at 1,000 orders, all-faults): the activity fails, and its retry finds
    the write made and sends the alert."""
    _prepaid_record(app_context)
    cancel(app_context)
    [start] = claim_due_compensations(app_context).starts
    flaky = AlertsFailOnce()
    ctx = replace(app_context, sender=flaky)
    with pytest.raises(SendError):
        compensation_round(ctx, start.instance_id, start.round)
    assert stored_record(app_context).process_state is ProcessState.COMPENSATED
    assert _release_alerts(flaky) == []

    retried = run(compensation_steps.finish_compensation, ctx, {"orderId": "o1", "instanceId": start.instance_id})
    assert retried["owned"]
    assert [a["orderId"] for a in _release_alerts(flaky)] == ["o1"]
