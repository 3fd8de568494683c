"""Red team of the one-alert-per-outage rules (domain/circuit.py, supervisor/outage.py).

An operator paged with ``DependencyOutage`` must hear ``DependencyRecovered`` for that same outage,
even when the supervisor did not look between two outages (a run skipped, or the health store
unavailable to it for a while): the circuit closed, opened again and closed again in between."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adapters.cosmos.health_store import update_health
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.circuit import (
    OUTAGE_ALERT,
    RECOVERY_ALERT,
    DependencyHealth,
    mark_alerted,
    outage_alerts_due,
    record_failure,
)
from settings import Settings
from supervisor.outage import alert_outages
from tests.circuit.support import closed, opened

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _alerted_outage_then_two_more_transitions() -> DependencyHealth:
    """Outage A opened and was alerted; then, unseen by the supervisor, A closed, B opened, B closed."""
    health = opened(DependencyHealth.fresh("shipping", T0), T0)
    (opening,) = outage_alerts_due(health)
    health, _changed = mark_alerted(health, opening)
    a_closed = T0 + timedelta(seconds=40)
    health = closed(health, a_closed)
    b_opened = a_closed + timedelta(seconds=5)
    health = opened(health, b_opened)
    return closed(health, b_opened + timedelta(seconds=40))


def test_an_alerted_outage_gets_its_recovery_even_when_a_later_one_closed_before_the_next_run() -> None:
    health = _alerted_outage_then_two_more_transitions()
    due = outage_alerts_due(health)
    assert (RECOVERY_ALERT, T0) in [(a.kind, a.started) for a in due], due
    # in order: A's recovery first, then B's alerts; each is due once
    assert [a.kind for a in due] == [RECOVERY_ALERT, OUTAGE_ALERT, RECOVERY_ALERT]
    for alert in due:
        health, changed = mark_alerted(health, alert)
        assert changed
    assert outage_alerts_due(health) == []


def test_the_late_recovery_does_not_claim_an_outage_length_it_does_not_know() -> None:
    health = _alerted_outage_then_two_more_transitions()
    late = outage_alerts_due(health)[0]
    assert late.kind == RECOVERY_ALERT and late.started == T0
    # A closed at an unrecorded moment before B began: no length rather than a wrong one
    assert late.closed is None and late.outage_seconds is None


@pytest.mark.cosmos
def test_with_waiting_off_the_outage_alert_does_not_say_orders_wait_it_out(app_context: Any, sender: Any) -> None:
    """MAX_OUTAGE_WAIT_MINUTES=0: orders spend their retries in an outage; the one alert must not tell
    the operator they wait without spending them."""
    ctx = replace(app_context, settings=Settings.from_env({}, MAX_OUTAGE_WAIT_MINUTES="0"))
    now = ctx.clock.now()
    for _ in range(ctx.settings.circuit_policy.threshold):
        update_health(
            ctx.health, "shipping", lambda h: (record_failure(h, now, ctx.settings.circuit_policy)[0], None), now
        )
    assert alert_outages(ctx) == 1
    [body] = [json.loads(m.body) for q, m in sender.sent if q == OPERATOR_ALERTS_QUEUE]
    assert body["kind"] == OUTAGE_ALERT
    assert "without spending their retries" not in body["summary"]
    assert "MAX_OUTAGE_WAIT_MINUTES=0" in body["summary"]
