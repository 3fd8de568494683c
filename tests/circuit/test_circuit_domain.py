"""The circuit breaker as a pure state machine (domain/circuit.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from adapters.cosmos.mapping import from_document, to_document
from domain.circuit import (
    Admission,
    CircuitPolicy,
    CircuitState,
    DependencyHealth,
    admit,
    record_failure,
    record_in_progress,
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


def time_out(health: DependencyHealth, times: int, at: datetime = T0) -> DependencyHealth:
    for _ in range(times):
        health, _ = record_failure(health, at, POLICY, timed_out=True)
    return health


def test_a_timeout_weighs_half_a_failure_so_twice_as_many_open_it():
    # Azure's circuit breaker guidance: more time-outs than failures of an unavailable service before it trips
    health = time_out(DependencyHealth.fresh("shipping", T0), 2 * POLICY.threshold - 1)
    assert health.state is CircuitState.CLOSED
    assert (health.consecutive_failures, health.failure_weight) == (5, 5)
    health, transition = record_failure(health, T0, POLICY, timed_out=True)
    assert health.state is CircuitState.OPEN and transition is not None


def test_timeouts_and_answered_failures_add_up_by_their_weight():
    health = fail(time_out(DependencyHealth.fresh("shipping", T0), 2), 1)  # 1/2 + 1/2 + 1
    assert health.state is CircuitState.CLOSED
    health = time_out(health, 1)  # 2.5
    assert health.state is CircuitState.CLOSED
    health = time_out(health, 1)  # 3: the threshold
    assert health.state is CircuitState.OPEN


def test_still_working_clears_the_weight_but_is_no_result_and_a_success_resets_all():
    health = fail(DependencyHealth.fresh("shipping", T0), POLICY.threshold - 1)
    alive, transition = record_in_progress(health, T0)
    assert transition is None and alive.state is CircuitState.CLOSED
    assert (alive.consecutive_failures, alive.failure_weight) == (POLICY.threshold, 0)  # the supervisor still sees it
    assert fail(alive, POLICY.threshold - 1).state is CircuitState.CLOSED  # counted afresh
    reset, _ = record_success(fail(alive, 1), T0)
    assert (reset.consecutive_failures, reset.failure_weight) == (0, 0)
    same, _ = record_success(reset, T0 + timedelta(seconds=1))
    assert same is reset  # nothing counted: nothing written


def test_a_probe_answered_still_working_closes_the_circuit_and_an_open_one_ignores_it():
    health = opened()
    assert record_in_progress(health, T0) == (health, None)  # a call from before the opening
    probing = admit(health, T0 + POLICY.cooldown, POLICY).health
    closed, transition = record_in_progress(probing, T0 + POLICY.cooldown)
    assert closed.state is CircuitState.CLOSED and transition is not None


def test_a_weight_a_rolled_back_version_left_behind_never_outweighs_the_failures_counted():
    # code older than the field resets the failures and writes the weight back unchanged (an unknown key)
    health = replace(DependencyHealth.fresh("shipping", T0), consecutive_failures=0, failure_weight=5)
    assert fail(health, POLICY.threshold - 1).state is CircuitState.CLOSED
    assert from_document(DependencyHealth, to_document(health)) == health


def test_a_probe_after_further_ahead_than_the_longest_cool_down_is_re_dated_a_cool_down_from_the_readers_now():
    """An opener whose clock runs an hour ahead wrote ``probeAfter`` an hour into the others' future: before, they
    failed fast for the hour. A reader re-dates it (written with its refusal) a cool-down from its own clock, and the
    probe is due then; the supervisor's wait reads it the same way. One within the cap is kept as written."""
    ahead = fail(DependencyHealth.fresh("shipping", T0 + timedelta(hours=1)), POLICY.threshold, T0 + timedelta(hours=1))
    assert ahead.probe_after == T0 + timedelta(hours=1) + POLICY.cooldown
    refused = admit(ahead, T0, POLICY)
    assert not refused.allowed and refused.changed and refused.redated == ahead.probe_after
    assert refused.health.probe_after == T0 + POLICY.cooldown
    assert ahead.next_probe(T0, POLICY) == T0 + POLICY.cooldown
    later = T0 + POLICY.cooldown
    assert admit(refused.health, later, POLICY).allowed  # the probe, a cool-down on
    within = replace(opened(), probe_after=T0 + POLICY.cooldown_max)
    kept = admit(within, T0, POLICY)
    assert not kept.allowed and not kept.changed and kept.redated is None
    assert within.next_probe(T0, POLICY) == T0 + POLICY.cooldown_max


