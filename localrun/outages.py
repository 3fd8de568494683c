"""The report's ``outages`` section: what the circuits (``domain/circuit.py``) did during a run.

Per dependency: ``opened`` (``DependencyOutage`` events: a closed circuit opened), ``closed``
(``DependencyRecovered``), ``longest_outage_s`` (the longest open-to-closed span the app measured),
``orders_waited`` (orders the supervisor rescheduled at least once to wait for it:
``SupervisorOutageWait``) and ``max_wait_s``: the longest an order waited, from its first
``OutageWait`` to the next write that ended it (a step result, an undo, a terminal state; not a wait, a new
attempt or round starting, or a side note), in true simulated time from the audited transitions.
``alerts_opened`` / ``alerts_closed``: the ``DependencyOutage`` / ``DependencyRecovered`` operator
alerts about it on the alert queue, and ``paged_outages`` / ``paged_recoveries``: how many of each the app owes,
from the circuit's moves (``CircuitLog``, ``paged_outages``): one outage per opening, less the reopenings sooner
than ``OUTAGE_SETTLE_SECONDS`` after a closing (each continues the outage before it), and one recovery per such
outage whose circuit then stayed closed that long (the run waits for it: ``CircuitLog.owed``), judged as the app
does under clock skew: the agents' clocks for the gap, the supervisor's against the closing's for the recovery (a
reopening after the supervisor's clock passed it is a new outage; one in the supervisor period after that, before
its run, the app takes in and the report does not: with the supervisor ahead of the agents only);
``terminal_after_end_p99_s``: the p99, over the orders that waited for it, of how long
after the end of the last injected outage (of any service, before the order settled) the order reached a
terminal state (0 if it settled inside an outage).

``operator_actions`` classifies the orders that ended ``Error`` or ``CompensationFailed`` from the
runner's own evidence: an order needed an operator because of an outage alone when it was caught in
one (the app made it wait, an agent refused an attempt of it because the circuit was open, or a call
of it failed inside an injected outage window of that service)
and every remote call of it that failed, failed transiently inside such a window: no permanent
refusal, no failure or call past its deadline on a healthy service, and no attempt the supervisor
counted that ran while its service had no outage (``_counted_outside_outages``: a crash, a lost
reply). Of those, the ones escalated
by ``MAX_OUTAGE_WAIT_MINUTES`` (the reason says so and the runner saw the order wait that long, or
waiting is off: 0) are escalated by design."""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from adapters.clock import Clock
from domain import timefmt
from domain.records import SIDE_NOTES
from domain.workflow import AGENTS
from localrun.audit import RemoteFailure, Transition

FAILED_STATES = ("Error", "CompensationFailed")
BY_THE_BOUND = "MAX_OUTAGE_WAIT_MINUTES"  # in the lastError of an order escalated by the bound
# The app measures the bound on its supervisors' clocks, the runner in true time: skew and timer slack
BOUND_SLACK = timedelta(minutes=2)
Window = tuple[datetime, datetime]  # an injected outage: [start, end)

WAIT = "OutageWait"
# An attempt an agent refused because the circuit was open (order_agents/runtime.py): no remote call,
# so the probe never sees it; the forward path records it as a transient step failure saying so.
FAILED_FAST = ("StepTransientFailure", "(circuit open)")
# The same for an undo: a round whose agent refused it on an open circuit releases its record saying so
# (domain.compensation.release_undo)
UNDO_FAILED_FAST = "UndoDependencyOpen"


def _failed_fast(t: Transition) -> bool:
    """``t`` says an agent refused the order's step or undo because its circuit was open (no call made)."""
    return t.event == UNDO_FAILED_FAST or (t.event == FAILED_FAST[0] and FAILED_FAST[1] in t.detail)


