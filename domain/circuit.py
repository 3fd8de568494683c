"""Dependency health shared across orders: one circuit breaker per remote service.

Pure state machine, no I/O and no clock (``adapters/cosmos/health_store.py`` stores it, one small
document per dependency in the ``state`` container, replaced on ``_etag``):

- **closed**: calls go through; consecutive transient failures (from any order, any agent instance)
  are counted, and a success resets the count. The circuit opens when the failures since the service
  last answered anything weigh ``threshold``: a failure it answered (or a connection it refused) one,
  a timeout half (``TIMEOUTS_PER_FAILURE``: slow is not down, but a hung service times out too); an
  answer that it is still working on an earlier call with the same key proves it up and clears that
  weight, though it is no result (``consecutive_failures`` goes on: the supervisor lets the order wait).
- **open**: no call is made (agents fail fast with a transient "dependency open" outcome) until
  ``probe_after`` = opened + cool-down. The cool-down doubles each time a probe fails, up to its cap. A
  ``probe_after`` further ahead of the reader's clock than that cap (the opener's clock ahead, or a hand edit)
  is re-dated a cool-down from the reader's now (``DependencyHealth.probe_due``).
- **half-open**: after the cool-down, up to ``probes`` calls are let through (each grant is written
  before the call). A probe that succeeds closes the circuit; one that fails opens it again. A grant
  whose probe never reported (its agent died) lapses after one cool-down, so the circuit cannot wedge.

A permanent error is an answer from a working service: it counts as a success here.

The weights follow Azure's circuit breaker guidance (a breaker may need more time-outs than failures
of an unavailable service to trip): before them, ``slow-remote-calls`` (no outage; a quarter of the
calls outlive ``REMOTE_CALL_TIMEOUT``, retries answered "still working") opened circuits and paged the
operator ten times per 100 orders (docs/supervisor.md, "What counts toward a circuit")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from domain.timefmt import LATEST

DOCUMENT_KIND = "DependencyHealth"
SCHEMA_VERSION = 1
# Timeouts that weigh as much as one failure the service answered (or a connection it refused)
TIMEOUTS_PER_FAILURE = 2


class CircuitState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


@dataclass(frozen=True)
class CircuitPolicy:
    threshold: int  # consecutive transient failures that open the circuit
    cooldown: timedelta  # first wait before a probe
    cooldown_max: timedelta  # cap of the doubling cool-down
    probes: int  # calls let through while half-open

    def cooldown_after(self, reopens: int) -> timedelta:
        """The cool-down after the ``reopens``-th failed probe (0: the first opening)."""
        seconds = self.cooldown.total_seconds() * (2 ** min(reopens, 30))
        return timedelta(seconds=min(seconds, self.cooldown_max.total_seconds()))

    def latest_believed(self, now: datetime) -> datetime:
        """The latest time a circuit's ``probe_after`` or grant can hold for a reader whose clock reads ``now``: the
        longest cool-down any agent writes, plus half the first cool-down for the agents' clocks apart (the half
        ``CIRCUIT_HEALTH_CACHE_SECONDS`` leaves them, settings.py). Later, the writer's clock ran further ahead than
        that (or the document was edited by hand): ``DependencyHealth.probe_due``. Without the margin, a clock a
        second behind the writer's re-dated (a write and a warning) every time written at the cap, read at once."""
        return now + self.cooldown_max + self.cooldown / 2


def partition_key(dependency: str) -> str:
    """The document's ``orderId`` (the container's partition key): never an order id."""
    return f"dependency:{dependency}"


def document_id(dependency: str) -> str:
    return f"health:{dependency}"


