"""Red team (rt-alert-noise): two copies of one payment notification (the provider sending it again past duplicate
detection's 10 minutes, under the same MessageId or another) were two ``NotificationForRejectedOrder`` alerts when
their order was refused, each under its own sequence number: two alerts, two pages (the ``operatorAlertRaised``
rule is one alert per alert id) for one notification. The alert is now the notification's (its digest: what it
says, its id included), and an alert mark holds a later copy's (``notifications/repeats.py``); another
notification of the order is still alerted on its own.

Through the registered trigger, the in-process broker and Cosmos, as
tests/deferral/test_refused_notifications_flagged.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE
from tests.deferral.support import alerts, deliver, notification, order
from tests.deferral.test_refusal_written_first import Cap, submit
from tests.infra.log_alerts import LogRule
from tests.observability.exported import exported

pytestmark = pytest.mark.cosmos
KIND = "NotificationForRejectedOrder"


def _deliver_logged(functions: Any, broker: Any, clock: Any, start: Any, log: list[Any]) -> None:
    while True:
        with exported() as rows:
            delivered = deliver(functions, broker)
        minute = (clock.now() - start).total_seconds() / 60
        log.extend((minute, row.table, row.properties) for row in rows)
        if not delivered:
            return


def test_copies_of_one_notification_refused_with_their_order_are_one_alert_and_another_is_its_own(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    cap = Cap(monkeypatch, full=False)
    start = clock.now()
    log: list[Any] = []
    submit(broker, notification(), "n-1")
    _deliver_logged(functions, broker, clock, start, log)
    clock.advance(timedelta(minutes=11))  # the provider sends it again, past duplicate detection: deferred too
    submit(broker, notification(), "n-1")
    _deliver_logged(functions, broker, clock, start, log)
    cap.full = True
    submit(broker, order())  # refused: both copies dead-lettered OrderRejected
    _deliver_logged(functions, broker, clock, start, log)
    clock.advance(timedelta(minutes=30))  # a third copy, while the refusal stands
    submit(broker, notification(), "n-1:third")
    _deliver_logged(functions, broker, clock, start, log)
    clock.advance(timedelta(minutes=30))  # another notification of the order: its own alert
    submit(broker, notification(notification_id="n-2"), "n-2")
    _deliver_logged(functions, broker, clock, start, log)

    dead = [d.reason for d in broker.dead_letters(ORDERS_QUEUE)]
    assert dead == ["OrderRejected"] * 4  # the control: every copy dead-lettered under the refusal
    mine = [a for a in alerts(broker) if a["kind"] == KIND]
    # before: four alerts (one per message), four pages
    assert len(mine) == 2 and mine[0]["alertId"] != mine[1]["alertId"], [a["alertId"] for a in mine]
    raised = [e for e in log if e[2].get("event") == "OperatorAlert" and e[2].get("alertKind") == KIND]
    pages = LogRule.of("operatorAlertRaised").pages(raised, until=int(log[-1][0]) + 30)
    assert len(pages) == 2, pages
