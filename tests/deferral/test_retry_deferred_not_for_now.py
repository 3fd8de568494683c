"""``RetryDeferred`` arrives on the public ``orders`` queue, and every fetch of a deferred message counts as
one of its deliveries. Found by the red team on 3737d51: repeated ``RetryDeferred`` messages for a
notification waiting for its order each fetched and abandoned it, and Service Bus dead-lettered it
(``MaxDeliveryCountExceeded``): the payment was lost and the operator told it expired. One with an
arbitrary round (1000) dead-lettered a notification deferred for a dependency at once. Now a retry fetches
only when the fetch can do something: the round scheduled, or an order that exists."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage
from contracts.names import ORDERS_QUEUE
from domain.deferral import EntryStatus
from tests.contexts import context_with
from tests.deferral.support import (
    alerts,
    deferred_for_the_order_database,
    deferred_sequence_numbers,
    deliver,
    deliver_all,
    notification,
    order,
    send,
)

pytestmark = pytest.mark.cosmos


def send_retry(broker: Any, seq: int, round_number: int, n: int, token: str | None = None) -> None:
    """A ``RetryDeferred`` not sent by the app; with ``token``, one that carries the entry's token as the app's
    own do (so it is judged by its round and time, not refused as forged)."""
    body = {
        "type": "RetryDeferred",
        "schemaVersion": 1,
        "sequenceNumber": seq,
        "orderId": "p1",
        "messageId": "n-1",
        "round": round_number,
        **({"retryToken": token} if token is not None else {}),
    }
    broker.send(ORDERS_QUEUE, OutgoingMessage(body=json.dumps(body), message_id=f"forged-{n}"))


def delivery_count(broker: Any, seq: int) -> int:
    [peeked] = [m for m in broker.peek(ORDERS_QUEUE, 100) if m.sequence_number == seq]
    return int(peeked.delivery_count)


def test_retries_for_a_notification_whose_order_is_missing_do_not_fetch_it(functions, ctx, broker):
    send(broker, notification())
    deliver_all(functions, broker)  # deferred, waiting for its order (and its one look again, due later)
    [seq] = deferred_sequence_numbers(broker)
    before = delivery_count(broker, seq)
    token = ctx.deferrals.get("p1").entry(seq).retry_token

    for n in range(8):
        send_retry(broker, seq, 1, n, token)
    deliver_all(functions, broker)
    assert deferred_sequence_numbers(broker) == [seq] and delivery_count(broker, seq) == before
    assert broker.dead_letters(ORDERS_QUEUE) == []

    send(broker, order())
    deliver_all(functions, broker)
    assert ctx.states.get("p1").payment.sequence_number == seq
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    assert "DeferredMessageExpired" not in [a["kind"] for a in alerts(broker)]


def test_a_retry_of_a_round_never_scheduled_does_not_dead_letter_a_notification_deferred_for_a_dependency(
    functions, ctx, broker, clock
):
    orders, with_orders = deferred_for_the_order_database(functions, ctx, broker)
    [seq] = deferred_sequence_numbers(broker)
    assert with_orders.deferrals.get("p1").entry(seq).rounds == 1
    token = with_orders.deferrals.get("p1").entry(seq).retry_token

    send_retry(broker, seq, 1000, 0, token)  # past DEFER_MAX_ROUNDS: on 3737d51, dead-lettered at once
    send_retry(broker, seq, 2, 1, token)  # a round not scheduled yet
    deliver_all(functions, broker)
    assert broker.dead_letters(ORDERS_QUEUE) == [] and deferred_sequence_numbers(broker) == [seq]

    orders.failing = False
    clock.advance(with_orders.settings.defer_retry_delay)  # the scheduled round 1 is due
    deliver_all(functions, broker)
    assert with_orders.states.get("p1").payment.sequence_number == seq


class RetrySendFailsOnce:
    """The broker as the app's sender; the next ``RetryDeferred`` send fails (Service Bus unavailable)."""

    def __init__(self, broker: Any) -> None:
        self._broker, self.armed = broker, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._broker, name)

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if self.armed and message.subject == "RetryDeferred":
            self.armed = False
            from adapters.servicebus.sender import SendError

            raise SendError("Service Bus unavailable sending the next round")
        self._broker.send(queue, message)


def test_a_round_whose_next_round_could_not_be_sent_is_taken_again_when_it_comes_back(functions, ctx, broker, clock):
    """Red team on 5257408: round 1 wrote ``rounds=2`` and then could not send round 2; its redelivery was
    taken for a stale retry (1 is not 2), so nothing but the peek sweep, 10 minutes on, would try again."""
    orders, with_orders = deferred_for_the_order_database(functions, ctx, broker)
    [seq] = deferred_sequence_numbers(broker)

    clock.advance(with_orders.settings.defer_retry_delay)
    flaky = context_with(with_orders, sender=RetrySendFailsOnce(broker))
    assert deliver(functions, broker)  # round 1: still down; rounds=2 written, round 2 not sent: abandoned
    context_with(flaky, sender=broker)
    assert with_orders.deferrals.get("p1").entry(seq).rounds == 2
    assert [m.subject for m in broker.peek(ORDERS_QUEUE, 10) if m.state.name == "SCHEDULED"] == []

    orders.failing = False
    deliver_all(functions, broker)  # round 1 again (its redelivery)
    assert with_orders.states.get("p1").payment.sequence_number == seq