@dataclass(frozen=True, slots=True, kw_only=True)
class DependencyHealth:
    """One dependency's circuit (stored as one document in the ``state`` container)."""

    id: str
    order_id: str
    kind: str = DOCUMENT_KIND
    dependency: str
    state: CircuitState = CircuitState.CLOSED
    consecutive_failures: int = 0  # calls without a result in a row, of any kind: a result resets it
    # Those failures since the service last answered anything (a result, a refusal, "still working"), in
    # timeouts: TIMEOUTS_PER_FAILURE per failure it answered, one per timeout. The circuit opens at the threshold's.
    failure_weight: int = 0
    # when the current outage began (first opening): never before the openings and closing the document names
    # (``opening_after``), whatever the opener's clock
    opened_at: datetime | None = None
    probe_after: datetime | None = None  # open: no call before this
    reopens: int = 0  # failed probes in the current outage
    probes_granted: int = 0  # half-open: probes let through and not yet reported
    last_closed_at: datetime | None = None
    last_outage_started_at: datetime | None = None  # the last closed outage: [started, closed]
    # Operator alerts already sent, each as the start (``openedAt``) of the outage it was about:
    # written by the supervisor after the send (``outage_alerts_due``/``mark_alerted``), never by agents.
    outage_alerted_for: datetime | None = None  # DependencyOutage
    recovery_alerted_for: datetime | None = None  # DependencyRecovered
    # Reopenings within the settling period (``OUTAGE_SETTLE_SECONDS``) that continued the outage paged at
    # ``outage_alerted_for`` (its first opening, its alerts' identity): the last one taken in (None: none) and how
    # many were (its recovery covers them all). Supervisor only; a writer that drops them (an older version) leaves
    # the outage paged as it was, and its reopenings are alerted as before they existed (a pair each).
    outage_continued_to: datetime | None = None
    outage_reopenings: int = 0
    # The outage (its first opening) whose recovery a supervisor decided, its circuit found closed for the settling
    # period: written before that recovery is sent, so that no reopening is taken into an outage the operator may
    # already have been told is over (a recovery sent whose marker write failed). Supervisor only, as the others.
    outage_settled_for: datetime | None = None
    # The outage (its first opening) whose ``DependencyOutage`` a supervisor is sending: written before the send, so
    # that the recovery of an outage the operator may have been paged about is owed even if the marker write after
    # the send (``outage_alerted_for``) fails and, before the next run, the circuit closes and later outages come and
    # go (the document no longer names it): the next run sends its page again (the same MessageId), then its
    # recovery. Supervisor only, as the others; a writer that drops it leaves the outages alerted as before it.
    outage_paging_for: datetime | None = None
    schema_version: int = SCHEMA_VERSION
    updated_at: datetime
    # The stored version this was read at, opaque (None: never stored); the store writes only over
    # that version (adapters/cosmos: the item's ``_etag``). Never part of the document.
    version: str | None = None
    # The stored document's keys this code does not know (a newer version's fields, read after a rollback):
    # the store writes them back unchanged over the version read. Never compared, never mapped.
    unknown_keys: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def fresh(cls, dependency: str, now: datetime) -> DependencyHealth:
        return cls(
            id=document_id(dependency), order_id=partition_key(dependency), dependency=dependency, updated_at=now
        )

    def unavailable(self) -> bool:
        """Not closed: orders that failed on it wait instead of spending their retry budget."""
        return self.state is not CircuitState.CLOSED

    def probe_due(self, now: datetime, policy: CircuitPolicy) -> datetime | None:
        """``probe_after`` as a clock reading ``now`` takes it. No agent writes it further ahead of its clock than the
        longest cool-down (``policy.cooldown_max``): one further ahead of ``now`` than that and a margin for clocks
        apart (``CircuitPolicy.latest_believed``) was written by a clock running ahead of this one by more than that (or
        edited by hand), and the document holds no time a reader can trust more (every time in it is some agent's
        clock). It is then due a cool-down from ``now``, as if this agent had opened the circuit (``admit`` writes it
        so: a bound measured from ``now`` alone would move with every read), so a skewed clock holds no other agent
        back longer than the cap and the margin, not for its skew."""
        if self.probe_after is not None and self.probe_after > policy.latest_believed(now):
            return now + policy.cooldown_after(self.reopens)
        return self.probe_after

    def next_probe(self, now: datetime, policy: CircuitPolicy) -> datetime:
        """When a waiting order should come back: after the next probe could have answered."""
        due = self.probe_due(now, policy)
        if self.state is CircuitState.OPEN and due is not None and due > now:
            return due
        return now + policy.cooldown_after(self.reopens)

    def outage_overlaps(self, start: datetime) -> bool:
        """Whether the circuit was open at some moment since ``start`` (it may have closed since)."""
        if self.state is not CircuitState.CLOSED:
            return True
        return self.last_closed_at is not None and self.last_closed_at >= start


@dataclass(frozen=True)
class Transition:
    """A change of circuit state the caller reports as an event."""

    dependency: str
    before: CircuitState
    after: CircuitState
    at: datetime
    outage_seconds: float | None = None  # closed: how long the outage lasted


@dataclass(frozen=True)
class Admission:
    allowed: bool
    probe: bool  # the call is a half-open probe
    health: DependencyHealth  # to write when changed (a granted probe), else the one read
    changed: bool
    transition: Transition | None = None
    # a time too far ahead, re-dated by this clock: open, ``probe_after`` (``probe_due``); half-open, the grants' time
    redated: datetime | None = None


