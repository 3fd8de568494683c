"""Independent evidence for the invariants, and the faults the profile injects at the edges.

``AuditedStateStore`` wraps the production Cosmos state store: it injects throttling and outages,
counts operations, and audits every successful write against the document as it was just before.
That version is known from Cosmos' own answers, not from the app: a conditional replace succeeds
only against the ``_etag`` it names, and the audit remembers the ``lockedBy`` of every version
(by ``_etag``) Cosmos has returned. A write by an orchestration instance that did not hold
``lockedBy`` at that moment is a stale write. A record is created ``Pending`` or already claimed for
attempt 1 (submission's fast path: the create is the claim, as no one can own a record that does not
exist); the audit logs the claimed create as the two moves it makes, and counts any other created
record as a stale write."""

from __future__ import annotations

import json
import logging
import random
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from sys import intern
from typing import Any, NamedTuple, overload

from adapters.clock import Clock
from adapters.cosmos.errors import StoreOutcomeUnknown, StoreUnavailable, store_refused
from adapters.cosmos.order_store import CreateOutcome, OrderStore
from adapters.cosmos.state_store import Page, SeekKey, StateStore, StrayPage
from adapters.servicebus.sender import MessageSender, OutgoingMessage, SendError
from contracts.names import AGENT_REPLIES_QUEUE
from domain.records import HistoryEntry, StateRecord
from domain.states import ProcessState
from domain.transitions import NO_GRACE
from domain.workflow import step as workflow_step
from localrun.profile import Profile
from localrun.stale_reads import LEFT_OUT, Key, Partition, StaleReads
from supervisor.owed import owes_notifications


@dataclass(frozen=True, slots=True)
class Transition:
    at: datetime
    order_id: str
    before: ProcessState | None
    after: ProcessState
    event: str
    by: str
    expired_at: datetime | None  # the completeBy the write replaced (for expiry-to-retry latency)
    detail: str = ""  # the write's history detail (e.g. why a step failed transiently)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_NONE = -(2**63)  # an ``expired_at`` of None in the packed column
_STATES: tuple[ProcessState, ...] = tuple(ProcessState)
_STATE_CODE = {state: code for code, state in enumerate(_STATES)}


def _micros(at: datetime) -> int | None:
    """Microseconds since the epoch of an aware UTC datetime (exact), or None for any other one."""
    if at.tzinfo is not UTC:
        return None
    return (at - _EPOCH) // _MICROSECOND


