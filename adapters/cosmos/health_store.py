"""Dependency health documents (``domain/circuit.py``), one per remote service, in the ``state``
container under their own partition (``orderId`` = ``dependency:<name>``, no ``processState``: no
order query ever returns them).

Every write is conditional (``adapters/cosmos/documents.py``: a create that fails if the document
appeared, or a replace on ``_etag``); ``update_health`` re-reads and re-applies its change when it
loses a race (after a ``RacePause``: every agent instance writes the same document, and losers that all
came back at once would lose again together), so concurrent agents never lose each other's counts. A
healthy dependency is never written (a success on a closed circuit with no failures counted changes nothing)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple, Protocol

from adapters.cosmos.documents import ConditionalDocuments, RacePause, update_conditionally
from adapters.cosmos.errors import query_all
from domain.circuit import DependencyHealth, document_id, partition_key

if TYPE_CHECKING:
    from azure.cosmos import ContainerProxy

__all__ = ["RacePause"]  # the pause every writer of a health document takes after a lost race (update_health)


class HealthStore(Protocol):
    def get(self, dependency: str) -> DependencyHealth | None: ...

    def save(self, doc: DependencyHealth) -> DependencyHealth:
        """Create (``doc.version`` None; ``AlreadyExists`` if it exists) or replace on ``doc.version``
        (``EtagMismatch`` if it changed)."""
        ...

    def count_waiting(self, reason: str) -> int:
        """Orders not settled yet whose ``lastError`` is ``reason`` (``domain.circuit.waiting_reason``):
        one cross-partition count, only when an outage alert is sent."""
        ...


class CosmosHealthStore:
    def __init__(self, container: ContainerProxy) -> None:
        self._c = container
        self._docs = ConditionalDocuments(container, DependencyHealth)

    def get(self, dependency: str) -> DependencyHealth | None:
        return self._docs.get(document_id(dependency), partition_key(dependency))

    def save(self, doc: DependencyHealth) -> DependencyHealth:
        return self._docs.save(doc)

    def count_waiting(self, reason: str) -> int:
        query = (
            "SELECT VALUE COUNT(1) FROM c WHERE c.lastError = @reason "
            "AND c.processState IN ('Pending', 'Processing', 'Compensating')"
        )
        counts = query_all(
            self._c, query, parameters=[{"name": "@reason", "value": reason}], enable_cross_partition_query=True
        )
        return sum(int(v) for v in counts)  # one value: the SDK sums the partition key ranges' own counts


class Read(NamedTuple):
    """One read of a dependency's health: its place among this process's reads, and when it began.
    For a write: its place when its answer came back, and when it was sent (what it wrote may change
    as soon as it lands); ``sent``: its place when it was sent (it landed in between). For a read,
    ``sent`` is ``number``."""

    number: int
    at: datetime
    sent: int


class RecentHealth:
    """The health of each dependency as this process last read or wrote it, and when (a read as of
    when it began, a write as of when it was sent): an agent that finds it closed within ``ttl``
    decides without a read (``order_agents/circuit_gate.py``). Every write still reads first;
    ``ttl`` zero keeps nothing. Concurrent invocations' requests come back in any order: a view
    older than the one kept (``reading``: in the order reads began and writes landed) never
    replaces it (a closed view from before an opening would hide it for the whole window), and
    neither does a view older than a ``forget`` (a failed request may hide a write that landed). A
    write landed at some point between when it was sent and when its answer came back (``landed``):
    if something known or forgotten came in between, which is newer is unknown, and nothing is kept
    (the next call reads)."""

    def __init__(self, ttl: timedelta) -> None:
        self._ttl = ttl
        # per dependency: the last view and the read that found it, or (forgotten, or two views whose
        # order is unknown) None and the reading it was decided at: either way, a read numbered below
        # it, or a write sent before it, is not known to be newer
        self._known: dict[str, tuple[Read, DependencyHealth | None]] = {}
        self._floor = -1  # reads numbered at or below it began before ``forget_all``
        self._reads = itertools.count()
        self._lock = threading.Lock()

    def reading(self, now: datetime) -> Read:
        """A read of the store begins now (or a write is sent: then ``landed``)."""
        with self._lock:
            number = next(self._reads)
            return Read(number, now, number)

    def landed(self, sent: Read) -> Read:
        """A write sent at ``sent`` (a ``reading`` taken just before) has just been answered: its view
        is trusted from when it was sent, so a slow answer never stretches the window."""
        with self._lock:
            return Read(next(self._reads), sent.at, sent.number)

    def fresh(self, dependency: str, now: datetime) -> DependencyHealth | None:
        with self._lock:
            hit = self._known.get(dependency)
        if hit is None:
            return None
        read, health = hit
        return health if health is not None and read.at <= now < read.at + self._ttl else None

    def remember(self, health: DependencyHealth, read: Read) -> None:
        """``health`` as ``read`` found it (and maybe wrote it): kept unless a later read is known."""
        if self._ttl > timedelta(0):
            with self._lock:
                if read.sent <= self._floor:
                    return
                known = self._known.get(health.dependency)
                if known is None:
                    self._known[health.dependency] = (read, health)
                elif known[0].number <= read.number:
                    # a write sent before what is known was answered after it (or a forgetting): it
                    # landed somewhere in between, which is newer is unknown, so neither is kept
                    overlap = read.sent < known[0].sent
                    self._known[health.dependency] = (read, None if overlap else health)

    def forget(self, dependency: str, now: datetime) -> None:
        """Nothing is known of ``dependency`` now: a request about it failed, and may have changed it.
        Reads that began before stay out; the next read or write after it is remembered again."""
        with self._lock:
            number = next(self._reads)
            self._known[dependency] = (Read(number, now, number), None)

    def forget_all(self) -> None:
        """What a new process knows: nothing (the runner's host restart keeps its Python objects)."""
        with self._lock:
            self._known.clear()
            self._floor = next(self._reads)


def read_health(store: HealthStore, dependency: str, now: datetime) -> DependencyHealth:
    """The stored health, or a fresh closed one (nothing has failed yet)."""
    return store.get(dependency) or DependencyHealth.fresh(dependency, now)


# Lost races a health write survives (with ``RacePause`` between them: at most 1.6 s of pauses in all)
HEALTH_RACE_ATTEMPTS = 10


def update_health[T](
    store: HealthStore,
    dependency: str,
    change: Callable[[DependencyHealth], tuple[DependencyHealth, T]],
    now: datetime,
    attempts: int = HEALTH_RACE_ATTEMPTS,
    pause: Callable[[int], None] | None = None,
) -> tuple[DependencyHealth, T]:
    """Read (or start fresh), apply ``change`` (new health and a result for the caller), write
    conditionally when it changed anything; on a lost race, read and apply again, after ``pause`` (races
    lost so far) if given (``documents.RacePause``: every agent instance writes this one document)."""
    return update_conditionally(
        read=lambda: store.get(dependency),
        fresh=lambda: DependencyHealth.fresh(dependency, now),
        change=change,
        unchanged=lambda _current, base, updated: updated is base,
        save=store.save,
        what=f"health of dependency {dependency}",
        attempts=attempts,
        pause=pause,
    )
