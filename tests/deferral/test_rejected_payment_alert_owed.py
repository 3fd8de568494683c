"""A payment notification that does not match its order is dead-lettered with its reason and an operator alert
(``PaymentAmountMismatch`` and its family, ``deferral.payment.apply_notification``). The alert used to be sent
with ``raise_alert``: a failed send (Service Bus send fault) abandoned the message in hand, and five failures in a
row dead-lettered it ``MaxDeliveryCountExceeded`` with the alert never sent (a red team's reading of the code; the
``MaxDeliveryCountExceeded`` of ``pay-ord-00173`` in ``harsh-refusals`` seed 2 is another cause: its look-again and
store-retry copy sends failing, docs/benchmark.md). The message in hand is the notification itself where it is
delivered, and the
``OrderSubmitted`` or ``RetryDeferred`` that fetches it when it was deferred. Now the alert whose send failed is
owed (``raise_alert_owing``): the trigger hands it to the alert courier (``deliver_alert_v1``) under the same id
before it settles the message, which is settled as it would have been had the send gone through.

Through the registered ``submit_order`` trigger, the in-process broker and the Cosmos protocol server; the
courier through the local Durable engine (as tests/deferral/test_refusal_alert_outlasts_the_delivery_count.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contracts.messages import PaymentNotification
from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE
from domain.deferral import EntryStatus
from domain.ids import alert_id
from domain.payments import notification_digest
from orchestrators.names import DELIVER_ALERT
from orchestrators.status import FINAL_RETRY_DELAYS
from tests.contexts import context_with
from tests.deferral.support import (
    TOTAL,
    DurableClientStub,
    alerts,
    deferred_sequence_numbers,
    deliver,
    deliver_all,
    notification,
    order,
    send,
)
from tests.deferral.test_refusal_alert_outlasts_the_delivery_count import _deliver_with, courier
from tests.deferral.test_refusal_written_first import SendsFailing
from tests.fakes import OrderStoreThatFailsOnRead, StateStoreThatFails

pytestmark = pytest.mark.cosmos

__all__ = ["courier"]  # the fixture, used by name

MISMATCH = "PaymentAmountMismatch"
WRONG = notification(amount=TOTAL - 1)


def mismatch_alert_id(body: dict[str, Any] = WRONG) -> str:
    """The id the alert of ``body`` has always had: one per distinct notification (id and digest)."""
    note = PaymentNotification.model_validate(body)
    return alert_id(MISMATCH, note.order_id, f"{note.notification_id}:{notification_digest(note)}")


def handed_over(client: DurableClientStub) -> list[tuple[str | None, dict[str, Any]]]:
    """The alert courier's starts: (instance id, the alert handed over)."""
    return [(instance, handed["alert"]) for name, instance, handed in client.started if name == DELIVER_ALERT]


def test_a_notification_rejected_on_delivery_whose_alert_cannot_be_sent_is_dead_lettered_and_its_alert_handed_over(
    functions: Any, ctx: Any, broker: Any
) -> None:
    """Input: order p1 exists; notification n-1 says 2499 cents for a 2500-cent order, delivered while the send to
    ``operator-alerts`` fails.

    Expected: the one delivery dead-letters it ``PaymentAmountMismatch`` (no delivery spent on the alert) and
    hands its alert, under the id a sent one has, to the alert courier; nothing sent to ``operator-alerts``.
    Before: the message was abandoned (delivered again at once; five times dead-lettered it
    ``MaxDeliveryCountExceeded``), no courier started."""
    send(broker, order())
    deliver_all(functions, broker)
    context_with(ctx, sender=SendsFailing(broker, OPERATOR_ALERTS_QUEUE))
    send(broker, WRONG)
    client = DurableClientStub()

    assert deliver(functions, broker, client)

    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert (dead.message_id, dead.reason, dead.delivery_count) == ("n-1", MISMATCH, 1)
    assert broker.receive(ORDERS_QUEUE) is None  # not redelivered
    [(instance, alert)] = handed_over(client)
    assert instance == alert["alertId"] == mismatch_alert_id()
    assert (alert["kind"], alert["orderId"], alert["details"]["notificationId"]) == (MISMATCH, "p1", "n-1")
    assert alerts(broker) == []
    assert ctx.states.get("p1").payment is None


def test_the_courier_sends_the_owed_alert_under_its_id_once_the_queue_takes_it(
    functions: Any, ctx: Any, broker: Any, clock: Any, courier: Any
) -> None:
    """Input: as above, the sends to ``operator-alerts`` failing five times in a row (the delivery's own, then the
    courier's first four).

    Expected: the notification is dead-lettered ``PaymentAmountMismatch`` on its first delivery (never
    ``MaxDeliveryCountExceeded``); the courier sends the alert on its durable timers under the alert's own id
    and completes ``Sent``."""
    engine, real = courier
    send(broker, order())
    deliver_all(functions, broker)
    context_with(ctx, sender=SendsFailing(broker, OPERATOR_ALERTS_QUEUE, times=5))
    send(broker, WRONG)

    _deliver_with(functions, broker, real)

    assert [d.reason for d in broker.dead_letters(ORDERS_QUEUE)] == [MISMATCH]
    [instance] = engine.instances()
    assert (instance.instance_id, instance.name) == (mismatch_alert_id(), DELIVER_ALERT)
    engine.run_until_idle()
    for delay in FINAL_RETRY_DELAYS[:4]:
        assert alerts(broker) == []
        clock.advance(delay)
        engine.run_until_idle()
    [sent] = broker.peek(OPERATOR_ALERTS_QUEUE, 10)
    assert sent.message_id == mismatch_alert_id()
    assert json.loads(sent.body)["kind"] == MISMATCH
    assert instance.output == {"result": "Sent", "alertId": mismatch_alert_id()}