class TransitionLog(Sequence[Transition]):
    """The audited transitions, packed: one row per transition in columns (times as microseconds in
    arrays of 64-bit integers, states as one byte each, strings interned so an order's id, event
    names and writers are held once), about 50 bytes a transition instead of a ``Transition`` with
    its own datetimes and strings (~350 bytes). Reading gives back equal ``Transition`` objects,
    built on demand; a transition with a time that is not UTC is kept as it came."""

    __slots__ = ("_at", "_by", "_detail", "_event", "_expired", "_kept", "_order", "_states")

    def __init__(self, transitions: Iterable[Transition] = ()) -> None:
        self._at = array("q")
        self._expired = array("q")
        self._states = bytearray()  # two bytes a transition: before (255: None), after
        self._order: list[str] = []
        self._event: list[str] = []
        self._by: list[str] = []
        self._detail: list[str] = []
        self._kept: dict[int, Transition] = {}  # the rare transition that cannot be packed exactly
        for transition in transitions:
            self.append(transition)

    def append(self, t: Transition) -> None:
        at = _micros(t.at)
        expired = _NONE if t.expired_at is None else _micros(t.expired_at)
        if at is None or expired is None:
            self._kept[len(self._at)] = t
            at, expired = 0, _NONE
        self._at.append(at)
        self._expired.append(expired)
        self._states.append(255 if t.before is None else _STATE_CODE[t.before])
        self._states.append(_STATE_CODE[t.after])
        self._order.append(intern(t.order_id))
        self._event.append(intern(t.event))
        self._by.append(intern(t.by))
        self._detail.append(intern(t.detail))

    def __len__(self) -> int:
        return len(self._at)

    def _row(self, i: int) -> Transition:
        kept = self._kept.get(i)
        if kept is not None:
            return kept
        before = self._states[2 * i]
        expired = self._expired[i]
        return Transition(
            at=_EPOCH + self._at[i] * _MICROSECOND,
            order_id=self._order[i],
            before=None if before == 255 else _STATES[before],
            after=_STATES[self._states[2 * i + 1]],
            event=self._event[i],
            by=self._by[i],
            expired_at=None if expired == _NONE else _EPOCH + expired * _MICROSECOND,
            detail=self._detail[i],
        )

    @overload
    def __getitem__(self, index: int) -> Transition: ...
    @overload
    def __getitem__(self, index: slice) -> list[Transition]: ...
    def __getitem__(self, index: int | slice) -> Transition | list[Transition]:
        if isinstance(index, slice):
            return [self._row(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("transition index out of range")
        return self._row(index)

    def __iter__(self) -> Iterator[Transition]:
        return (self._row(i) for i in range(len(self)))


@dataclass(frozen=True, slots=True)
class RemoteFailure:
    """A remote call that raised (``transient`` as the service said) or outlived the step deadline
    (transient), at the moment it was made, in true simulated time."""

    at: datetime
    order_id: str
    service: str
    transient: bool


@dataclass
class Audit:
    transitions: TransitionLog = field(default_factory=TransitionLog)
    stale_writes: list[str] = field(default_factory=list)
    ops: Counter[str] = field(default_factory=Counter)
    injected: Counter[str] = field(default_factory=Counter)
    # the remote calls that failed, from the runner's side (evidence for operator_actions_needed)
    remote_failures: list[RemoteFailure] = field(default_factory=list)
    # (order id, when): faults injected on a call that took effect on a healthy service (a reply lost
    # or late, the agent crashing after the call), the order's own trouble, not an outage's
    own_faults: list[tuple[str, datetime]] = field(default_factory=list)
    # orders whose failure record, as last written, still owes its operator alert and its submitter's
    # status (``completeBy`` set: supervisor/owed.py); the supervisor's owed sweep delivers them and clears it
    owing: set[str] = field(default_factory=set)


class CountedStore:
    """Any other Cosmos store the app uses (the deferral log, dependency health): each call counted as
    the request it makes (``reads``, ``writes``, ``queries``: method names; any other method counts as
    ``cosmos_other``), faults injected. A write's response may be lost after it committed."""

    def __init__(
        self,
        inner: Any,
        faults: CosmosFaults,
        audit: Audit,
        *,
        reads: frozenset[str] = frozenset(),
        writes: frozenset[str] = frozenset(),
        queries: frozenset[str] = frozenset(),
        stale: StaleReads | None = None,
        document: Callable[[str], tuple[Key, Partition]] | None = None,
        subject: Callable[[Any], str] | None = None,
    ) -> None:
        self._inner = inner
        self._faults = faults
        self._audit = audit
        self._writes = writes
        self._reads = reads
        # profile cosmos.stale_read_rate: ``document`` names the document a read's argument (or a saved
        # document's ``subject``) is, for the stale-read model (localrun/stale_reads.py)
        self._stale = stale if document is not None and subject is not None else None
        self._document = document
        self._subject = subject
        self._counters = (
            dict.fromkeys(reads, "cosmos_reads")
            | dict.fromkeys(writes, "cosmos_writes")
            | dict.fromkeys(queries, "cosmos_queries")
        )

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if not callable(attribute):
            return attribute

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._audit.ops[self._counters.get(name, "cosmos_other")] += 1
            self._faults.maybe_fail(name)
            result = attribute(*args, **kwargs)
            if self._stale is not None:
                return self._served(name, args, result)
            if name in self._writes:
                self._faults.maybe_lose_response(name)
            return result

        return counted

    def _served(self, name: str, args: tuple[Any, ...], result: Any) -> Any:
        """A read as the stale-read model serves it to the calling invocation; a write noted as written (and heard,
        unless its response is lost)."""
        assert self._stale is not None and self._document is not None and self._subject is not None
        if name in self._writes:
            key, partition = self._document(self._subject(result))
            self._stale.wrote(key, partition, str(getattr(result, "version", "") or ""), result)
            self._faults.maybe_lose_response(name)
            self._stale.heard(key, partition, result)
        elif name in self._reads and len(args) == 1 and isinstance(args[0], str):
            key, partition = self._document(args[0])
            tag = None if result is None else str(getattr(result, "version", "") or "")
            return self._stale.read(key, partition, tag, result)
        return result


class EventRecorder(logging.Handler):
    """Collects the app's structured events (``extra={"event": ...}``) for the report's statistics.

    Kept in columns: per event, the code of its name and the code of its field names (two integers
    in an array), and its values, in order, in one flat list (strings interned: an order's id is held
    once): about 20 bytes an event instead of a dict with its own strings (~400). ``events`` gives
    them back as the dicts they were (``{"event": name, **fields}``)."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self._names: list[str] = []  # code -> event name
        self._name_codes: dict[str, int] = {}
        self._shapes: list[tuple[str, ...]] = []  # code -> the field names an event has, in order
        self._shape_codes: dict[tuple[str, ...], int] = {}
        self._codes = array("I")  # two per event: its name's code, its shape's code
        self._values: list[Any] = []  # every event's field values, one event after the other

    def emit(self, record: logging.LogRecord) -> None:
        name = getattr(record, "event", None)
        if not isinstance(name, str):
            return
        found = [(k, v) for k, v in vars(record).items() if k in _EVENT_FIELDS]
        shape = tuple(k for k, _ in found)
        # (logging.Handler.handle holds the handler's lock around emit)
        name_code = self._name_codes.get(name)
        if name_code is None:
            name_code = self._name_codes[name] = len(self._names)
            self._names.append(name)
        shape_code = self._shape_codes.get(shape)
        if shape_code is None:
            shape_code = self._shape_codes[shape] = len(self._shapes)
            self._shapes.append(shape)
        self._codes.append(name_code)
        self._codes.append(shape_code)
        self._values.extend(intern(v) if type(v) is str else v for _, v in found)

    def _rows(self) -> Iterator[tuple[str, tuple[str, ...], list[Any]]]:
        """(name, field names, values) of every event, in order."""
        codes, values, at = self._codes, self._values, 0
        for i in range(0, len(codes), 2):
            shape = self._shapes[codes[i + 1]]
            yield self._names[codes[i]], shape, values[at : at + len(shape)]
            at += len(shape)

    def __len__(self) -> int:
        return len(self._codes) // 2

    @property
    def events(self) -> list[dict[str, Any]]:
        """Every event recorded, in order, as ``{"event": name, **its fields}``."""
        return [{"event": name, **dict(zip(shape, values, strict=True))} for name, shape, values in self._rows()]

    def named(self, *names: str) -> Iterator[dict[str, Any]]:
        """The events of these names, in order, as ``events`` gives them (only those are built)."""
        wanted = set(names)
        for name, shape, values in self._rows():
            if name in wanted:
                yield {"event": name, **dict(zip(shape, values, strict=True))}

    def count(self, name: str, **match: Any) -> int:
        if name not in self._name_codes:
            return 0
        return sum(
            1
            for event, shape, values in self._rows()
            if event == name and all((values[shape.index(k)] if k in shape else None) == v for k, v in match.items())
        )


# ("attempt": a status given up names the MessageId it was sent under, ``report._given_up_to_failed_sends``)
_EVENT_FIELDS = {
    "orderId",
    "via",
    "reason",
    "instanceId",
    "dependency",
    "outageSeconds",
    "status",
    "alertKind",
    "attempt",
}


def _windows(origin: datetime | None, spans: tuple[tuple[float, float], ...]) -> list[tuple[datetime, datetime]]:
    """The profile's windows (seconds from the run's start) as times of the run's clock."""
    if origin is None:
        return []
    return [(origin + timedelta(seconds=s), origin + timedelta(seconds=s + d)) for s, d in spans]


class CosmosFaults:
    def __init__(self, profile: Profile, rng: random.Random, audit: Audit, clock: Clock | None = None) -> None:
        self._throttle = profile.cosmos_throttle_rate
        self._unavailable = profile.cosmos_unavailable_rate
        self._lost_response = profile.cosmos_lost_response_rate
        self._rng = rng
        self._audit = audit
        # profile cosmos.outages: every request inside a window fails (seconds from the run's start)
        self._clock = clock
        origin = clock.now() if clock is not None else None
        self._outages = _windows(origin, profile.cosmos_outages)
        self._refusals = _windows(origin, profile.cosmos_refusals)  # the app's identity refused (403/5301)

    # Set by the simulation for profile cosmos.latency_ms (localrun.hostile.CosmosLatency): every
    # operation takes that long, so concurrent handlers interleave between their Cosmos calls.
    latency: Callable[[], None] | None = None

    def maybe_fail(self, operation: str) -> None:
        if self.latency is not None:
            self.latency()
        roll = self._rng.random()
        if (self._outages or self._refusals) and self._clock is not None:
            now = self._clock.now()
            if any(start <= now < end for start, end in self._outages):
                self._audit.injected["cosmos_outage"] += 1
                raise StoreUnavailable(f"Cosmos DB 503 on {operation} (outage)")
            if any(start <= now < end for start, end in self._refusals):  # as mapped_errors raises Azure's 403/5301
                self._audit.injected["cosmos_refused"] += 1
                raise store_refused(403, 5301, f"{operation} refused (no data role)")
        if roll < self._throttle:
            self._audit.injected["cosmos_throttled"] += 1
            raise StoreUnavailable(f"Cosmos DB 429 on {operation} (throttled past the SDK's retries)")
        if roll < self._throttle + self._unavailable:
            self._audit.injected["cosmos_unavailable"] += 1
            raise StoreUnavailable(f"Cosmos DB 503 on {operation}")

    def lose_response(self) -> bool:
        """Whether the response of a write that has just committed is lost (drawn only when the
        profile asks for it, so other profiles keep their random streams)."""
        if self._lost_response and self._rng.random() < self._lost_response:
            self._audit.injected["cosmos_responses_lost"] += 1
            return True
        return False

    def maybe_lose_response(self, operation: str) -> None:
        """After a write committed: the caller may get an error instead of the answer (a timeout, a
        connection reset), as the SDK reports it, and does not learn the write succeeded."""
        if self.lose_response():
            raise StoreOutcomeUnknown(f"Cosmos DB: no response to {operation} (the write committed)")


class _Version(NamedTuple):
    """What the audit needs of a version Cosmos returned (not the record: a record carries its
    whole history, and an order has a dozen versions)."""

    locked_by: str | None
    process_state: ProcessState
    complete_by: datetime | None


def _is_instance(writer: str) -> bool:
    return ":" in writer  # orchestration instance ids are "<orderId>:<n>"


def _state_document(order_id: str) -> tuple[Key, Partition]:
    return ("state", order_id), ("state", order_id)


def _same_match(previous: StateRecord, current: StateRecord) -> bool:
    """The version before matches every state query the latest matched (they filter on these)."""
    return (previous.process_state, previous.locked_by, previous.complete_by) == (
        current.process_state,
        current.locked_by,
        current.complete_by,
    )


class AuditedStateStore:
    def __init__(
        self, inner: StateStore, clock: Clock, faults: CosmosFaults, audit: Audit, stale: StaleReads | None = None
    ) -> None:
        self._inner = inner
        self._stale = stale  # profile cosmos.stale_read_rate (localrun/stale_reads.py)
        self._clock = clock
        self._faults = faults
        self._audit = audit
        # The versions Cosmos returned, by _etag, until a write replaces them: a conditional replace
        # succeeds only against the stored _etag, and _etags never repeat, so a replaced version
        # cannot be replaced again. What stays is about one version per order, as three facts.
        self._versions: dict[str, _Version] = {}
        # Orders whose last write lost its response: the app's process still knows only the version
        # before it (``recent``), until it reads or writes the record again.
        self._unheard: dict[str, StateRecord | None] = {}

    def _seen(self, record: StateRecord | None) -> StateRecord | None:
        if record is not None and record.version is not None:
            self._versions[record.version] = _Version(record.locked_by, record.process_state, record.complete_by)
        return record

    def get(self, order_id: str) -> StateRecord | None:
        self._audit.ops["cosmos_reads"] += 1
        self._faults.maybe_fail("read")
        found = self._seen(self._inner.get(order_id))
        self._unheard.pop(order_id, None)
        if self._stale is not None:
            key, partition = _state_document(order_id)
            shown: StateRecord | None = self._stale.read(key, partition, found.version if found else None, found)
            if shown is not found:
                self._unheard[order_id] = shown  # what this process now knows of the record
            return shown
        return found

    def _wrote(self, written: StateRecord) -> None:
        if self._stale is not None:
            key, partition = _state_document(written.order_id)
            self._stale.wrote(key, partition, written.version or "", written)

    def _heard(self, written: StateRecord) -> None:
        if self._stale is not None:
            self._stale.heard(*_state_document(written.order_id), written)

    def _served(self, records: list[StateRecord]) -> list[StateRecord]:
        """A query's records as the stale-read model serves them (some left out, some a version older)."""
        if self._stale is None:
            return records
        served = []
        for record in records:
            key, partition = _state_document(record.order_id)
            shown = self._stale.queried(key, partition, record.version, record, _same_match)
            if shown is not LEFT_OUT:
                served.append(shown)
        return served

    def recent(self, order_id: str) -> StateRecord | None:
        if self._stale is not None:  # each invocation its own process (localrun/stale_reads.py)
            known: StateRecord | None = self._stale.known(_state_document(order_id)[0])
            return known
        if order_id in self._unheard:
            return self._unheard[order_id]
        return self._inner.recent(order_id)  # the app's own memory: no Cosmos operation

    def _maybe_lose_response(self, order_id: str, known: StateRecord | None, operation: str) -> None:
        if self._faults.lose_response():
            self._unheard[order_id] = known
            raise StoreOutcomeUnknown(f"Cosmos DB: no response to {operation} of {order_id} (the write committed)")
        self._unheard.pop(order_id, None)

    def create(self, record: StateRecord) -> StateRecord:
        self._audit.ops["cosmos_writes"] += 1
        self._faults.maybe_fail("create")
        known = self.recent(record.order_id)
        written = self._inner.create(record)
        self._seen(written)
        self._wrote(written)
        self._record_created(written)
        self._note_owed(written)
        self._maybe_lose_response(record.order_id, known, "create")
        self._heard(written)
        return written

    def replace(self, record: StateRecord) -> StateRecord:
        self._audit.ops["cosmos_writes"] += 1
        self._faults.maybe_fail("replace")
        known = self.recent(record.order_id)
        written = self._inner.replace(record)  # succeeded: the stored version was record.version's
        before = self._versions.pop(record.version or "", None)
        self._seen(written)
        self._wrote(written)
        writer = written.history[-1].by if written.history else ""
        if before is None:
            self._audit.stale_writes.append(f"{written.order_id}: write over a version Cosmos never returned")
        elif _is_instance(writer) and before.locked_by != writer:
            self._audit.stale_writes.append(f"{written.order_id}: {writer} wrote while lockedBy={before.locked_by}")
        self._record(before, written)
        self._note_owed(written)
        self._maybe_lose_response(record.order_id, known, "replace")
        self._heard(written)
        return written

    def _note_owed(self, written: StateRecord) -> None:
        if owes_notifications(written):
            self._audit.owing.add(written.order_id)
        else:
            self._audit.owing.discard(written.order_id)

    def claimable(self, now: datetime, limit: int) -> list[StateRecord]:
        self._audit.ops["cosmos_queries"] += 1
        self._faults.maybe_fail("query")
        return self._served([r for r in self._inner.claimable(now, limit) if self._seen(r)])

    def expired_page(
        self,
        state: ProcessState,
        now: datetime,
        not_before: datetime | None,
        page_size: int,
        after: SeekKey | None,
        grace: timedelta = NO_GRACE,
    ) -> Page:
        self._audit.ops["cosmos_queries"] += 1
        self._faults.maybe_fail("query")
        return self._page(self._inner.expired_page(state, now, not_before, page_size, after, grace))

    def undated_page(self, state: ProcessState, page_size: int) -> Page:
        self._audit.ops["cosmos_queries"] += 1
        self._faults.maybe_fail("query")
        return self._page(self._inner.undated_page(state, page_size))

    def stray_page(self, beyond: datetime, limit: int, after: str | None = None) -> StrayPage:
        self._audit.ops["cosmos_queries"] += 1
        self._faults.maybe_fail("query")
        return self._inner.stray_page(beyond, limit, after)

    def _page(self, page: Page) -> Page:
        for record in page.records:
            self._seen(record)
        if self._stale is not None:
            return Page(self._served(page.records), page.after, page.request_charge, page.unmapped)
        return page

    def count(self, state: ProcessState) -> int:
        self._audit.ops["cosmos_queries"] += 1
        self._faults.maybe_fail("query")
        return self._inner.count(state)

    def __getattr__(self, name: str) -> Any:
        # Anything the app's store grows later (e.g. deferral documents) passes through, counted.
        attribute = getattr(self._inner, name)
        if callable(attribute):

            def counted(*args: Any, **kwargs: Any) -> Any:
                self._audit.ops["cosmos_other"] += 1
                self._faults.maybe_fail(name)
                return attribute(*args, **kwargs)

            return counted
        return attribute

    def _record_created(self, created: StateRecord) -> None:
        """A created record: ``Pending`` (one move), or claimed for attempt 1 in the same write, logged
        as its two moves (``Received`` to Pending, then ``Claimed`` to Processing), as when they were
        two writes. Anything else no writer may create: a stale write."""
        if created.process_state is ProcessState.PENDING and created.attempt == 0 and created.locked_by is None:
            self._record(None, created)
            return
        events = [h.event for h in created.history]
        owner = f"{created.order_id}:1"
        if (
            created.process_state is ProcessState.PROCESSING
            and (created.attempt, created.locked_by, created.failure_count) == (1, owner, 0)
            and not created.steps
            and events == ["Received", "Claimed"]
        ):
            received, claimed = created.history
            self._append(created.order_id, None, ProcessState.PENDING, received, None)
            self._append(created.order_id, ProcessState.PENDING, created.process_state, claimed, None)
            return
        self._audit.stale_writes.append(
            f"{created.order_id}: created {created.process_state.value} attempt {created.attempt} "
            f"lockedBy={created.locked_by} history={events}: neither new nor claimed for attempt 1"
        )
        self._record(None, created)

    def _record(self, before: _Version | None, after: StateRecord) -> None:
        last = after.history[-1] if after.history else None
        before_state = before.process_state if before else None
        self._append(after.order_id, before_state, after.process_state, last, before.complete_by if before else None)

    def _append(
        self,
        order_id: str,
        before: ProcessState | None,
        after: ProcessState,
        entry: HistoryEntry | None,
        expired_at: datetime | None,
    ) -> None:
        self._audit.transitions.append(
            Transition(
                at=self._clock.now(),
                order_id=order_id,
                before=before,
                after=after,
                event=entry.event if entry else "Written",
                by=entry.by if entry else "",
                expired_at=expired_at,
                detail=entry.detail if entry else "",
            )
        )


class AuditedOrderStore:
    def __init__(self, inner: OrderStore, faults: CosmosFaults, audit: Audit, stale: StaleReads | None = None) -> None:
        self._inner = inner
        self._faults = faults
        self._audit = audit
        self._stale = stale  # profile cosmos.stale_read_rate (localrun/stale_reads.py); orders are never replaced

    def get(self, order_id: str) -> dict[str, Any] | None:
        self._audit.ops["cosmos_reads"] += 1
        self._faults.maybe_fail("read order")
        found = self._inner.get(order_id)
        if self._stale is not None:
            found = self._stale.read(("order", order_id), ("orders", order_id), None if found is None else "", found)
        return found

    def create_or_verify(self, order: dict[str, Any]) -> CreateOutcome:
        self._audit.ops["cosmos_writes"] += 1
        self._faults.maybe_fail("create order")
        outcome = self._inner.create_or_verify(order)
        key, partition = ("order", str(order["id"])), ("orders", str(order["id"]))
        if self._stale is not None and outcome is CreateOutcome.CREATED:
            self._stale.wrote(key, partition, "", dict(order))
        self._faults.maybe_lose_response("create order")
        if self._stale is not None and outcome is CreateOutcome.CREATED:
            self._stale.heard(key, partition, dict(order))
        return outcome


class FaultySender:
    """The app's ``MessageSender`` over the broker, with the profile's send failures (in the broker)
    and the agents' reply faults: a reply may be lost, sent late (after its step's deadline) or
    sent twice (the copy under another MessageId, so duplicate detection does not collapse it)."""

    def __init__(
        self, inner: MessageSender, profile: Profile, rng: random.Random, clock: Clock, audit: Audit, seed: int = 0
    ) -> None:
        self._inner = inner
        self._profile = profile
        self._rng = rng
        self._clock = clock
        self._audit = audit
        self._seed = seed
        self._refusals: random.Random | None = None  # agents.<agent>.reply_send_failure_rate's own stream

    def send(self, queue: str, message: OutgoingMessage) -> None:
        self._audit.ops["servicebus_sends"] += 1
        if queue != AGENT_REPLIES_QUEUE:
            self._inner.send(queue, message)
            return
        reply = json.loads(message.body)
        faults = self._profile.agent(workflow_step(reply["step"]).agent)
        if faults.reply_send_failure_rate:  # its own generator: a profile without it draws as before
            if self._refusals is None:
                self._refusals = random.Random(f"{self._seed}:reply-send-failures")
            if self._refusals.random() < faults.reply_send_failure_rate:
                self._audit.injected["reply_sends_failed"] += 1
                self._audit.own_faults.append((reply["orderId"], self._clock.now()))
                raise SendError(f"send to {queue!r} failed: reply of {reply['requestId']!r} (injected)")
        roll = self._rng.random()
        if roll < faults.lost_reply_rate:
            self._audit.injected["replies_lost"] += 1
            self._audit.own_faults.append((reply["orderId"], self._clock.now()))
            return
        roll -= faults.lost_reply_rate
        if roll < faults.late_reply_rate:
            self._audit.injected["replies_late"] += 1
            self._audit.own_faults.append((reply["orderId"], self._clock.now()))
            from datetime import timedelta

            late = self._clock.now() + timedelta(seconds=90)  # past any step deadline it belonged to
            self._inner.send(queue, _replace(message, scheduled_enqueue_time=late))
            return
        roll -= faults.late_reply_rate
        self._inner.send(queue, message)
        if roll < faults.duplicate_reply_rate:
            self._audit.injected["replies_duplicated"] += 1
            self._inner.send(queue, _replace(message, message_id=f"{message.message_id}:copy"))


def _replace(message: OutgoingMessage, **changes: Any) -> OutgoingMessage:
    from dataclasses import replace

    return replace(message, **changes)


class CrashingService:
    """An agent's remote service whose agent process may die right after the call took effect, so
    no reply is sent and the request is redelivered (or the activity fails): the idempotency key
    must make the retry harmless."""

    def __init__(self, inner: Any, rate: float, rng: random.Random, audit: Audit, clock: Clock) -> None:
        self._inner = inner
        self._rate = rate
        self._rng = rng
        self._audit = audit
        self._clock = clock

    def call(self, request: Any) -> dict[str, Any]:
        result: dict[str, Any] = self._inner.call(request)
        if self._rng.random() < self._rate:
            self._audit.injected["agent_crashes"] += 1
            self._audit.own_faults.append((request.order_id, self._clock.now()))
            raise SimulatedCrash(f"agent for {request.service} crashed after {request.action} of {request.order_id}")
        return result


class SimulatedCrash(RuntimeError):
    """The agent's process died (the runner treats it as the invocation failing)."""


__all__ = [
    "Audit",
    "AuditedOrderStore",
    "AuditedStateStore",
    "CosmosFaults",
    "CrashingService",
    "FaultySender",
    "SendError",
    "SimulatedCrash",
]