def admit(health: DependencyHealth, now: datetime, policy: CircuitPolicy) -> Admission:
    """May a call be made now? Closed: yes. Open before ``probe_after``: no (fail fast); one further ahead than
    any cool-down is re-dated a cool-down from ``now`` (``DependencyHealth.probe_due``), written with the refusal.
    Otherwise half-open: yes while fewer than ``probes`` grants are outstanding (each grant must be written
    before the call, so two agents racing for the last probe cannot both get it); the grants lapse a cool-down
    after the last (``updated_at``), one dated further ahead than any cool-down a cool-down after ``now``."""
    if health.state is CircuitState.CLOSED:
        return Admission(True, False, health, False)
    if health.state is CircuitState.OPEN:
        due = health.probe_due(now, policy)
        if due != health.probe_after:
            redated = replace(health, probe_after=due, updated_at=now)
            return Admission(False, False, redated, True, redated=health.probe_after)
        if due is not None and now < due:
            return Admission(False, False, health, False)
        moved = replace(health, state=CircuitState.HALF_OPEN, probes_granted=1, updated_at=now)
        return Admission(
            True, True, moved, True, Transition(health.dependency, CircuitState.OPEN, CircuitState.HALF_OPEN, now)
        )
    # half-open: a grant whose probe never reported lapses after one cool-down; one dated further ahead than any
    # cool-down (its granter's clock ahead of this one's by more, or an edit) is re-dated now, as ``probe_due`` does
    if health.updated_at > policy.latest_believed(now):
        redated = replace(health, updated_at=now)
        decided = admit(redated, now, policy)
        return decided if decided.changed else Admission(False, False, redated, True, redated=health.updated_at)
    lapsed = health.updated_at + policy.cooldown_after(health.reopens) <= now
    granted = 0 if lapsed else health.probes_granted
    if granted >= policy.probes:
        return Admission(False, False, health, False)
    moved = replace(health, probes_granted=granted + 1, updated_at=now)
    return Admission(True, True, moved, True)


def record_success(health: DependencyHealth, now: datetime) -> tuple[DependencyHealth, Transition | None]:
    """The service answered (a result or a permanent error). Returns the health to write (the same
    object when nothing changes: a healthy dependency costs no write) and the transition, if any."""
    if health.state is CircuitState.CLOSED:
        if health.consecutive_failures == 0 and health.failure_weight == 0:
            return health, None
        return replace(health, consecutive_failures=0, failure_weight=0, updated_at=now), None
    started = health.opened_at or now
    # Dated by the closer's clock, even before its opening (dated by another agent, its clock ahead, or after an
    # earlier one: ``opening_after``): the supervisor judges the settling period by it, and a closing moved forward
    # to an opening in its future held the recovery back by the opener's skew. Its length then nothing, not less.
    closed = replace(
        health,
        state=CircuitState.CLOSED,
        consecutive_failures=0,
        failure_weight=0,
        probes_granted=0,
        reopens=0,
        probe_after=None,
        opened_at=None,
        last_closed_at=now,
        last_outage_started_at=started,
        updated_at=now,
    )
    return closed, Transition(
        health.dependency, health.state, CircuitState.CLOSED, now, max((now - started).total_seconds(), 0.0)
    )


# An opening dated by a clock running behind is moved just after the times the document already holds
OPENING_STEP = timedelta(microseconds=1)


def opening_after(health: DependencyHealth, now: datetime) -> datetime:
    """When a circuit opening at ``now`` (the opener's clock) is dated (``openedAt``): ``now``, or just after the
    last closing or the latest opening the document already names, if one is as late (another agent's clock ahead
    of this one's by more than an outage's length). So each outage's opening is later than every earlier one,
    whatever the agents' clocks: the supervisor tells a new outage from one it paged by it, and identifies its
    alerts by it (MessageId). The error is the skew's, as when the outage is opened by one agent and closed by
    another (its closing is dated by the closer's clock: ``record_success``). Never past ``LATEST`` (a time edited by
    hand): the document could not be read back, and the circuit would no longer gate any call."""
    known = [
        t
        for t in (
            health.last_closed_at,
            health.last_outage_started_at,
            health.outage_alerted_for,
            health.outage_continued_to,
            health.recovery_alerted_for,
            health.outage_settled_for,
            health.outage_paging_for,
        )
        if t is not None
    ]
    return max([now, *(min(t, LATEST - OPENING_STEP) + OPENING_STEP for t in known)])


