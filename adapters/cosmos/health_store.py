"""Dependency health documents (``domain/circuit.py``), one per remote service, in the ``state``
container under their own partition (``orderId`` = ``dependency:<name>``, no ``processState``: no
order query ever returns them).

Every write is conditional (``adapters/cosmos/documents.py``: a create that fails if the document
appeared, or a replace on ``_etag``); ``update_health`` re-reads and re-applies its change when it
loses a race, so concurrent agents never lose each other's counts. A healthy dependency is never
written (a success on a closed circuit with no failures counted changes nothing)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from adapters.cosmos.documents import ConditionalDocuments, update_conditionally
from adapters.cosmos.errors import mapped_errors
from domain.circuit import DependencyHealth, document_id, partition_key

if TYPE_CHECKING:
    from azure.cosmos import ContainerProxy


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
        with mapped_errors():
            counts: list[Any] = list(
                self._c.query_items(
                    query, parameters=[{"name": "@reason", "value": reason}], enable_cross_partition_query=True
                )
            )
        return sum(int(v) for v in counts)  # one partial count per partition range


class RecentHealth:
    """The health of each dependency as this process last read or wrote it, and when: an agent that
    finds it closed (or open, before its probe) within ``ttl`` decides without a read
    (``order_agents/circuit_gate.py``). Every write still reads first; ``ttl`` zero keeps nothing."""

    def __init__(self, ttl: timedelta) -> None:
        self._ttl = ttl
        self._known: dict[str, tuple[datetime, DependencyHealth]] = {}
        self._lock = threading.Lock()

    def fresh(self, dependency: str, now: datetime) -> DependencyHealth | None:
        with self._lock:
            hit = self._known.get(dependency)
        if hit is None:
            return None
        seen_at, health = hit
        return health if seen_at <= now < seen_at + self._ttl else None

    def remember(self, health: DependencyHealth, now: datetime) -> None:
        if self._ttl > timedelta(0):
            with self._lock:
                self._known[health.dependency] = (now, health)

    def forget(self, dependency: str) -> None:
        with self._lock:
            self._known.pop(dependency, None)


def read_health(store: HealthStore, dependency: str, now: datetime) -> DependencyHealth:
    """The stored health, or a fresh closed one (nothing has failed yet)."""
    return store.get(dependency) or DependencyHealth.fresh(dependency, now)


def update_health[T](
    store: HealthStore,
    dependency: str,
    change: Callable[[DependencyHealth], tuple[DependencyHealth, T]],
    now: datetime,
    attempts: int = 5,
) -> tuple[DependencyHealth, T]:
    """Read (or start fresh), apply ``change`` (new health and a result for the caller), write
    conditionally when it changed anything; on a lost race, read and apply again."""
    return update_conditionally(
        read=lambda: store.get(dependency),
        fresh=lambda: DependencyHealth.fresh(dependency, now),
        change=change,
        unchanged=lambda _current, base, updated: updated is base,
        save=store.save,
        what=f"health of dependency {dependency}",
        attempts=attempts,
    )