def test_a_probe_after_edited_to_the_year_9998_no_longer_holds_the_circuit_open_for_ever():
    """Before, every agent failed fast on it until the year 9998, and every waiting order waited its whole bound."""
    edited = replace(opened(), reopens=3, probe_after=datetime.fromisoformat("9998-12-31T00:00:00+00:00"))
    refused = admit(edited, T0, POLICY)
    assert not refused.allowed and refused.health.probe_after == T0 + POLICY.cooldown_after(3)
    assert edited.next_probe(T0, POLICY) == T0 + POLICY.cooldown_after(3)
    assert admit(refused.health, T0 + POLICY.cooldown_max, POLICY).allowed


def test_a_probe_grant_dated_further_ahead_than_the_longest_cool_down_lapses_a_cool_down_from_the_readers_now():
    """A probe granted by an agent whose clock runs an hour ahead, which never reported (its agent died): before, the
    grant lapsed only when the others' clocks reached its time plus a cool-down, the circuit half-open and refusing
    every call for the hour. The first reader re-dates it; it lapses a cool-down later."""
    ahead = T0 + timedelta(hours=1)
    granted = admit(opened(), ahead, POLICY).health
    assert granted.state is CircuitState.HALF_OPEN and granted.updated_at == ahead
    refused = admit(granted, T0 + POLICY.cooldown, POLICY)
    assert not refused.allowed and refused.changed and refused.redated == ahead
    assert refused.health.updated_at == T0 + POLICY.cooldown and refused.health.probes_granted == 1
    assert not admit(refused.health, T0 + 2 * POLICY.cooldown - timedelta(seconds=1), POLICY).allowed
    assert admit(refused.health, T0 + 2 * POLICY.cooldown, POLICY).allowed
    near = admit(opened(), T0 + POLICY.cooldown + timedelta(seconds=5), POLICY).health  # a clock 5 s ahead
    assert admit(near, T0 + POLICY.cooldown, POLICY) == Admission(False, False, near, False)


def test_a_probe_after_written_at_the_cap_by_a_clock_seconds_ahead_is_kept_as_written():
    """Clocks seconds apart are within what the settings allow (``CIRCUIT_HEALTH_CACHE_SECONDS`` leaves half the first
    cool-down to them): a ``probeAfter`` written at the cap by a clock 10 s ahead, read at once, is kept, no write and
    no ``DependencyProbeRedated`` warning. Before the margin every such read re-dated it (a write, a warning) during a
    long outage's cool-downs at the cap. Past the margin it is re-dated."""
    at_cap = replace(opened(), reopens=5, probe_after=T0 + timedelta(seconds=10) + POLICY.cooldown_max)
    kept = admit(at_cap, T0, POLICY)
    assert not kept.allowed and not kept.changed and kept.redated is None
    assert at_cap.next_probe(T0, POLICY) == at_cap.probe_after
    beyond = replace(at_cap, probe_after=T0 + POLICY.cooldown_max + POLICY.cooldown / 2 + timedelta(seconds=1))
    assert admit(beyond, T0, POLICY).redated == beyond.probe_after
    granted = replace(admit(opened(), T0 + timedelta(seconds=10) + POLICY.cooldown_max, POLICY).health)
    assert granted.state is CircuitState.HALF_OPEN
    assert admit(granted, T0, POLICY) == Admission(False, False, granted, False)
