"""Status updates go only to each submitter's own reply queue, collapse by MessageId, and a missing
reply queue is alerted once and never fails or blocks the order (in-process broker + Cosmos)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from activities import scheduler_steps
from domain.states import ProcessState
from tests.activity_calls import run
from tests.deferral.support import alerts, deliver, order, send

pytestmark = pytest.mark.cosmos


def statuses(broker: Any, queue: str) -> list[tuple[str, str, int, str]]:
    return [
        (m.message_id, json.loads(m.body)["orderId"], json.loads(m.body)["attempt"], json.loads(m.body)["status"])
        for m in broker.peek(queue, 100)
    ]


def test_each_submitter_receives_only_its_own_orders_statuses(functions, ctx, broker):
    broker.declare_queue("submitter-b")
    send(broker, order("a1", prepaid=False))
    send(broker, order("b1", prepaid=False, replyTo="submitter-b"))
    deliver(functions, broker)
    deliver(functions, broker)
    for order_id in ("a1", "b1"):
        run(scheduler_steps.publish_status, ctx, {"orderId": order_id, "status": "Processing", "attempt": 1})
        run(scheduler_steps.publish_status, ctx, {"orderId": order_id, "status": "Processing", "attempt": 1})
    assert statuses(broker, "client-statuses") == [
        ("a1:Received:0", "a1", 0, "Received"),
        ("a1:Processing:1", "a1", 1, "Processing"),  # the repeat collapsed in duplicate detection
    ]
    assert statuses(broker, "submitter-b") == [
        ("b1:Received:0", "b1", 0, "Received"),
        ("b1:Processing:1", "b1", 1, "Processing"),
    ]


def test_a_missing_reply_queue_is_alerted_once_and_never_blocks_the_orders(functions, ctx, broker):
    for order_id in ("m1", "m2"):
        send(broker, order(order_id, prepaid=False, replyTo="nobody-listens"))
        deliver(functions, broker)
        run(scheduler_steps.publish_status, ctx, {"orderId": order_id, "status": "Processing", "attempt": 1})
    assert broker.dead_letters() == []  # both submissions completed
    for order_id in ("m1", "m2"):
        assert ctx.states.get(order_id).process_state is ProcessState.PROCESSING
    [alert] = alerts(broker)  # four failed statuses of two orders: one alert for the queue
    assert alert["kind"] == "ReplyQueueUnavailable"
    assert alert["details"]["replyTo"] == "nobody-listens"


def test_an_order_without_a_reply_queue_sends_no_status_and_no_alert(functions, ctx, broker):
    body = order("n1", prepaid=False)
    del body["replyTo"]
    send(broker, body)
    deliver(functions, broker)
    run(scheduler_steps.publish_status, ctx, {"orderId": "n1", "status": "Processing", "attempt": 1})
    assert broker.peek("client-statuses", 10) == []
    assert alerts(broker) == []