def record_in_progress(health: DependencyHealth, now: datetime) -> tuple[DependencyHealth, Transition | None]:
    """The service answered that it is still working on an earlier call with the same idempotency key: it
    is up, so the failures' weight toward opening is cleared, but the call has no result (the order's step
    failed transiently, and the supervisor reads ``consecutive_failures``). Half-open: a probe the service
    answered, as a success. Open: nothing new (a call from before the opening)."""
    if health.state is CircuitState.HALF_OPEN:
        return record_success(health, now)
    if health.state is CircuitState.OPEN:
        return health, None
    return replace(health, consecutive_failures=health.consecutive_failures + 1, failure_weight=0, updated_at=now), None


def record_failure(
    health: DependencyHealth, now: datetime, policy: CircuitPolicy, *, timed_out: bool = False
) -> tuple[DependencyHealth, Transition | None]:
    """A transient failure: an error the service answered, or it could not be reached, or (``timed_out``) no
    answer came in time. Closed: counted, weighed (a timeout ``1 / TIMEOUTS_PER_FAILURE`` of a failure), and
    at the threshold's weight the circuit opens. Half-open: the probe failed, open again with a doubled
    cool-down. Open: nothing new."""
    if health.state is CircuitState.CLOSED:
        failures = health.consecutive_failures + 1
        # never more than the failures': code older than the field (a rollback) resets only the failures
        weight = min(health.failure_weight, TIMEOUTS_PER_FAILURE * health.consecutive_failures)
        weight += 1 if timed_out else TIMEOUTS_PER_FAILURE
        if weight < TIMEOUTS_PER_FAILURE * policy.threshold:
            return replace(health, consecutive_failures=failures, failure_weight=weight, updated_at=now), None
        opened = replace(
            health,
            state=CircuitState.OPEN,
            consecutive_failures=failures,
            failure_weight=weight,
            opened_at=opening_after(health, now),
            probe_after=now + policy.cooldown_after(0),
            reopens=0,
            probes_granted=0,
            updated_at=now,
        )
        return opened, Transition(health.dependency, CircuitState.CLOSED, CircuitState.OPEN, now)
    if health.state is CircuitState.HALF_OPEN:
        reopens = health.reopens + 1
        reopened = replace(
            health,
            state=CircuitState.OPEN,
            probe_after=now + policy.cooldown_after(reopens),
            reopens=reopens,
            probes_granted=0,
            updated_at=now,
        )
        return reopened, Transition(health.dependency, CircuitState.HALF_OPEN, CircuitState.OPEN, now)
    return health, None  # open: a call that was already in flight; the outage is known


# How a wait's reason ends: the dependency unavailable (its circuit open, or failing with no success since), or
# still working on the order's own call (``domain.outage.still_working``, the circuit closed). Records keep the
# reasons written before the second existed, and older versions write only the first: both read as a wait.
CIRCUIT_OPEN = " (circuit open)"
STILL_WORKING_ON_IT = " (still working on the order's call)"


def waiting_reason(dependency: str, *, still_working: bool = False) -> str:
    """``lastError`` of an order waiting for ``dependency`` (the supervisor counts those waiting for an outage by
    it); ``still_working``: the service is still working on the order's call, its circuit closed."""
    return f"waiting for {dependency}{STILL_WORKING_ON_IT if still_working else CIRCUIT_OPEN}"


def is_waiting_reason(text: str | None) -> bool:
    """Whether ``text`` is a ``waiting_reason``: true only while the wait lasts."""
    return (
        text is not None
        and text.startswith("waiting for ")
        and (text.endswith(CIRCUIT_OPEN) or text.endswith(STILL_WORKING_ON_IT))
    )


OUTAGE_ALERT = "DependencyOutage"
RECOVERY_ALERT = "DependencyRecovered"
# Not an alert: a reopening within the settling period, taken into the outage already paged (its marker only)
CONTINUED = "OutageContinued"
# Not an alert: the recovery of the outage paged decided (its circuit closed for the settling period), recorded
# before it is sent: no reopening is taken into the outage from then on (its marker only)
SETTLED = "OutageSettled"
NOT_SENT = (CONTINUED, SETTLED)