# Writes that happen while an order is still waiting (a new attempt or round reaching the open circuit), and the
# side notes written beside whoever moved the record (a payment notification applied, a Received owed or said, an
# owed alert noted: domain.records.SIDE_NOTES), which do not end the app's wait either (its outageWaitSince)
STILL_WAITING = {
    WAIT,
    "Claimed",
    "StepStarted",
    "StepTransientFailure",
    "CompensationClaimed",
    "UndoStarted",
    "UndoRetryScheduled",  # a round holding its record through an undo's backoff (domain.compensation.hold_undo)
    # a claim whose start its run never tried, released at once, uncounted (orchestrators/starter.py release_untried):
    # the app's wait (outageWaitSince) goes on through it
    "StartNotTried",
    "CompensationStartNotTried",
    UNDO_FAILED_FAST,  # a round reaching the open circuit again, releasing its record to the supervisor
    *SIDE_NOTES,
}


def _wait_periods(transitions: Iterable[Transition]) -> dict[str, list[float]]:
    """Per order, how long each of its waits lasted (s): from an ``OutageWait`` to the next write
    that was neither a wait nor a new attempt or round starting."""
    by_order: dict[str, list[Transition]] = defaultdict(list)
    for t in transitions:
        by_order[t.order_id].append(t)
    periods: dict[str, list[float]] = {}
    for order_id, seen in by_order.items():
        began: datetime | None = None
        for t in sorted(seen, key=lambda t: t.at):
            if t.event == WAIT and began is None:
                began = t.at
            elif began is not None and t.event not in STILL_WAITING:
                periods.setdefault(order_id, []).append((t.at - began).total_seconds())
                began = None
    return periods


def _longest_waits(transitions: Iterable[Transition]) -> dict[str, float]:
    return {order_id: max(waits) for order_id, waits in _wait_periods(transitions).items()}


def _p99(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1)


@dataclass(frozen=True)
class CircuitMove:
    at: datetime  # true time
    dependency: str
    opened: bool  # closed -> open (``DependencyOutage``); else -> closed (``DependencyRecovered``)
    # the clock skew of the host that moved it (profile ``host.clock_skew_s``): the health document holds
    # ``at + skew`` (``openedAt``, ``lastClosedAt``), and the supervisor judges the settling period by that
    skew: timedelta = timedelta(0)

    @property
    def written_at(self) -> datetime:
        return self.at + self.skew


class CircuitLog(logging.Handler):
    """The circuits' openings and closings in true time (the agents' transition events, with the skew of the host
    that logged them: ``skew``, the app's clock's offset on the task, localrun/clocks.py), and the outages the
    supervisor paged and recovered (``OutageAlertSent``, by ``outageStartedAt``): what the run is owed."""

    def __init__(self, clock: Clock, skew: Callable[[], timedelta] | None = None) -> None:
        super().__init__(level=logging.DEBUG)
        self._clock = clock
        self.skew = skew
        self.moves: list[CircuitMove] = []
        # by the moment the outage began: its text is ``timefmt``'s, ``+00:00`` from a release before session 63
        self._paged: dict[str, set[datetime]] = defaultdict(set)
        self._recovered: dict[str, set[datetime]] = defaultdict(set)

    def emit(self, record: logging.LogRecord) -> None:
        name, dependency = getattr(record, "event", None), getattr(record, "dependency", None)
        if not isinstance(dependency, str):
            return
        if name in ("DependencyOutage", "DependencyRecovered"):
            skew = self.skew() if self.skew is not None else timedelta(0)
            self.moves.append(CircuitMove(self._clock.now(), dependency, name == "DependencyOutage", skew))
        elif name == "OutageAlertSent":
            kind, started = getattr(record, "alertKind", None), getattr(record, "outageStartedAt", None)
            try:
                began = timefmt.parse(started) if isinstance(started, str) else None
            except ValueError:
                began = None
            if began is not None:
                (self._paged if kind == "DependencyOutage" else self._recovered)[dependency].add(began)

    def owed(self, now: datetime, settle: timedelta, supervisor_skew: timedelta = timedelta(0)) -> bool:
        """A recovery still to come: an outage paged and not recovered whose circuit is closed, for less than
        the settling period and a few supervisor runs (``OWED_SLACK``) after it closed by the supervisor's clock
        (``supervisor_skew``) against the closing's (past that, it is not coming: the report's ``paged_recoveries``
        and ``alerts_closed`` then differ)."""
        last: dict[str, CircuitMove] = {}
        for move in self.moves:
            last[move.dependency] = move
        return any(
            not move.opened
            and self._paged[d] - self._recovered[d]
            and now + supervisor_skew < move.written_at + settle + OWED_SLACK
            for d, move in last.items()
        )