def test_a_deferred_notification_rejected_when_its_order_arrives_does_not_cost_the_submission_its_deliveries(
    functions: Any, ctx: Any, broker: Any
) -> None:
    """Input: n-1 (2499 cents) arrives before order p1 and is deferred; p1 (2500 cents) arrives while the send to
    ``operator-alerts`` fails.

    Expected: the submission fetches n-1, dead-letters it ``PaymentAmountMismatch`` (its entry resolved so), hands
    its alert to the courier and completes the ``OrderSubmitted`` (the order accepted, its attempt started).
    Before: the alert's send failure abandoned the ``OrderSubmitted`` (five in a row: ``MaxDeliveryCountExceeded``),
    n-1 left deferred."""
    send(broker, WRONG)
    assert deliver(functions, broker)
    [seq] = deferred_sequence_numbers(broker)
    context_with(ctx, sender=SendsFailing(broker, OPERATOR_ALERTS_QUEUE))
    send(broker, order())
    client = DurableClientStub()

    assert deliver(functions, broker, client)

    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert (dead.sequence_number, dead.reason) == (seq, MISMATCH)
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEAD_LETTERED
    assert not [m for m in broker.peek(ORDERS_QUEUE, 10) if m.subject != "RetryDeferred"]  # the order completed
    assert [instance for _, instance, _ in client.started] == ["p1:1", mismatch_alert_id()]
    [(_, alert)] = handed_over(client)
    assert (alert["alertId"], alert["details"]["sequenceNumber"]) == (mismatch_alert_id(), seq)
    assert alerts(broker) == []


def test_a_notification_rejected_in_its_retry_round_does_not_cost_the_retry_its_deliveries(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """Input: order p1 exists; n-1 (2499 cents) is deferred while the order database is down (``RetryDeferred``
    round 1 scheduled); the database is back and the round is due, while the send to ``operator-alerts`` fails.

    Expected: the ``RetryDeferred`` fetches n-1, dead-letters it ``PaymentAmountMismatch``, hands its alert to the
    courier and is completed.
    Before: the alert's send failure abandoned the ``RetryDeferred`` (five in a row: ``MaxDeliveryCountExceeded``),
    n-1 left deferred until the peek sweep."""
    orders = OrderStoreThatFailsOnRead(ctx.orders)
    with_orders: Any = context_with(ctx, orders=orders)
    send(broker, order())
    deliver_all(functions, broker)
    orders.failing = True
    send(broker, WRONG)
    assert deliver(functions, broker)
    [seq] = deferred_sequence_numbers(broker)
    orders.failing = False
    context_with(with_orders, sender=SendsFailing(broker, OPERATOR_ALERTS_QUEUE))
    clock.advance(with_orders.settings.defer_retry_delay)
    client = DurableClientStub()

    assert deliver(functions, broker, client)  # the RetryDeferred

    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert (dead.sequence_number, dead.reason) == (seq, MISMATCH)
    assert broker.peek(ORDERS_QUEUE, 10) == []  # the retry completed, the notification settled
    [(instance, alert)] = handed_over(client)
    assert instance == alert["alertId"] == mismatch_alert_id()
    assert alerts(broker) == []


def test_an_alert_owed_before_a_store_failure_is_handed_over_with_the_abandoned_submission(
    functions: Any, ctx: Any, broker: Any
) -> None:
    """Input: n-1 (2499 cents) and n-2 (2500 cents) arrive before order p1 and are deferred; p1 arrives while the
    send to ``operator-alerts`` fails, and the state store fails on the write that would apply n-2.

    Expected: n-1 is dead-lettered ``PaymentAmountMismatch`` and its alert owed; the store failure after it abandons
    the ``OrderSubmitted`` (its record written: redelivered for the deferred notifications, as before), and the
    alert is handed to the courier all the same, before the abandon (n-1 is gone: no redelivery raises it again).
    Before: the alert's send failure abandoned the submission at n-1, which was left deferred."""
    wrong, right = WRONG, notification(notification_id="n-2")
    send(broker, wrong)
    send(broker, right)
    assert deliver(functions, broker) and deliver(functions, broker)
    n1, n2 = deferred_sequence_numbers(broker)
    states = StateStoreThatFails(ctx.states)
    with_states: Any = context_with(ctx, states=states, sender=SendsFailing(broker, OPERATOR_ALERTS_QUEUE))
    states.failing.add("replace")
    send(broker, order())
    client = DurableClientStub()

    assert deliver(functions, broker, client)

    assert [(d.sequence_number, d.reason) for d in broker.dead_letters(ORDERS_QUEUE)] == [(n1, MISMATCH)]
    assert deferred_sequence_numbers(broker) == [n2]
    assert with_states.deferrals.get("p1").entry(n2).status is EntryStatus.DEFERRED
    [(instance, alert)] = handed_over(client)
    assert instance == alert["alertId"] == mismatch_alert_id(wrong)
    assert alert["details"]["sequenceNumber"] == n1
    redelivered = broker.receive(ORDERS_QUEUE)  # abandoned: delivered again
    assert redelivered is not None and json.loads(redelivered.body)["type"] == "OrderSubmitted"
