"""The composition of adapters every trigger uses, built once per worker process from app settings.

Triggers call ``get_context()`` (async ones ``get_context_async()``); tests and the local runner install their own with
``use_context()`` (a simulated clock, an in-process broker, fault-injecting stores) and the
production code runs unchanged on top."""

from __future__ import annotations

import asyncio
import random
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from adapters.clock import Clock, SystemClock
from adapters.cosmos.health_store import RecentHealth
from adapters.cosmos.order_store import OrderStore
from adapters.cosmos.state_store import StateStore
from adapters.remote.interface import RemoteService
from adapters.servicebus.sender import MessageSender
from domain.states import ProcessState
from settings import Settings

if TYPE_CHECKING:
    from adapters.cosmos.alert_mark_store import AlertMarks
    from adapters.cosmos.deferral_store import DeferralLog
    from adapters.cosmos.health_store import HealthStore
    from adapters.cosmos.ops_queries import OpsQueries
    from adapters.dead_letter_ports import DeadLetterWatchPorts
    from adapters.servicebus.deferred import DeferredMessageStore


class CachedCounts:
    """Counts of records per state, cached for a few seconds: the in-flight and pending caps are
    checked on every message without a cross-partition scan per message. A lapsed count is refreshed by
    one query at a time: the invocations that ask meanwhile get the count it replaces (before, each of an
    instance's concurrent handlers sent its own query, up to ``maxConcurrentCalls`` at once). With no count
    yet, each asks: none waits on another's query."""

    def __init__(self, store: StateStore, clock: Clock, ttl: timedelta) -> None:
        self._store = store
        self._clock = clock
        self._ttl = ttl
        self._cache: dict[ProcessState, tuple[datetime, int]] = {}
        self._refreshing: set[ProcessState] = set()
        self._lock = threading.Lock()

    def get(self, state: ProcessState) -> int:
        now = self._clock.now()
        with self._lock:
            hit = self._cache.get(state)
            if hit is not None and (now - hit[0] < self._ttl or state in self._refreshing):
                return hit[1]
            self._refreshing.add(state)
        try:
            value = self._store.count(state)
        finally:
            with self._lock:
                self._refreshing.discard(state)
        with self._lock:
            self._cache[state] = (now, value)
        return value

    def bump(self, state: ProcessState, delta: int) -> None:
        """Adjust the cached value after this process changed it (keeps the cap tight between refreshes)."""
        with self._lock:
            hit = self._cache.get(state)
            if hit is not None:
                self._cache[state] = (hit[0], max(0, hit[1] + delta))

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()


@dataclass(frozen=True)
class AppContext:
    """What every role receives. Frozen: a collaborator is never swapped on a context that is in use (``counts``
    is derived from ``states``, ``clock`` and ``settings`` when the context is built); a different wiring is a new
    context (``dataclasses.replace``), installed with ``use_context``."""

    settings: Settings
    clock: Clock
    states: StateStore
    orders: OrderStore
    sender: MessageSender
    remote: dict[str, RemoteService]
    # Deferred messages of the orders queue, fetched by sequence number, and the documents tracking them.
    deferred: DeferredMessageStore
    deferrals: DeferralLog
    # The operator API's read model (paged lists).
    ops: OpsQueries
    # Dependency health documents (circuit breakers shared across orders).
    health: HealthStore
    rng: random.Random = field(default_factory=random.Random)
    # Values a client must not be able to guess (the token on this app's own RetryDeferred messages,
    # domain.deferral.DeferredEntry.retry_token): the operating system's randomness. The local runner
    # gives a seeded generator instead, for a run its seed reproduces.
    unguessable: random.Random = field(default_factory=random.SystemRandom)
    # The app queues' dead-letter subqueues and the watch's cursors (supervisor/dead_letters.py); None: not watched.
    dead_letters: DeadLetterWatchPorts | None = None
    # The operator-alert problems that paged (notifications/repeats.py); None: every occurrence pages.
    alert_marks: AlertMarks | None = None
    counts: CachedCounts = field(init=False)
    # What this process last saw of each dependency's health (the agents' gate reads it first).
    recent_health: RecentHealth = field(init=False)

    def __post_init__(self) -> None:
        # The one assignment a frozen dataclass allows: the derived fields, while the context is being built.
        object.__setattr__(self, "counts", CachedCounts(self.states, self.clock, self.settings.state_count_cache))
        object.__setattr__(self, "recent_health", RecentHealth(self.settings.circuit_health_cache))

    def forget_process_memory(self) -> None:
        """Empties what this process keeps between invocations (the cached counts, the dependency
        health it last saw, when it last watched the dead letters): what a new process starts with. The local
        runner's host restart keeps the Python objects, so it calls this."""
        self.counts.clear()
        self.recent_health.forget_all()
        if self.dead_letters is not None:
            self.dead_letters.state.last_run = None
            self.dead_letters.state.failed_in_a_row.clear()


_context: AppContext | None = None
_lock = threading.Lock()


def use_context(context: AppContext | None) -> None:
    """Install (or, with None, drop) the context every trigger uses."""
    global _context
    with _lock:
        _context = context