# How long past the settling period the run waits for a recovery owed: a few supervisor periods (30 s)
OWED_SLACK = timedelta(minutes=3)


def paged_outages(
    moves: Iterable[CircuitMove], settle: timedelta, end: datetime, supervisor_skew: timedelta = timedelta(0)
) -> dict[str, tuple[int, int]]:
    """Per dependency, the outages the app pages and the recoveries it sends by ``end`` (true time): an opening
    sooner than ``settle`` after the last closing continues the outage before it; a recovery is due once the
    circuit stayed closed ``settle``. Both as the app judges them: the gap between the times the agents wrote
    (their hosts' clocks, ``CircuitMove.written_at``), and the closing's against the supervisor's clock
    (``supervisor_skew``): a supervisor ahead of the agents sends the recovery sooner in true time, and an
    opening after that is a new outage, however soon after the closing by the agents' clocks."""
    by_dependency: dict[str, list[CircuitMove]] = defaultdict(list)
    for move in moves:
        by_dependency[move.dependency].append(move)
    counts: dict[str, tuple[int, int]] = {}
    for dependency, seen in by_dependency.items():
        outages = recoveries = 0
        closed_at: datetime | None = None
        is_open = False
        for move in sorted(seen, key=lambda m: m.at):
            if move.opened:
                if (
                    outages
                    and closed_at is not None
                    and move.written_at - closed_at < settle
                    and move.at + supervisor_skew < closed_at + settle
                ):
                    is_open = True
                    continue  # the same outage goes on
                recoveries += 1 if outages else 0
                outages += 1
                is_open = True
            else:
                closed_at, is_open = move.written_at, False
        if outages and not is_open and closed_at is not None and end + supervisor_skew - closed_at >= settle:
            recoveries += 1
        counts[dependency] = (outages, recoveries)
    return counts


def outage_summary(
    events: list[dict[str, Any]],
    transitions: Iterable[Transition],
    alerts: Sequence[Mapping[str, Any]] = (),
    windows: Mapping[str, Sequence[Window]] | None = None,
    terminal_at: Mapping[str, datetime] | None = None,
    paged: Mapping[str, tuple[int, int]] | None = None,
) -> dict[str, dict[str, Any]]:
    """``paged``: per dependency, the outages and recoveries the app owes (``paged_outages``)."""
    summary: dict[str, dict[str, Any]] = {}

    def entry(dependency: str) -> dict[str, Any]:
        return summary.setdefault(
            dependency,
            {
                "opened": 0,
                "closed": 0,
                "alerts_opened": 0,
                "alerts_closed": 0,
                "paged_outages": 0,
                "paged_recoveries": 0,
                "longest_outage_s": 0.0,
                "orders_waited": 0,
                "max_wait_s": 0.0,
                "terminal_after_end_p99_s": 0.0,
            },
        )

    for alert in alerts:
        details = alert.get("details")
        dependency = details.get("dependency") if isinstance(details, dict) else None
        if isinstance(dependency, str) and alert.get("kind") in ("DependencyOutage", "DependencyRecovered"):
            entry(dependency)["alerts_opened" if alert["kind"] == "DependencyOutage" else "alerts_closed"] += 1

    for dependency, (outages, recoveries) in (paged or {}).items():
        entry(dependency).update(paged_outages=outages, paged_recoveries=recoveries)

    waited: dict[str, set[str]] = defaultdict(set)
    for event in events:
        dependency = event.get("dependency")
        if not isinstance(dependency, str):
            continue
        if event["event"] == "DependencyOutage":
            entry(dependency)["opened"] += 1
        elif event["event"] == "DependencyRecovered":
            row = entry(dependency)
            row["closed"] += 1
            row["longest_outage_s"] = max(row["longest_outage_s"], float(event.get("outageSeconds") or 0.0))
        elif event["event"] == "SupervisorOutageWait" and isinstance(event.get("orderId"), str):
            waited[dependency].add(event["orderId"])
    longest = _longest_waits(transitions)
    for dependency, orders in waited.items():
        row = entry(dependency)
        row["orders_waited"] = len(orders)
        row["max_wait_s"] = round(max((longest.get(o, 0.0) for o in orders), default=0.0), 1)
        # overlapping outages: an order waiting for this one may then wait for another one
        ends = [end for spans in (windows or {}).values() for _start, end in spans]
        after: list[float] = []
        for order in orders:
            settled = (terminal_at or {}).get(order)
            if settled is None:
                continue
            before = [end for end in ends if end <= settled]
            after.append((settled - max(before)).total_seconds() if before else 0.0)
        row["terminal_after_end_p99_s"] = _p99(after)
    return dict(sorted(summary.items()))


