"""Does each operator alert page? The ``operatorAlertRaised`` log alert rule (infra/modules/alerts.bicep) run as Azure
Monitor runs it (tests/infra/log_alerts.py) on the rows Application Insights stores for the app's ``OperatorAlert``
events (notifications/alerts.py, through the real exporter: tests/observability/exported.py).

Red team (dlq-alerts): the rule was a metric alert on the ``operator-alerts`` queue's ``IncomingMessages`` (total over
5 minutes, every minute, greater than 0): one time series, stateful. A steady stream of alerts (a dependency outage
failing orders one after another, a mass escalation) kept it fired: one email for all of them, the rest only
messages on the queue nobody was told to read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from notifications.alerts import raise_alert
from tests.fakes import RecordingSender
from tests.infra.log_alerts import LogRule
from tests.observability.exported import exported

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _raised(
    minute: float, kind: str, order_id: str | None, discriminator: int = 1
) -> list[tuple[float, str, dict[str, str]]]:
    with exported() as rows:
        raise_alert(
            RecordingSender(),
            kind=kind,
            summary=f"order {order_id} needs a person",
            at=T0 + timedelta(minutes=minute),
            order_id=order_id,
            discriminator=discriminator,
        )
    return [(minute, r.table, r.properties) for r in rows]


def test_a_steady_stream_of_alerts_pages_each() -> None:
    """An order failing every three minutes for an hour: twenty alerts, twenty pages."""
    events = [e for i in range(20) for e in _raised(1 + 3 * i, "OrderFailed", f"ord-{i}")]
    pages = LogRule.of("operatorAlertRaised").pages(events, until=120)
    assert len(pages) == 20
    assert {key[:2] for _, key in pages} == {("OrderFailed", f"ord-{i}") for i in range(20)}


def test_the_same_alert_raised_again_pages_once_and_an_alert_without_an_order_pages() -> None:
    """A redelivery raises the same alert again (its id, kind, order and discriminator: duplicate detection keeps one
    on the queue): one page. A dependency's alert names no order."""
    events = (
        _raised(1, "OrderFailed", "ord-a") + _raised(4, "OrderFailed", "ord-a") + _raised(2, "DependencyOutage", None)
    )
    pages = LogRule.of("operatorAlertRaised").pages(events, until=60)
    assert sorted(key[:2] for _, key in pages) == [("DependencyOutage", "-"), ("OrderFailed", "ord-a")]
