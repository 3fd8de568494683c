"""The app's own ``RetryDeferred`` messages carry a token clients cannot guess: the deferral entry's
``retryToken``, a random value given when the message is first recorded, in the retry's body and at the end
of its MessageId.

``RetryDeferred`` arrives on the public ``orders`` queue, which submitters may send to but not read. Without
the token, a retry was the app's if it named a tracked sequence number and the right round, and its
MessageId (``retry-deferred:<seq>:<round>``, ``...:1:order`` for a look again) could be predicted: a client
that sent those ids first (sequence numbers are sequential, a range of them is cheap) had Service Bus's
duplicate detection drop the app's real retries for the next 10 minutes, and a notification deferred for a
dependency waited for the peek sweep instead of its retry (red team 6, on the MessageIds)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage
from contracts.names import ORDERS_QUEUE
from tests.deferral.support import (
    deferred_for_the_order_database,
    deferred_sequence_numbers,
    deliver,
    deliver_all,
    notification,
    order,
    send,
)
from tests.deferral.test_retry_deferred_not_for_now import send_retry

pytestmark = pytest.mark.cosmos


def scheduled_retry_ids(broker: Any) -> list[str]:
    return [m.message_id for m in broker.peek(ORDERS_QUEUE, 100) if m.subject == "RetryDeferred"]


def test_the_apps_retry_carries_its_entrys_token_in_its_body_and_messageid(
    functions: Any, ctx: Any, broker: Any
) -> None:
    _, with_orders = deferred_for_the_order_database(functions, ctx, broker)
    [seq] = deferred_sequence_numbers(broker)
    token = with_orders.deferrals.get("p1").entry(seq).retry_token
    assert len(token) == 32 and int(token, 16) >= 0
    [retry] = [m for m in broker.peek(ORDERS_QUEUE, 100) if m.subject == "RetryDeferred"]
    assert retry.message_id == f"retry-deferred:{seq}:1:{token}"
    assert json.loads(str(retry))["retryToken"] == token


@pytest.mark.parametrize("token", [None, "0" * 32])
def test_a_retry_without_the_entrys_token_is_ignored_even_when_its_round_is_due(
    functions: Any, ctx: Any, broker: Any, clock: Any, caplog: pytest.LogCaptureFixture, token: str | None
) -> None:
    _, with_orders = deferred_for_the_order_database(functions, ctx, broker)
    [seq] = deferred_sequence_numbers(broker)
    clock.advance(with_orders.settings.defer_retry_delay)
    lost = broker.receive(ORDERS_QUEUE)
    assert lost is not None and lost.subject == "RetryDeferred"
    broker.actions.complete(lost)  # the app's round-1 retry is gone: only the forged one comes

    caplog.set_level(logging.INFO)
    send_retry(broker, seq, 1, 1, token)
    assert deliver(functions, broker)
    assert with_orders.deferrals.get("p1").entry(seq).rounds == 1  # not acted on: round 2 not recorded
    [ignored] = [r for r in caplog.records if getattr(r, "event", None) == "RetryDeferredIgnored"]
    assert ignored.levelno == logging.WARNING and "forged" in ignored.why  # type: ignore[attr-defined]

    send_retry(broker, seq, 1, 2, with_orders.deferrals.get("p1").entry(seq).retry_token)
    assert deliver(functions, broker)  # the same with the token: acted on (still down: round 2)
    assert with_orders.deferrals.get("p1").entry(seq).rounds == 2


# The sequence numbers a client would expect the next messages to get: its own 20 messages take 1 to 20.
AHEAD = range(20, 40)


def squat(broker: Any, message_ids: list[str]) -> None:
    """What a client with send rights can do: take MessageIds before the app does (one message each)."""
    assert len(message_ids) == len(AHEAD)
    for message_id in message_ids:
        body = {"type": "RetryDeferred", "schemaVersion": 1, "sequenceNumber": 1, "orderId": "p0", "messageId": "x"}
        broker.send(ORDERS_QUEUE, OutgoingMessage(body=json.dumps({**body, "round": 1}), message_id=message_id))


def test_messageids_sent_first_by_a_client_do_not_drop_the_apps_retry_of_a_dependencys_round(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    squat(broker, [f"retry-deferred:{seq}:1" for seq in AHEAD])
    deliver_all(functions, broker)  # dead-lettered UntrackedDeferral: no order p0 tracks anything
    orders, with_orders = deferred_for_the_order_database(functions, ctx, broker)
    assert deferred_sequence_numbers(broker)[0] in AHEAD
    assert broker.counters(ORDERS_QUEUE).duplicates_dropped == 0
    assert len(scheduled_retry_ids(broker)) == 1

    orders.failing = False
    clock.advance(with_orders.settings.defer_retry_delay)
    deliver_all(functions, broker)  # the retry came: applied one retry delay after the outage, not at the sweep
    assert with_orders.states.get("p1").payment is not None


def test_messageids_sent_first_by_a_client_do_not_drop_the_apps_look_again(
    functions: Any, ctx: Any, broker: Any
) -> None:
    squat(broker, [f"retry-deferred:{seq}:1:order" for seq in AHEAD])
    deliver_all(functions, broker)
    send(broker, notification())
    assert deliver(functions, broker)  # before its order: deferred, and one look again scheduled
    assert broker.counters(ORDERS_QUEUE).duplicates_dropped == 0
    [look_again] = scheduled_retry_ids(broker)
    [seq] = deferred_sequence_numbers(broker)
    assert seq in AHEAD and look_again.startswith(f"retry-deferred:{seq}:1:order:")
    send(broker, order())
    deliver_all(functions, broker)
    assert ctx.states.get("p1").payment is not None
