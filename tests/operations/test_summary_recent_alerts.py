"""``GET /api/ops/summary`` ``recentAlerts``: the newest alerts on ``operator-alerts``, however many it holds.

Nothing in the app receives from ``operator-alerts`` (the console peeks, the Azure alert rule counts), and
the queue keeps a message 14 days (infra/modules/servicebus.bicep ``defaultMessageTimeToLive: 'P14D'``).
Red team 6 found ``recent_alerts`` peeking the FIRST 250 messages (the oldest) and showing the newest of
those: once 250 alerts were queued, every later alert was missing from the summary until the old ones
expired, two weeks later. A submitter can get there on its own (each ``OrderSubmitted`` whose ``replyTo``
names a made-up queue raises one ``ReplyQueueUnavailable`` alert per name), and so does ordinary traffic
(the benchmark's 1,000-order run raises 300 alerts, docs/supervisor.md). The summary now reads the queue
from its newest end (``adapters.servicebus.browse``; its cost is tested in tests/adapters/test_browse.py)."""

from __future__ import annotations

import json

import pytest

from adapters.servicebus.sender import OutgoingMessage
from contracts.names import OPERATOR_ALERTS_QUEUE
from operations import blueprint, views
from operations.views import ALERT_PEEK_LIMIT, SUMMARY_LIST_LIMIT

pytestmark = pytest.mark.cosmos


def _alert(number: int, kind: str) -> OutgoingMessage:
    alert_id = f"alert:{kind}:-:q-{number}"
    body = {
        "type": "OperatorAlert",
        "schemaVersion": 1,
        "alertId": alert_id,
        "kind": kind,
        "severity": "warning",
        "summary": f"alert {number}",
        "details": {},
        "at": "2026-05-01T09:00:00Z",
    }
    return OutgoingMessage(body=json.dumps(body), message_id=alert_id)


def _shown(ops) -> list[str]:
    status, body = ops.get("/api/ops/summary")
    assert status == 200
    return [a["alertId"] for a in body["recentAlerts"]]


def test_the_newest_alert_is_in_the_summary_after_more_than_the_peek_limit_were_queued(ops):
    for number in range(250 + 10):  # the old code's peek limit, and more
        ops.broker.send(OPERATOR_ALERTS_QUEUE, _alert(number, "ReplyQueueUnavailable"))
    newest = _alert(9999, "RetriesExhausted")
    ops.broker.send(OPERATOR_ALERTS_QUEUE, newest)

    shown = _shown(ops)
    assert newest.message_id in shown, f"recentAlerts shows {shown[:3]}..., not the newest alert"


def test_the_summary_lists_the_newest_alerts_newest_first_and_each_new_one_on_the_next_poll(ops, monkeypatch):
    """1,000 alerts queued: the summary lists the newest ``SUMMARY_LIST_LIMIT``, newest first. The console
    polls: an alert sent after one summary is at the top of the next, which starts its search where the
    previous one found the newest alert: five peeks when one alert arrived in between."""
    monkeypatch.setattr(blueprint, "ALERT_TAIL", type(blueprint.ALERT_TAIL)())  # as in a new worker process
    for number in range(1000):
        ops.broker.send(OPERATOR_ALERTS_QUEUE, _alert(number, "ReplyQueueUnavailable"))
    assert ALERT_PEEK_LIMIT < 1000

    expected = [_alert(n, "ReplyQueueUnavailable").message_id for n in range(999, 999 - SUMMARY_LIST_LIMIT, -1)]
    assert _shown(ops) == expected
    assert blueprint.ALERT_TAIL.sequence_number == 1000

    ops.broker.send(OPERATOR_ALERTS_QUEUE, _alert(1000, "CompensationFailed"))
    before = ops.broker.counters(OPERATOR_ALERTS_QUEUE).peeked
    shown = _shown(ops)
    assert shown == [_alert(1000, "CompensationFailed").message_id, *expected[:-1]]
    # from the hint (1000), from 1001 (1001), from 1003 (none), from 1002 (none), the window
    assert ops.broker.counters(OPERATOR_ALERTS_QUEUE).peeked - before == 5


