"""The agents' side of dependency health (``domain/circuit.py``): ask before a call, report after.

- ``admit``: closed, call; open, fail fast (no call); half-open, a probe grant is written before the
  call, so only ``CIRCUIT_PROBES`` agents probe at once.
- ``succeeded`` / ``in_progress`` / ``failed``: a transient failure is counted and may open the circuit
  (a timeout weighs half a failure); "still working on the same key" proves the service up (the weight
  cleared, the failures in a row not); a success on a closed circuit with nothing counted costs no
  write. Which outcome is which: ``order_agents.runtime.report_outcome``.
- What the gate last read or wrote is trusted for ``CIRCUIT_HEALTH_CACHE_SECONDS`` (``RecentHealth``),
  only to admit on a closed circuit: a healthy dependency then costs one point read per call instead of
  two. The window may miss another instance's opening (a few more calls reach a failing service).
- A refusal, a probe, a failure and a success always read (and write when they change something): a
  refusal on a stale view would be a failure the supervisor counts as the order's own, and a skipped
  success would leave other instances' failures counted, opening the circuit on failures that were not
  in a row (docs/supervisor.md, "Dependency outages").

Every circuit transition is an event: ``DependencyOutage`` (closed -> open), ``DependencyProbing``
(open -> half-open), ``DependencyReopened`` (a probe failed), ``DependencyRecovered`` (-> closed,
with the outage's length). ``DependencyProbeRedated``: a ``probeAfter`` further ahead than any cool-down,
re-dated (``domain.circuit.DependencyHealth.probe_due``). The health store failing never fails a call: the
gate then lets the call through (fail open) and logs ``DependencyHealthUnavailable``."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from adapters.clock import Clock
from adapters.cosmos.errors import StoreError
from adapters.cosmos.health_store import HealthStore, RacePause, Read, RecentHealth, update_health
from adapters.cosmos.mapping import DocumentError
from domain.circuit import (
    Admission,
    CircuitPolicy,
    CircuitState,
    DependencyHealth,
    Transition,
    admit,
    record_failure,
    record_in_progress,
    record_success,
)
from domain.timefmt import text_or_none, to_text
from observability.events import app_event

if TYPE_CHECKING:
    from dependencies import AppContext

log = logging.getLogger(__name__)

_EVENTS = {
    (CircuitState.CLOSED, CircuitState.OPEN): ("DependencyOutage", logging.WARNING),
    (CircuitState.OPEN, CircuitState.HALF_OPEN): ("DependencyProbing", logging.INFO),
    (CircuitState.HALF_OPEN, CircuitState.OPEN): ("DependencyReopened", logging.WARNING),
    (CircuitState.OPEN, CircuitState.CLOSED): ("DependencyRecovered", logging.WARNING),
    (CircuitState.HALF_OPEN, CircuitState.CLOSED): ("DependencyRecovered", logging.WARNING),
}


def report_transition(transition: Transition, health: DependencyHealth) -> None:
    name, level = _EVENTS[(transition.before, transition.after)]
    app_event(
        name,
        f"dependency {transition.dependency}: circuit {transition.before} -> {transition.after}",
        level,
        dependency=transition.dependency,
        fromState=str(transition.before),
        toState=str(transition.after),
        consecutiveFailures=health.consecutive_failures,
        failureWeight=health.failure_weight,
        probeAfter=text_or_none(health.probe_after),
        outageSeconds=transition.outage_seconds,
    )


class DependencyGate:
    def __init__(
        self,
        store: HealthStore,
        clock: Clock,
        policy: CircuitPolicy,
        recent: RecentHealth | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._policy = policy
        self._recent = recent if recent is not None else RecentHealth(timedelta(0))
        self._pause = RacePause(clock.sleep, rng if rng is not None else random.Random())

    def admit(self, dependency: str) -> bool:
        """May this agent call ``dependency`` now? False: fail fast, the circuit is open."""
        now = self._clock.now()
        known = self._recent.fresh(dependency, now)
        if known is not None and known.state is CircuitState.CLOSED:
            return True
        # never refuse on what was seen earlier: another instance may have closed the circuit since,
        # and a refusal then is a failure the supervisor counts as the order's own
        admission = self._update(dependency, lambda h: _admission(h, self._clock, self._policy))
        if admission is not None and admission.redated is not None:
            _redated(admission.health, admission.redated, now)
        return True if admission is None else admission.allowed

    def succeeded(self, dependency: str) -> None:
        # Always read (a write only when something is counted): another instance's failures since this
        # one's view must be reset, or the circuit opens on failures that were not in a row.
        self._update(dependency, lambda h: record_success(h, self._clock.now()))

    def in_progress(self, dependency: str) -> None:
        """The service answered that it is still working on an earlier call with the same key: it is up."""
        self._update(dependency, lambda h: record_in_progress(h, self._clock.now()))

    def failed(self, dependency: str, *, timed_out: bool = False) -> None:
        """A transient failure; ``timed_out``: no answer came in time (half a failure)."""
        self._update(dependency, lambda h: record_failure(h, self._clock.now(), self._policy, timed_out=timed_out))

    def _update[T](self, dependency: str, change: Callable[[DependencyHealth], tuple[DependencyHealth, T]]) -> T | None:
        timed = _TimedReads(self._store, self._clock, self._recent)
        try:
            written, result = update_health(timed, dependency, change, self._clock.now(), pause=self._pause)
        except (StoreError, DocumentError) as exc:
            # DocumentError: a health document this version cannot read (a newer version's circuit state or field,
            # during a rolling upgrade or after a rollback): called anyway, and never written over
            self._recent.forget(dependency, self._clock.now())
            app_event(
                "DependencyHealthUnavailable",
                f"dependency {dependency}: health not read or written ({type(exc).__name__}); calling anyway",
                logging.WARNING,
                dependency=dependency,
                reason=str(exc),
            )
            return None
        if timed.last is not None:  # always: every update reads first
            self._recent.remember(written, timed.last)
        transition = result.transition if isinstance(result, Admission) else result
        if isinstance(transition, Transition):
            report_transition(transition, written)
        return result


def _redated(health: DependencyHealth, written: datetime, now: datetime) -> None:
    what = "probeAfter" if health.state is CircuitState.OPEN else "its probe grants' updatedAt"
    app_event(
        "DependencyProbeRedated",
        f"dependency {health.dependency}: {what} {to_text(written)} is further ahead than any cool-down (an "
        f"agent's clock ahead of this one's, or an edit): re-dated by this clock",
        logging.WARNING,
        dependency=health.dependency,
        state=str(health.state),
        written=to_text(written),
        probeAfter=text_or_none(health.probe_after),
        aheadSeconds=(written - now).total_seconds(),
    )


class _TimedReads:
    """The health store, dating what it returns so ``RecentHealth`` keeps the latest view whichever invocation's
    request came back last.

    A read is dated when it began. A write is dated when it was answered (a read that began before it landed may
    have missed it) and trusted from when it was sent (it may change as soon as it lands)."""

    def __init__(self, store: HealthStore, clock: Clock, recent: RecentHealth) -> None:
        self._store = store
        self._clock = clock
        self._recent = recent
        self.last: Read | None = None

    def get(self, dependency: str) -> DependencyHealth | None:
        self.last = self._recent.reading(self._clock.now())
        return self._store.get(dependency)

    def save(self, doc: DependencyHealth) -> DependencyHealth:
        sent = self._recent.reading(self._clock.now())
        written = self._store.save(doc)
        self.last = self._recent.landed(sent)
        return written

    def count_waiting(self, reason: str) -> int:
        return self._store.count_waiting(reason)


def _admission(health: DependencyHealth, clock: Clock, policy: CircuitPolicy) -> tuple[DependencyHealth, Admission]:
    decided = admit(health, clock.now(), policy)
    return decided.health, decided


def gate_of(ctx: AppContext) -> DependencyGate:
    """The gate over the context's dependency health."""
    return DependencyGate(ctx.health, ctx.clock, ctx.settings.circuit_policy, ctx.recent_health, ctx.rng)