@dataclass(frozen=True)
class OutageAlert:
    """One operator alert about one outage, identified by the outage's start (its first opening):
    the same outage always gives the same alert (and MessageId), whoever sends it. An outage paged may
    take in the reopenings that follow its closing within the settling period (``CONTINUED``, nothing
    sent): its recovery then covers them, from its first opening to its last closing."""

    kind: str  # OUTAGE_ALERT, RECOVERY_ALERT, or CONTINUED or SETTLED (markers only, nothing sent)
    dependency: str
    started: datetime
    closed: datetime | None = None  # RECOVERY_ALERT, SETTLED: when the circuit last closed (None: not known)
    # RECOVERY_ALERT, SETTLED: the last opening it covers; CONTINUED: the reopening taken in (None: ``started``)
    covers: datetime | None = None
    reopenings: int = 0  # RECOVERY_ALERT: the reopenings within the settling period it covers

    @property
    def last_opening(self) -> datetime:
        return self.started if self.covers is None else self.covers

    @property
    def outage_seconds(self) -> float | None:
        # to its last closing, dated by the closer's clock, or its last opening if that is later (dated by another
        # agent's clock, or after the closing before it: ``opening_after``): never below nothing
        return None if self.closed is None else (max(self.closed, self.last_opening) - self.started).total_seconds()


def _alerted(marker: datetime | None, started: datetime) -> bool:
    return marker is not None and marker >= started


def outage_alerts_due(
    health: DependencyHealth,
    closed_before: datetime | None = None,
    *,
    now: datetime | None = None,
    settle: timedelta = timedelta(0),
) -> list[OutageAlert]:
    """The alerts not sent yet, in the order to send them (each as if the ones before it were marked):
    the last closed outage's (its opening too, when it opened and closed between two supervisor runs),
    then the current outage's opening. An outage older than the last closed one is never alerted (it
    was, or its time has passed), nor is one that closed before ``closed_before`` without its opening
    ever sent (history, not news: the first run after a deployment, or after a long pause of the
    supervisor); an outage whose opening was sent always gets its recovery.

    ``settle`` (``OUTAGE_SETTLE_SECONDS``; 0: none): an outage paged gets its recovery only once its
    circuit has stayed closed that long (by ``now``, or by a reopening later than that); a reopening
    sooner continues it (``CONTINUED``: not paged again, its recovery covers the whole span). A recovery judged
    by ``now`` (the supervisor's clock, the closing by an agent's) is recorded as decided before it is sent
    (``SETTLED``): a reopening seen after it is a new outage, whatever the agents' clocks say.

    An outage recorded as being paged (``mark_paging``, before its ``DependencyOutage`` is sent) and not marked paged
    (its send or its marker write failed) is paged again first, then gets its recovery, even if it closed long ago
    or later outages came and went since."""
    due: list[OutageAlert] = []
    for _ in range(9):  # at most a late recovery, an opening, a reopening taken in, settled, its recovery, an opening
        alert = _next_due(health, closed_before, now, settle)
        if alert is None:
            break
        due.append(alert)
        health, _changed = mark_alerted(health, alert)
    return due


def _paged_through(health: DependencyHealth) -> datetime | None:
    """The last opening the outage paged covers: its first (``outage_alerted_for``), or a reopening taken in."""
    paged, continued = health.outage_alerted_for, health.outage_continued_to
    return continued if paged is not None and continued is not None and continued > paged else paged


