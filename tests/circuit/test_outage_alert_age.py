"""Outages recorded long ago are history, not news (domain.circuit.outage_alerts_due with
``closed_before``, supervisor.outage.OUTAGE_ALERT_MAX_AGE): the first supervisor run after a
deployment finds the health documents of earlier outages and must not page anyone about them; an
outage whose opening was paged still gets its recovery, however late; an outage still open is
always news."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from domain.circuit import OUTAGE_ALERT, RECOVERY_ALERT, DependencyHealth, mark_alerted, outage_alerts_due
from tests.circuit.support import closed, opened

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MAX_AGE = timedelta(hours=1)


def outage(started: datetime, lasted: timedelta) -> DependencyHealth:
    return closed(opened(DependencyHealth.fresh("shipping", started), started), started + lasted)


def test_an_outage_closed_long_ago_and_never_paged_is_not_alerted() -> None:
    health = outage(T0, timedelta(minutes=5))
    run_at = T0 + timedelta(days=2)
    assert outage_alerts_due(health, closed_before=run_at - MAX_AGE) == []


def test_a_recent_outage_that_opened_and_closed_between_runs_is_still_alerted() -> None:
    """The control: closed minutes ago, both alerts go out (the rule is about age, not about having
    missed the opening)."""
    health = outage(T0, timedelta(minutes=5))
    run_at = T0 + timedelta(minutes=6)
    assert [a.kind for a in outage_alerts_due(health, closed_before=run_at - MAX_AGE)] == [OUTAGE_ALERT, RECOVERY_ALERT]


def test_a_paged_outage_gets_its_recovery_however_late_the_run() -> None:
    health = opened(DependencyHealth.fresh("shipping", T0), T0)
    (opening,) = outage_alerts_due(health)
    health, _changed = mark_alerted(health, opening)
    health = closed(health, T0 + timedelta(minutes=5))
    run_at = T0 + timedelta(days=2)
    assert [a.kind for a in outage_alerts_due(health, closed_before=run_at - MAX_AGE)] == [RECOVERY_ALERT]


def test_an_outage_still_open_is_news_however_old() -> None:
    health = opened(DependencyHealth.fresh("shipping", T0), T0)
    run_at = T0 + timedelta(days=2)
    assert [(a.kind, a.started) for a in outage_alerts_due(health, closed_before=run_at - MAX_AGE)] == [
        (OUTAGE_ALERT, T0)
    ]