def installed_context() -> AppContext | None:
    """The context ``use_context`` installed, if any (never builds the production wiring)."""
    with _lock:
        return _context


def get_context() -> AppContext:
    global _context
    with _lock:
        if _context is None:
            _context = build_from_settings(Settings.from_env())
        return _context


# The event loops whose default executor ``size_blocking_pool`` has seen to (weakly: a closed loop is forgotten).
_pools_sized: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def size_blocking_pool() -> None:
    """Gives the running loop's default executor, where every ``asyncio.to_thread`` of the async functions runs (the
    submission, the reply relay, the supervisor and the starter sweep, the peek sweep, the ops routes, the alerts'
    sends), as many threads as the worker's pool for sync functions (``PYTHON_THREADPOOL_THREAD_COUNT``), once per
    loop. The Python worker sets no default executor on its loop, so asyncio makes one of ``ThreadPoolExecutor``'s
    default size, ``min(32, cores + 4)``: 5 on one core, shared by up to 16 submissions, 16 reply relays and 16 ops
    requests at once, each waiting for a thread with its message's lock renewal and functionTimeout running. Left
    alone: an executor the loop already has (the local runner's, ``localrun.worker.executor``, which runs blocking
    work in its simulated invocation) and an unset count (the worker's default for both pools)."""
    loop = asyncio.get_running_loop()
    if loop in _pools_sized:
        return
    _pools_sized.add(loop)
    threads = Settings.worker_threads_from_env()
    # asyncio keeps the executor it was given, or made, in ``_default_executor`` (CPython's BaseEventLoop)
    if threads and getattr(loop, "_default_executor", None) is None:
        loop.set_default_executor(ThreadPoolExecutor(max_workers=threads, thread_name_prefix="app-blocking"))


async def get_context_async() -> AppContext:
    """``get_context`` for an async function. The first call of a worker process builds the wiring, off the event
    loop: on the worker's loop a slow build would hold every invocation of the worker meanwhile. (The Cosmos DB
    client, whose constructor reads the database account over the network after a managed identity token, is made
    at the first store request, on the thread that makes it: ``adapters.cosmos.client.LazyClient``.) Built once,
    it returns at once. First it sizes the loop's pool for blocking work (``size_blocking_pool``)."""
    size_blocking_pool()
    built = _context
    return built if built is not None else await asyncio.to_thread(get_context)


def build_from_settings(settings: Settings) -> AppContext:
    """Production wiring: Cosmos DB and Service Bus with the managed identity (or the emulators'
    local credentials when the settings carry them). No network request: the Service Bus client connects at its
    first send or receive, the Cosmos DB client is made at the first store request (``LazyClient``), so a Cosmos DB
    or identity endpoint failing when a new worker starts is that request's ``StoreUnavailable``, not a build that
    fails every invocation (tests/identity)."""
    from adapters.cosmos.alert_mark_store import CosmosAlertMarks
    from adapters.cosmos.client import LazyClient, lazy_container
    from adapters.cosmos.dead_letter_store import CosmosDeadLetterCursors
    from adapters.cosmos.deferral_store import CosmosDeferralLog
    from adapters.cosmos.health_store import CosmosHealthStore
    from adapters.cosmos.ops_queries import CosmosOpsQueries
    from adapters.cosmos.order_store import CosmosOrderStore
    from adapters.cosmos.state_store import CosmosStateStore
    from adapters.dead_letter_ports import DeadLetterWatchPorts
    from adapters.remote.services import remote_services
    from adapters.servicebus.client import create_sdk_client
    from adapters.servicebus.dead_letters import SdkDeadLetterBrowser
    from adapters.servicebus.deferred_sdk import SdkDeferredStore
    from adapters.servicebus.sender import SdkMessageSender
    from contracts.names import ORDERS_CONTAINER, STATE_CONTAINER

    clock = SystemClock()
    cosmos = LazyClient(settings)  # made at the first request: a failure is that request's StoreUnavailable
    service_bus = create_sdk_client(settings)
    return AppContext(
        settings=settings,
        clock=clock,
        states=CosmosStateStore(lazy_container(cosmos, settings.cosmos_database, STATE_CONTAINER)),
        orders=CosmosOrderStore(lazy_container(cosmos, settings.cosmos_database, ORDERS_CONTAINER)),
        sender=SdkMessageSender(service_bus),
        remote=remote_services(settings, clock),
        deferred=SdkDeferredStore(service_bus),
        deferrals=CosmosDeferralLog(lazy_container(cosmos, settings.cosmos_database, STATE_CONTAINER)),
        ops=CosmosOpsQueries(lazy_container(cosmos, settings.cosmos_database, STATE_CONTAINER)),
        health=CosmosHealthStore(lazy_container(cosmos, settings.cosmos_database, STATE_CONTAINER)),
        dead_letters=DeadLetterWatchPorts(
            SdkDeadLetterBrowser(service_bus),
            CosmosDeadLetterCursors(lazy_container(cosmos, settings.cosmos_database, STATE_CONTAINER)),
        ),
        alert_marks=CosmosAlertMarks(lazy_container(cosmos, settings.cosmos_database, STATE_CONTAINER)),
    )