def _next_due(
    health: DependencyHealth, closed_before: datetime | None, now: datetime | None, settle: timedelta
) -> OutageAlert | None:
    dependency = health.dependency
    paging = health.outage_paging_for
    if (
        paging is not None
        and not _alerted(_paged_through(health), paging)
        and not _alerted(health.recovery_alerted_for, paging)
    ):
        # its page may have gone out, its marker not written: sent again (the same MessageId), its recovery owed
        return OutageAlert(OUTAGE_ALERT, dependency, paging)
    since = health.outage_alerted_for  # the outage paged: its first opening
    paged = _paged_through(health)
    last = health.last_outage_started_at
    closed_at = health.last_closed_at
    current = health.opened_at if health.state is not CircuitState.CLOSED else None
    if since is not None and paged is not None and not _alerted(health.recovery_alerted_for, since):
        reopenings = health.outage_reopenings
        # its recovery decided (and maybe sent): nothing more is taken in, it goes out as it was decided
        taking_in = bool(settle) and health.outage_settled_for != since
        if last is not None and since <= last < paged:
            return None  # the reopening it took in last is still open
        if taking_in and last is not None and last > paged and last - paged < settle:
            # an outage began and closed unseen since the last opening paged, sooner than the settling period
            # after it (every closing in between was followed by a reopening sooner than that): one outage
            return OutageAlert(CONTINUED, dependency, since, covers=last)
        if last is not None and last > paged:
            # an outage the operator was paged about closed, then another opened and closed, all between
            # two runs (or longer after it than the settling period): its recovery still goes out (closed at a
            # moment no longer recorded: no length)
            return OutageAlert(RECOVERY_ALERT, dependency, since, None, paged, reopenings)
        if last == paged and closed_at is not None:
            reopened = current is not None and current > paged
            if taking_in and current is not None and reopened and current - closed_at < settle:
                return OutageAlert(CONTINUED, dependency, since, covers=current)
            if taking_in and not reopened:
                if now is None or now - closed_at < settle:
                    return None  # closed for less than the settling period: it may still reopen
                return OutageAlert(SETTLED, dependency, since, closed_at, paged, reopenings)
            return OutageAlert(RECOVERY_ALERT, dependency, since, closed_at, paged, reopenings)
    paged_last = last is not None and paged == last
    # a later opening paged: the last closed outage had its turn before it (its alerts sent, or history, never paged)
    paged_later = last is not None and paged is not None and paged > last
    long_closed = closed_before is not None and closed_at is not None and closed_at < closed_before
    if (
        last is not None
        and not paged_later
        and not _alerted(health.recovery_alerted_for, last)
        and (paged_last or not long_closed)
    ):
        if not paged_last:
            return OutageAlert(OUTAGE_ALERT, dependency, last)
        return OutageAlert(RECOVERY_ALERT, dependency, last, closed_at)
    if current is not None and not _alerted(paged, current):
        return OutageAlert(OUTAGE_ALERT, dependency, current)
    return None


def mark_paging(health: DependencyHealth, alert: OutageAlert) -> tuple[DependencyHealth, bool]:
    """The health with the outage of ``alert`` (a ``DependencyOutage`` about to be sent) recorded as being paged
    (False, unchanged: it already was, or a later one is). From then on its recovery is owed (``outage_alerts_due``)."""
    if _alerted(health.outage_paging_for, alert.started):
        return health, False
    return replace(health, outage_paging_for=alert.started), True


def mark_alerted(health: DependencyHealth, alert: OutageAlert) -> tuple[DependencyHealth, bool]:
    """The health with ``alert`` recorded as sent (False, unchanged: it already was, by anyone, or a
    ``CONTINUED`` no longer applies: the outage's recovery was recorded or decided meanwhile, or another outage is
    paged; or a ``SETTLED`` no longer does: the circuit moved since it was read, or the outage took a reopening
    in). Markers only move forward, but for one race: a recovery recorded over a reopening another
    supervisor took into the same outage meanwhile (their clocks judged the settling period differently)
    gives that reopening back, to be paged as a new outage (the recovery was sent). ``updatedAt`` is left
    alone (it times half-open probe grants)."""
    opening = alert.last_opening
    paged = _paged_through(health)
    if alert.kind == CONTINUED:
        if (
            health.outage_alerted_for != alert.started
            or _alerted(health.recovery_alerted_for, alert.started)
            or health.outage_settled_for == alert.started
            or _alerted(paged, opening)
        ):
            return health, False
        return replace(health, outage_continued_to=opening, outage_reopenings=health.outage_reopenings + 1), True
    if alert.kind == SETTLED:
        if (
            health.outage_alerted_for != alert.started
            or _alerted(health.recovery_alerted_for, alert.started)
            or health.outage_settled_for == alert.started
            or paged != opening
            or health.state is not CircuitState.CLOSED
            or health.last_closed_at != alert.closed
        ):
            return health, False
        return replace(health, outage_settled_for=alert.started), True
    if alert.kind == OUTAGE_ALERT:
        if _alerted(paged, opening):
            return health, False
        return replace(health, outage_alerted_for=opening, outage_continued_to=None, outage_reopenings=0), True
    if _alerted(health.recovery_alerted_for, opening):
        return health, False
    update: dict[str, Any] = {"recovery_alerted_for": opening}
    if not _alerted(paged, opening):
        # a recovery is never followed by its opening
        update |= {"outage_alerted_for": opening, "outage_continued_to": None, "outage_reopenings": 0}
    elif paged is not None and paged > opening and health.outage_alerted_for == alert.started:
        # a reopening taken into this outage after its recovery was decided: paged again as a new outage
        update["outage_continued_to"] = opening if opening > alert.started else None
    return replace(health, **update), True
