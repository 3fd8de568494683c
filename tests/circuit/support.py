"""Circuits for the outage-alert tests: a small policy (two failures open a circuit) and the two
moves the tests make, opening a closed circuit and closing one through a successful probe."""

from __future__ import annotations

from datetime import datetime, timedelta

from domain.circuit import CircuitPolicy, DependencyHealth, admit, record_failure, record_success

POLICY = CircuitPolicy(threshold=2, cooldown=timedelta(seconds=30), cooldown_max=timedelta(seconds=120), probes=1)


def opened(health: DependencyHealth, at: datetime) -> DependencyHealth:
    """``health`` after ``POLICY.threshold`` transient failures at ``at``: the circuit open."""
    for _ in range(POLICY.threshold):
        health, _t = record_failure(health, at, POLICY)
    return health


def closed(health: DependencyHealth, at: datetime) -> DependencyHealth:
    """``health`` after a probe admitted at ``at`` succeeded: the circuit closed."""
    health, _t = record_success(admit(health, at, POLICY).health, at)
    return health
