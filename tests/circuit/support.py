"""Circuits for the outage-alert tests: a small policy (two failures open a circuit) and the two
moves the tests make, opening a closed circuit and closing one through a successful probe; and the
health store with slow requests the red-team tests of the agents' health window use."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from domain.circuit import CircuitPolicy, DependencyHealth, admit, record_failure, record_success

if TYPE_CHECKING:
    from adapters.cosmos.health_store import CosmosHealthStore

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


class SlowHealthStore:
    """The real health store, with its requests slow: other invocations go on meanwhile. Each hook runs
    once: ``during_next_read`` after a read has fetched its document and before it returns it,
    ``during_next_save`` before a write lands, ``after_next_save`` after a write has landed and before
    its response comes back."""

    def __init__(self, inner: CosmosHealthStore) -> None:
        self.inner = inner
        self.during_next_read: Callable[[], None] | None = None
        self.during_next_save: Callable[[], None] | None = None
        self.after_next_save: Callable[[], None] | None = None

    def _fire(self, hook: str) -> None:
        run: Callable[[], None] | None = getattr(self, hook)
        setattr(self, hook, None)
        if run is not None:
            run()

    def get(self, dependency: str) -> DependencyHealth | None:
        doc = self.inner.get(dependency)
        self._fire("during_next_read")
        return doc

    def save(self, doc: DependencyHealth) -> DependencyHealth:
        self._fire("during_next_save")
        written = self.inner.save(doc)
        self._fire("after_next_save")
        return written

    def count_waiting(self, reason: str) -> int:
        return self.inner.count_waiting(reason)
