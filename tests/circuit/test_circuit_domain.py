"""The circuit breaker as a pure state machine (domain/circuit.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

from adapters.cosmos.mapping import from_document, to_document
from domain.circuit import (
    CircuitPolicy,
    CircuitState,
    DependencyHealth,
    admit,
    record_failure,
    record_success,
)

T0 = datetime.fromisoformat("2026-03-01T12:00:00+00:00")
POLICY = CircuitPolicy(threshold=3, cooldown=timedelta(seconds=30), cooldown_max=timedelta(seconds=100), probes=1)


def fail(health: DependencyHealth, times: int, at: datetime = T0) -> DependencyHealth:
    for _ in range(times):
        health, _ = record_failure(health, at, POLICY)
    return health


def opened() -> DependencyHealth:
    return fail(DependencyHealth.fresh("shipping", T0), POLICY.threshold)


def test_failures_below_the_threshold_keep_it_closed_and_a_success_resets_the_count():
    health = fail(DependencyHealth.fresh("shipping", T0), POLICY.threshold - 1)
    assert health.state is CircuitState.CLOSED and health.consecutive_failures == 2
    reset, transition = record_success(health, T0)
    assert reset.consecutive_failures == 0 and transition is None
    again = fail(reset, POLICY.threshold - 1)
    assert again.state is CircuitState.CLOSED


def test_a_success_on_a_healthy_circuit_changes_nothing_so_nothing_is_written():
    health = DependencyHealth.fresh("shipping", T0)
    same, transition = record_success(health, T0 + timedelta(seconds=5))
    assert same is health and transition is None


def test_the_threshold_opens_it_and_an_open_circuit_refuses_calls_until_the_cool_down():
    health = DependencyHealth.fresh("shipping", T0)
    health = fail(health, POLICY.threshold - 1)
    health, transition = record_failure(health, T0, POLICY)
    assert health.state is CircuitState.OPEN
    assert transition is not None and (transition.before, transition.after) == (CircuitState.CLOSED, CircuitState.OPEN)
    assert health.probe_after == T0 + POLICY.cooldown
    refused = admit(health, T0 + timedelta(seconds=29), POLICY)
    assert not refused.allowed and not refused.changed
    assert health.unavailable()


def test_after_the_cool_down_exactly_the_configured_number_of_probes_is_let_through():
    health = opened()
    first = admit(health, T0 + POLICY.cooldown, POLICY)
    assert first.allowed and first.probe and first.changed
    assert first.health.state is CircuitState.HALF_OPEN
    assert first.transition is not None and first.transition.after is CircuitState.HALF_OPEN
    second = admit(first.health, T0 + POLICY.cooldown + timedelta(seconds=1), POLICY)
    assert not second.allowed  # one probe at a time


def test_a_probe_that_never_reports_lapses_after_a_cool_down():
    probing = admit(opened(), T0 + POLICY.cooldown, POLICY).health
    later = admit(probing, T0 + 2 * POLICY.cooldown, POLICY)
    assert later.allowed and later.probe


def test_a_failed_probe_reopens_with_a_doubled_capped_cool_down():
    health = opened()
    moment = T0
    waits = []
    for _ in range(4):
        assert health.probe_after is not None
        moment = health.probe_after
        health = admit(health, moment, POLICY).health
        health, transition = record_failure(health, moment, POLICY)
        assert transition is not None and transition.after is CircuitState.OPEN
        assert health.probe_after is not None
        waits.append((health.probe_after - moment).total_seconds())
    assert waits == [60, 100, 100, 100]
    assert health.opened_at == T0  # the outage began at the first opening


def test_a_successful_probe_closes_it_and_says_how_long_the_outage_lasted():
    health = opened()
    probe_at = T0 + POLICY.cooldown
    health = admit(health, probe_at, POLICY).health
    closed, transition = record_success(health, probe_at)
    assert closed.state is CircuitState.CLOSED and closed.consecutive_failures == 0
    assert transition is not None and transition.outage_seconds == 30
    assert closed.last_outage_started_at == T0 and closed.last_closed_at == probe_at
    assert admit(closed, probe_at, POLICY).allowed
    assert closed.outage_overlaps(T0 + timedelta(seconds=10))  # an attempt that started during it
    assert not closed.outage_overlaps(probe_at + timedelta(seconds=1))


def test_the_next_probe_time_is_the_open_circuits_probe_after_or_a_cool_down_from_now():
    health = opened()
    assert health.next_probe(T0 + timedelta(seconds=1), POLICY) == T0 + POLICY.cooldown
    probing = admit(health, T0 + POLICY.cooldown, POLICY).health
    now = T0 + POLICY.cooldown + timedelta(seconds=2)
    assert probing.next_probe(now, POLICY) == now + POLICY.cooldown


def test_documents_round_trip_and_live_outside_any_order_partition():
    health = opened()
    doc = to_document(health)
    assert doc["orderId"] == "dependency:shipping" and doc["kind"] == "DependencyHealth"
    assert "processState" not in doc
    assert from_document(DependencyHealth, doc) == health