@dataclass(frozen=True)
class OperatorActions:
    failed: list[str]  # ended Error or CompensationFailed
    outage_only: list[str]  # of those: needed an operator because of an outage alone
    by_the_bound: list[str]  # of those: escalated by MAX_OUTAGE_WAIT_MINUTES, by design

    @property
    def unexpected(self) -> list[str]:
        """Outage-only failures the policy should have prevented (the invariant: none)."""
        return [o for o in self.outage_only if o not in set(self.by_the_bound)]


def operator_actions(
    finals: Mapping[str, Mapping[str, Any]],
    transitions: Iterable[Transition],
    failures: Iterable[RemoteFailure],
    windows: Mapping[str, Sequence[Window]],
    waiting_enabled: bool,
    bound: timedelta | None = None,
    own_faults: Iterable[tuple[str, datetime]] = (),
) -> OperatorActions:
    """``finals``: the state documents by order id; ``failures``: the runner's failed remote calls.
    ``bound``: MAX_OUTAGE_WAIT_MINUTES; given, an order counts as escalated by it only if it waited
    that long in all (less ``BOUND_SLACK``), whatever its ``lastError`` says. ``own_faults``: (order,
    when) of the faults the runner injected on calls that took effect (a lost or late reply, an
    agent crash): a counted attempt that had one failed on its own, outage or not."""
    transitions = list(transitions)
    failed = sorted(o for o, doc in finals.items() if doc.get("processState") in FAILED_STATES)
    caught: set[str] = set()
    for t in transitions:
        if t.event == WAIT or _failed_fast(t):
            caught.add(t.order_id)
    own_failure: set[str] = set()
    for f in failures:
        inside = any(start <= f.at < end for start, end in windows.get(f.service, ()))
        if f.transient and inside:
            caught.add(f.order_id)
        else:
            own_failure.add(f.order_id)  # a permanent refusal, or a failure on a healthy service
    own_failure |= _counted_outside_outages(transitions, windows)
    own_failure |= _counted_after_own_fault(transitions, own_faults)
    outage_only = [o for o in failed if o in caught and o not in own_failure]
    waited = {o: sum(waits) for o, waits in _wait_periods(transitions).items()}

    def escalated_by_the_bound(order: str) -> bool:
        if BY_THE_BOUND not in str(finals[order].get("lastError") or ""):
            return False
        return bound is None or waited.get(order, 0.0) >= (bound - BOUND_SLACK).total_seconds()

    by_bound = [o for o in outage_only if not waiting_enabled or escalated_by_the_bound(o)]
    return OperatorActions(failed, outage_only, by_bound)


