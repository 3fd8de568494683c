"""The outage-alert rules (domain/circuit.py) over random timelines, seeded: a circuit opened and closed by agents
whose clocks are up to 5 minutes apart, a supervisor that runs every period or skips runs, and whose sends and
health writes fail at random (a send may also be delivered and its response lost). The supervisor's pass is
``supervisor.outage._alert_dependency``'s, over the pure rules (its Cosmos path is tested in test_outage_gaps.py
and test_outage_settle.py). Once the circuit stays closed and the supervisor runs without failures:

- every outage paged (a ``DependencyOutage`` delivered) has its ``DependencyRecovered`` (the same outage, by its
  first opening); no recovery is delivered before its outage's page;
- every opening that a run completed without failures found in the document (open, or the last outage closed) is
  paged or taken into the outage paged (``OutageContinued``).

Not checked: an outage that opened and closed unseen, followed by another before any run (the document names the
last one only: docs/supervisor.md, "What it does not cover"). The supervisor sometimes does not run for hours (a
deployment, a long pause), the outage before them unseen: history, never paged nor recovered."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from domain.circuit import (
    CONTINUED,
    NOT_SENT,
    OUTAGE_ALERT,
    RECOVERY_ALERT,
    CircuitState,
    DependencyHealth,
    mark_alerted,
    mark_paging,
    outage_alerts_due,
)
from tests.circuit.support import closed, opened

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PERIOD = timedelta(seconds=30)
MAX_AGE = timedelta(hours=1)  # supervisor.outage.OUTAGE_ALERT_MAX_AGE


class _Failed(Exception):
    """A health write or a send that failed: the run stops there (the next one starts over from the document)."""


@dataclass
class Supervisor:
    rng: random.Random
    settle: timedelta
    failures: float  # the chance of each write and each send failing
    delivered: list[tuple[str, datetime]] = field(default_factory=list)  # (kind, started), in order
    covered: set[datetime] = field(default_factory=set)  # openings paged or taken into an outage paged
    seen: set[datetime] = field(default_factory=set)  # openings a run without failures found in the document

    def _write(self) -> None:
        if self.rng.random() < self.failures:
            raise _Failed

    def _send(self, kind: str, started: datetime) -> None:
        roll = self.rng.random()
        if roll < self.failures / 2:
            raise _Failed  # not delivered
        self.delivered.append((kind, started))
        if kind == OUTAGE_ALERT:
            self.covered.add(started)
        if roll < self.failures:
            raise _Failed  # delivered, its response lost

    def run(self, health: DependencyHealth, now: datetime) -> DependencyHealth:
        """One pass of ``_alert_dependency`` over ``health``; returns the document as it then is."""
        latest = health.opened_at if health.state is not CircuitState.CLOSED else health.last_outage_started_at
        recent = health.state is not CircuitState.CLOSED or (
            health.last_closed_at is not None and health.last_closed_at >= now - MAX_AGE
        )
        try:
            for alert in outage_alerts_due(health, closed_before=now - MAX_AGE, now=now, settle=self.settle):
                if alert.kind == OUTAGE_ALERT:
                    self._write()
                    health, _changed = mark_paging(health, alert)
                if alert.kind not in NOT_SENT:
                    self._send(alert.kind, alert.started)
                self._write()
                health, marked = mark_alerted(health, alert)
                if alert.kind == CONTINUED and marked:
                    self.covered.add(alert.last_opening)
                if alert.kind in NOT_SENT and not marked:
                    break
        except _Failed:
            return health
        if latest is not None and recent:
            self.seen.add(latest)
        return health


def timeline(seed: int, settle: timedelta) -> Supervisor:
    rng = random.Random(seed)
    skews = [timedelta(seconds=rng.uniform(-300, 300)) for _ in range(3)] + [timedelta(0)]
    supervisor = Supervisor(rng, settle, failures=0.2)
    health = DependencyHealth.fresh("payment", T0)
    moves: list[tuple[datetime, bool]] = []
    paused: list[tuple[datetime, datetime]] = []  # the supervisor not running (a deployment, a long pause)
    t = T0
    for _ in range(rng.randint(3, 12)):
        if moves and rng.random() < 0.15:  # hours after the last outage, both unseen: that one is history
            t += timedelta(seconds=rng.uniform(3600, 9000))
            paused.append((moves[-2][0] - timedelta(seconds=10), t + timedelta(seconds=rng.uniform(0, 300))))
        else:
            t += timedelta(seconds=rng.uniform(5, 500))
        moves.append((t, True))
        t += timedelta(seconds=rng.uniform(30, 200))
        moves.append((t, False))
    end = t + settle + timedelta(seconds=300 + 300 + 5 * 30)  # the skews, the settling period, a few runs
    run_at = T0 + timedelta(seconds=rng.uniform(0, 30))
    while run_at <= end:
        while moves and moves[0][0] <= run_at:
            at, opening = moves.pop(0)
            by = at + rng.choice(skews)  # the clock of the agent that moves it
            health = opened(health, by) if opening else closed(health, by)
        flushing = run_at > t  # closed for good: the supervisor runs every period without failures
        supervisor.failures = 0.0 if flushing else 0.2
        if flushing or (rng.random() < 0.7 and not any(a <= run_at < b for a, b in paused)):
            health = supervisor.run(health, run_at)
        run_at += PERIOD
    return supervisor


@pytest.mark.parametrize("settle", [0, 300])
def test_random_timelines_page_every_outage_seen_and_recover_every_outage_paged(settle: int) -> None:
    for seed in range(400):
        supervisor = timeline(seed, timedelta(seconds=settle))
        pages = [started for kind, started in supervisor.delivered if kind == OUTAGE_ALERT]
        recoveries = [started for kind, started in supervisor.delivered if kind == RECOVERY_ALERT]
        assert set(pages) == set(recoveries), (seed, supervisor.delivered)  # every page recovered, no other
        for n, (kind, started) in enumerate(supervisor.delivered):  # no recovery before its outage's page
            before = supervisor.delivered[:n]
            assert kind != RECOVERY_ALERT or (OUTAGE_ALERT, started) in before, (seed, supervisor.delivered)
        assert supervisor.seen <= supervisor.covered, (seed, sorted(supervisor.seen - supervisor.covered))