def test_a_submitter_raises_one_alert_per_made_up_reply_queue_name(ops):
    """The input half of the flood: each made-up ``replyTo`` is one more alert on ``operator-alerts``
    (the app's design, shown here as the way a client fills the queue)."""
    from contracts.names import ORDERS_QUEUE
    from tests.submission.corpus import order

    for number in range(3):
        body = json.dumps(order(orderId=f"o-flood-{number}", replyTo=f"no-such-queue-{number}"))
        ops.send(ORDERS_QUEUE, body.encode(), f"o-flood-{number}")
    ops.run_until_idle()
    kinds = [json.loads(str(m)).get("kind") for m in ops.broker.contents(OPERATOR_ALERTS_QUEUE)]
    assert kinds.count("ReplyQueueUnavailable") == 3, kinds


def test_the_summary_is_served_without_alerts_when_the_alert_queue_cannot_be_read(ops, monkeypatch):
    """Counts and lists come from Cosmos DB: a Service Bus failure reading ``operator-alerts`` leaves them
    shown, with an empty ``recentAlerts`` and ``recentAlertsError`` saying why (it failed the whole
    summary: 500)."""
    ops.broker.send(OPERATOR_ALERTS_QUEUE, _alert(1, "RetriesExhausted"))

    def unavailable(*_args: object, **_kwargs: object) -> object:
        raise ConnectionError("namespace unreachable")

    monkeypatch.setattr(views, "peek_newest", unavailable)
    status, body = ops.get("/api/ops/summary")
    assert status == 200
    assert body["recentAlerts"] == []
    assert "operator-alerts" in body["recentAlertsError"] and "ConnectionError" in body["recentAlertsError"]
    assert "counts" in body and "needOperator" in body


def test_a_message_on_the_alert_queue_that_is_no_json_object_hides_no_alert(ops, monkeypatch):
    """Red team (s52): ``recent_alerts`` skipped a body ``json.loads`` refused with a ``ValueError``, not one
    nested past the recursion limit (``RecursionError``: 10,000 brackets, 20 KB) nor an AMQP value section
    (``body_bytes``' ``InvalidMessage``: another AMQP client can send one). Either escaped the loop, and the
    summary showed no alert at all, ``recentAlertsError`` saying ``operator-alerts`` could not be read (it
    was), for as long as that message stayed among the newest ``ALERT_PEEK_LIMIT``: up to its 14 days.
    Now such a message is skipped, as a body that is not an object is."""
    from tests.fakes import sdk_value_body_message

    ops.broker.send(OPERATOR_ALERTS_QUEUE, _alert(1, "RetriesExhausted"))
    ops.broker.send(OPERATOR_ALERTS_QUEUE, OutgoingMessage(body=b"[" * 10_000 + b"]" * 10_000, message_id="deep"))
    ops.broker.send(OPERATOR_ALERTS_QUEUE, _alert(2, "CompensationFailed"))
    from adapters.servicebus.browse import peek_newest as real_peek

    def with_a_value_body(*args: object, **kwargs: object) -> list[object]:
        peeked = list(real_peek(*args, **kwargs))  # type: ignore[arg-type]
        return [*peeked, sdk_value_body_message(peeked[-1].sequence_number + 1, {"kind": "x"})]

    monkeypatch.setattr(views, "peek_newest", with_a_value_body)
    status, body = ops.get("/api/ops/summary")
    assert status == 200
    assert "recentAlertsError" not in body, body.get("recentAlertsError")
    assert [a["alertId"] for a in body["recentAlerts"]] == [
        _alert(n, k).message_id for n, k in ((2, "CompensationFailed"), (1, "RetriesExhausted"))
    ]
