"""A prepaid order's PaymentNotification on every path, through the registered orders trigger, the
in-process broker (real deferral, receive-by-sequence-number) and the Cosmos protocol server."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from activities import scheduler_steps
from contracts.names import ORDERS_QUEUE, PAYMENT_NOTIFIED_EVENT
from domain.deferral import DeferralReason, EntryStatus
from domain.states import ProcessState
from domain.timefmt import to_text
from submission.store_outage import STORE_RETRY_DELAYS
from tests.activity_calls import run
from tests.contexts import while_using
from tests.deferral.support import (
    TOTAL,
    DurableClientStub,
    alerts,
    deferred_sequence_numbers,
    deliver,
    notification,
    order,
    send,
)
from tests.fakes import StateStoreThatFails

pytestmark = pytest.mark.cosmos


def begin_payment_step(ctx: Any, instance: str = "p1:1") -> dict[str, Any]:
    """What the scheduler's BEGIN_STEP activity does when the attempt reaches a prepaid payment step
    (the reservation done by an earlier attempt): no ``queue``, since the capture waits for the
    payment, so the activity only records the start and answers the payment it finds."""
    request = {
        "requestId": f"{instance}:charge-payment:payment",
        "instanceId": instance,
        "orderId": "p1",
        "step": "charge-payment",
        "action": "do",
        "attempt": 1,
        "deadline": to_text(ctx.clock.now() + timedelta(seconds=60)),
        "idempotencyKey": "p1:charge-payment",
        "payload": {"amountCents": TOTAL, "currency": "EUR", "customerId": "cust-1", "prepaid": True},
    }
    began: dict[str, Any] = run(scheduler_steps.begin_step, ctx, {"request": request, "agent": "payment"})
    return began


def test_notification_before_its_order_is_deferred_then_applied_when_the_order_arrives(functions, ctx, broker):
    send(broker, notification())
    assert deliver(functions, broker)
    [seq] = deferred_sequence_numbers(broker)
    doc = ctx.deferrals.get("p1")
    assert [(e.sequence_number, e.reason, e.status) for e in doc.entries] == [
        (seq, DeferralReason.ORDER_NOT_SUBMITTED, EntryStatus.DEFERRED)
    ]
    assert ctx.states.get("p1") is None

    client = DurableClientStub()
    send(broker, order())
    assert deliver(functions, broker, client)

    record = ctx.states.get("p1")
    assert record.payment is not None
    assert (record.payment.notification_id, record.payment.sequence_number) == ("n-1", seq)
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    # completed on the receiver that fetched it; only its one look-again (RetryDeferred) is left
    assert [m.subject for m in broker.peek(ORDERS_QUEUE, 10)] == ["RetryDeferred"]
    assert broker.counters(ORDERS_QUEUE).deferred_received == 1
    # the fast path still claimed the order (the claim used the record re-read after the payment)
    assert record.process_state is ProcessState.PROCESSING
    assert [s[1] for s in client.started] == ["p1:1"]
    assert client.raised == []  # nobody waits yet: the payment step will find it on the record
    assert begin_payment_step(ctx)["payment"]["notificationId"] == "n-1"


def test_notification_after_the_order_before_the_payment_step_is_recorded_on_the_state_record(functions, ctx, broker):
    send(broker, order())
    deliver(functions, broker)
    client = DurableClientStub()
    send(broker, notification())
    deliver(functions, broker, client)

    assert broker.peek(ORDERS_QUEUE, 10) == []
    assert ctx.states.get("p1").payment.provider_reference == "psp-n-1"
    assert client.raised == []
    assert ctx.deferrals.get("p1") is None  # never deferred
    assert begin_payment_step(ctx)["payment"]["amountCents"] == TOTAL


def test_notification_while_the_payment_step_waits_is_raised_to_that_orchestration(functions, ctx, broker):
    send(broker, order())
    deliver(functions, broker)
    assert "payment" not in begin_payment_step(ctx)  # the step began with no payment: it waits
    client = DurableClientStub()
    send(broker, notification())
    deliver(functions, broker, client)

    assert client.raised == [
        (
            "p1:1",
            PAYMENT_NOTIFIED_EVENT,
            {
                "notificationId": "n-1",
                "amountCents": TOTAL,
                "currency": "EUR",
                "providerReference": "psp-n-1",
                "receivedAt": to_text(ctx.clock.now()),
                "sequenceNumber": 2,
            },
        )
    ]
    assert ctx.states.get("p1").payment is not None  # also on the record: a lost event only delays
    assert broker.peek(ORDERS_QUEUE, 10) == []


def test_an_event_that_cannot_be_raised_does_not_fail_the_message(functions, ctx, broker):
    send(broker, order())
    deliver(functions, broker)
    begin_payment_step(ctx)
    send(broker, notification())
    deliver(functions, broker, DurableClientStub(gone={"p1:1"}))
    assert broker.peek(ORDERS_QUEUE, 10) == []
    assert broker.dead_letters(ORDERS_QUEUE) == []


def test_a_repeated_notification_is_completed_and_changes_nothing(functions, ctx, broker):
    send(broker, order())
    deliver(functions, broker)
    send(broker, notification())
    deliver(functions, broker)
    before = ctx.states.get("p1")
    send(broker, notification(), message_id="n-1-again")
    deliver(functions, broker)
    assert ctx.states.get("p1").version == before.version
    assert broker.peek(ORDERS_QUEUE, 10) == [] and broker.dead_letters(ORDERS_QUEUE) == []


@pytest.mark.parametrize(
    ("body", "prepaid", "reason"),
    [
        (notification(amount=TOTAL - 1), True, "PaymentAmountMismatch"),
        (notification(currency="USD"), True, "PaymentAmountMismatch"),
        (notification(), False, "OrderNotPrepaid"),
    ],
    ids=["amount", "currency", "not-prepaid"],
)
def test_a_notification_that_does_not_match_its_order_is_dead_lettered_and_alerted(
    functions, ctx, broker, body, prepaid, reason
):
    send(broker, order(prepaid=prepaid))
    deliver(functions, broker)
    send(broker, body)
    deliver(functions, broker)
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert dead.reason == reason
    assert "p1" in (dead.description or "")
    assert [a["kind"] for a in alerts(broker)] == [reason]
    assert ctx.states.get("p1").payment is None


def test_a_second_different_payment_is_dead_lettered_for_a_refund(functions, ctx, broker):
    send(broker, order())
    deliver(functions, broker)
    send(broker, notification())
    deliver(functions, broker)
    send(broker, notification(notification_id="n-2"))
    deliver(functions, broker)
    assert [d.reason for d in broker.dead_letters(ORDERS_QUEUE)] == ["PaymentAlreadyReceived"]
    assert ctx.states.get("p1").payment.notification_id == "n-1"


def test_a_deferred_notification_that_does_not_match_is_dead_lettered_when_its_order_arrives(functions, ctx, broker):
    send(broker, notification(amount=1))
    deliver(functions, broker)
    [seq] = deferred_sequence_numbers(broker)
    send(broker, order())
    deliver(functions, broker)
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert (dead.sequence_number, dead.reason) == (seq, "PaymentAmountMismatch")
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEAD_LETTERED
    assert [a["kind"] for a in alerts(broker)] == ["PaymentAmountMismatch"]
    # the order itself is not blocked by its bad notification
    assert ctx.states.get("p1").process_state is ProcessState.PROCESSING


def test_state_store_unavailable_hands_the_message_to_a_later_copy_instead_of_deferring(functions, ctx, broker, clock):
    """Nothing could record a deferral: the message is sent again for later (submission/store_outage.py)
    and completed, not deferred, and not abandoned into an immediate redelivery."""
    with while_using(ctx, states=StateStoreThatFails(ctx.states, "get")):
        send(broker, notification())
        deliver(functions, broker)
    [copy] = broker.peek(ORDERS_QUEUE, 10)
    assert copy.state.name == "SCHEDULED" and copy.message_id.startswith("n-1:store-retry:1:")
    assert broker.counters(ORDERS_QUEUE).deferred == 0
    clock.advance(STORE_RETRY_DELAYS[0])
    deliver(functions, broker)  # the store is back
    # now deferred (no order yet), under the number it was given when it became active (a scheduled
    # message is renumbered then: docs.microsoft.com message-sequencing)
    [deferred] = [m for m in broker.peek(ORDERS_QUEUE, 10) if m.state.name == "DEFERRED"]
    assert deferred.message_id == copy.message_id and deferred.sequence_number > copy.sequence_number
    tracked = ctx.deferrals.get("p1")
    assert tracked is not None and [e.sequence_number for e in tracked.waiting()] == [deferred.sequence_number]


def test_the_deferral_document_is_invisible_to_the_starter_and_supervisor_queries(functions, ctx, broker, clock):
    send(broker, notification())
    deliver(functions, broker)
    assert ctx.deferrals.get("p1") is not None
    later = clock.now() + timedelta(days=1)
    for state in ProcessState:
        assert ctx.states.count(state) == 0
        assert ctx.states.expired_page(state, later, None, 10, None).records == []
    assert ctx.states.claimable(later, 10) == []
