"""The end-to-end retry budget, computed from the settings."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path

from contracts.names import QUEUE_MAX_DELIVERY_COUNT
from domain.retry import exponential_backoff
from domain.retry_budget import DEFAULT_SETTINGS_BUDGET, RetryBudget, calls_fitting_in
from domain.workflow import Transport
from settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def budget_of(settings: Settings, max_delivery_count: int = QUEUE_MAX_DELIVERY_COUNT) -> RetryBudget:
    """The budget of these settings (the domain reads no setting: the caller passes the values)."""
    return RetryBudget(
        supervisor_attempts=settings.max_failures,
        deliveries_per_request=max_delivery_count,
        agent_attempts=settings.agent_max_attempts,
        agent_retry_base=settings.agent_retry_base,
        agent_retry_max=settings.agent_retry_max,
        step_timeout=settings.step_timeout,
    )


def budget(**overrides: str) -> RetryBudget:
    return budget_of(Settings.from_env({}, **overrides))


def test_default_worst_case_is_within_the_documented_budget():
    defaults = budget()
    assert defaults.worst_case_calls() == 3 * QUEUE_MAX_DELIVERY_COUNT * 4
    assert defaults.worst_case_calls() <= DEFAULT_SETTINGS_BUDGET
    assert defaults.worst_case_calls_within_deadline() <= defaults.worst_case_calls()
    docs = [p for p in (ROOT / "docs" / "supervisor.md", ROOT / "README.md") if p.exists()]
    assert any(f"**{DEFAULT_SETTINGS_BUDGET}** calls" in p.read_text(encoding="utf-8") for p in docs)


def test_each_layer_bounds_the_product():
    assert budget(MAX_FAILURES="5").worst_case_calls() == 5 * QUEUE_MAX_DELIVERY_COUNT * 4
    assert budget(AGENT_MAX_ATTEMPTS="2").worst_case_calls() == 3 * QUEUE_MAX_DELIVERY_COUNT * 2
    assert budget_of(Settings.from_env({}), max_delivery_count=1).worst_case_calls() == 12
    assert budget().worst_case_calls(Transport.IN_PROCESS) == 3 * 1 * 4


def test_a_short_deadline_cuts_the_agent_retries():
    # 500 ms base: calls at 0, >=0.25 s, >=0.75 s, >=1.75 s: three fit in one second.
    short = budget(STEP_TIMEOUT_SECONDS="1", AGENT_RETRY_BASE_MS="500", AGENT_RETRY_MAX_MS="8000")
    assert short.calls_per_delivery() == 3
    assert short.worst_case_calls_within_deadline() == 3 * QUEUE_MAX_DELIVERY_COUNT * 3
    assert short.worst_case_calls() == 3 * QUEUE_MAX_DELIVERY_COUNT * 4


def test_without_backoff_only_the_attempt_limit_bounds_the_calls():
    assert calls_fitting_in(timedelta(seconds=60), timedelta(0), timedelta(seconds=8)) is None
    assert budget(AGENT_RETRY_BASE_MS="0").calls_per_delivery() == 4


class _ShortestJitter(random.Random):
    def uniform(self, a: float, b: float) -> float:
        return a


def test_the_deadline_bound_matches_the_agents_shortest_backoffs():
    base, cap = timedelta(milliseconds=300), timedelta(seconds=2)
    starts = [0.0]
    for failures in range(1, 40):
        starts.append(starts[-1] + exponential_backoff(failures, base, cap, _ShortestJitter()).total_seconds())
    for seconds in (0.1, 0.15, 0.5, 1.0, 3.0, 10.0, 30.0):
        expected = sum(1 for s in starts if s <= seconds + 1e-9)
        assert calls_fitting_in(timedelta(seconds=seconds), base, cap) == expected, seconds