# The supervisor's writes that spend one of an order's MAX_FAILURES on an expired forward attempt, or on a
# compensation round that got stuck (released for a backoff, or failing the compensation when the rounds
# are used up; an undo failing for good writes CompensationFailed too)
COUNTED = ("RetryScheduled", "Escalated", "CompensationRetryScheduled", "CompensationFailed")
STARTS = ("Claimed", "CompensationClaimed")  # an attempt or a compensation round begins
CALLS = ("StepStarted", "UndoStarted")  # a forward step or an undo is sent to its agent
_VIA = re.compile(r" via ([\w-]+)")


def _counted_outside_outages(transitions: Iterable[Transition], windows: Mapping[str, Sequence[Window]]) -> set[str]:
    """Orders with a counted failed attempt that had nothing to do with an outage: its step's service
    had no injected outage while the attempt ran (from its ``StepStarted`` to the count) and no agent
    refused it on an open circuit. Such a failure (a crash, a lost or late reply, a store error) is the
    order's own; an order escalated with one is not failed by an outage alone, whatever it waited
    before. So is a counted forward attempt or compensation round that never reached an agent (no step or undo
    begun and no refusal on an open circuit since its claim: its orchestration never started, or started after
    its start grace): nothing was in flight for an outage to fail (``supervisor.outage``: the app counts such an
    attempt whatever the circuits say, and such a round unless its next undo's dependency was down since its
    claim)."""
    own: set[str] = set()
    running: dict[str, tuple[datetime, str]] = {}  # order -> (its step's start, the service)
    refused: set[str] = set()  # orders whose current attempt an agent refused on an open circuit
    unbegun: set[str] = set()  # orders whose current attempt or round was claimed and reached no agent yet
    for t in transitions:
        if t.event in CALLS:
            via = _VIA.search(t.detail)
            if via is not None and via.group(1) in AGENTS:
                running[t.order_id] = (t.at, AGENTS[via.group(1)].service)
            refused.discard(t.order_id)
            unbegun.discard(t.order_id)
        elif _failed_fast(t):
            refused.add(t.order_id)
            unbegun.discard(t.order_id)
        elif t.event in COUNTED and t.order_id in unbegun:
            # an attempt or a round that never reached an agent (its orchestration never started: the host stopped
            # between the claim and the start, or the start reached the backend's worker late) had nothing in flight
            # an outage could fail; the app counts it so
            own.add(t.order_id)
        elif t.event in COUNTED and t.order_id in running and t.order_id not in refused:
            began, service = running[t.order_id]
            if not any(start < t.at and end > began for start, end in windows.get(service, ())):
                own.add(t.order_id)
        if t.event in COUNTED or t.event in STARTS:  # that attempt (round) is over, or a new one begins
            running.pop(t.order_id, None)
            refused.discard(t.order_id)
            unbegun.discard(t.order_id)
        if t.event in STARTS:
            unbegun.add(t.order_id)
    return own


def _counted_after_own_fault(transitions: Iterable[Transition], own_faults: Iterable[tuple[str, datetime]]) -> set[str]:
    """Orders with a counted failed attempt during which (from its claim to the count) the runner
    injected a fault of the order's own: its reply lost or late, its agent crashing after the call.
    Such an attempt failed whatever a concurrent outage did (its call had taken effect on a healthy
    service), so an order escalated with it is not failed by an outage alone."""
    faults: dict[str, list[datetime]] = {}
    for order_id, at in own_faults:
        faults.setdefault(order_id, []).append(at)
    own: set[str] = set()
    claimed: dict[str, datetime] = {}
    for t in transitions:
        if t.event in STARTS:
            claimed[t.order_id] = t.at
        elif t.event in COUNTED and t.order_id in claimed:
            began = claimed.pop(t.order_id)
            if any(began <= at <= t.at for at in faults.get(t.order_id, ())):
                own.add(t.order_id)
    return own
