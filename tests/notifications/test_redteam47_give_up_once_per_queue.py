"""Red team (rt-alert-noise): a submitter's status queue full for good gave up every final status of its orders after
about six hours each, and alerted ``StatusUndelivered`` once per status: one page per order (100 orders of
``status-queue-full-for-good``, seed 20: 50 alerts). It is one problem, the queue: one alert per reply queue and
send error while it lasts (an alert mark, ``notifications/repeats.py``), each give-up still logged
``StatusUndelivered`` with its order and status; another queue, or a give-up for another reason, is alerted on its
own. The give-up itself (``notifications.status.give_up``, as the status courier's last try calls it) over the real
Cosmos SDK (the local protocol server)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.errors import StoreUnavailable
from adapters.servicebus.sender import SendError
from contracts.names import OPERATOR_ALERTS_QUEUE
from notifications.status import give_up
from tests.observability.exported import exported

pytestmark = pytest.mark.cosmos


def _give_up(ctx: Any, order_id: str, reply_to: str, error: Exception) -> None:
    give_up(
        ctx.sender,
        order_id=order_id,
        status="Completed",
        attempt=1,
        variant=None,
        reply_to=reply_to,
        at=ctx.clock.now(),
        error=error,
        marks=ctx.alert_marks,
    )


def test_a_queue_full_for_good_is_one_alert_and_each_give_up_is_still_logged(app_context: Any, sender: Any) -> None:
    full = SendError("send to 'client-a' failed: QuotaExceeded")
    with exported() as rows:
        for i in range(5):  # five orders' statuses given up, 20 minutes apart
            _give_up(app_context, f"o-{i}", "client-a", full)
            app_context.clock.advance(timedelta(minutes=20))
        _give_up(app_context, "o-b", "client-b", SendError("send to 'client-b' failed: QuotaExceeded"))
        _give_up(app_context, "o-read", "client-a", StoreUnavailable("the record could not be read"))
    alerts = [json.loads(m.body) for q, m in sender.sent if q == OPERATOR_ALERTS_QUEUE]
    # before: one per give-up, 7
    assert [(a["kind"], a["orderId"]) for a in alerts] == [
        ("StatusUndelivered", "o-0"),
        ("StatusUndelivered", "o-b"),
        ("StatusUndelivered", "o-read"),
    ]
    logged = [r.properties["orderId"] for r in rows if r.properties.get("event") == "StatusUndelivered"]
    assert logged == ["o-0", "o-1", "o-2", "o-3", "o-4", "o-b", "o-read"]
    held = [r.properties["orderId"] for r in rows if r.properties.get("event") == "AlertRepeatHeld"]
    assert held == ["o-1", "o-2", "o-3", "o-4"]


def test_the_same_queue_full_again_after_it_was_over_pages_again(app_context: Any, sender: Any) -> None:
    full = SendError("send to 'client-a' failed: QuotaExceeded")
    _give_up(app_context, "o-1", "client-a", full)
    app_context.clock.advance(timedelta(hours=3))  # no give-up for three hours: over
    _give_up(app_context, "o-2", "client-a", full)
    assert [json.loads(m.body)["orderId"] for q, m in sender.sent if q == OPERATOR_ALERTS_QUEUE] == ["o-1", "o-2"]
