"""Stale reads across instances (profile ``cosmos.stale_read_rate``, ``cosmos.stale_read_lag_ms``).

The account runs at Session consistency (infra/modules/cosmos.bicep). Within one client's session a read sees
that client's writes (read your writes, monotonic reads); a client without that session token, another
instance of the app, is read from whichever replica answers, which may not have the latest write yet: it
gets some consistent prefix of the partition's writes, so a point read or a query may return an older
version of a document, or 404 for one just created (learn.microsoft.com/azure/cosmos-db/consistency-levels,
"Session consistency"). The local server keeps one copy, so every read there sees the last write.

The runner's model: every invocation (one task of the virtual-time scheduler: a message, a timer firing, an
HTTP request, an activity or orchestrator episode) is a client of its own, the most scaled-out case, where
any two invocations may run on different instances. Each write gets a sequence number (an LSN); a client's
floor in a partition is the highest LSN it has written or read there. A read by a client whose floor is
below a document's latest write, within ``lag`` of that write, returns the version before it (None, a 404,
when the write created the document) with probability ``rate``. So: never a version older than one that
client saw (in that partition), never one that was not written yet, one write back at most, and a client's
own writes always visible to it. What a process remembers of a record (``StateStore.recent``, the version
an update starts from without a read) is the invocation's own too: what it last read or heard written. A
query's record is served the same way, but only as the replica could answer it: a record just created is
left out; the previous version is returned only when it agrees with the latest on what the state queries
filter on (``processState``, ``lockedBy``, ``completeBy``), else the latest. Aggregates (counts) are served current."""

from __future__ import annotations

import random
import threading
import weakref
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, NamedTuple

Key = tuple[str, str]  # (kind of document, its id)
Partition = tuple[str, str]  # (container, partition key value)

LEFT_OUT = object()  # ``queried``: the replica answering does not have the document yet


class _Version(NamedTuple):
    lsn: int
    at: datetime
    tag: str  # the version's _etag ("" where the adapter does not return it: orders are never replaced)
    value: Any


class _Runner:
    """The client of a read made outside any invocation (the runner's own)."""


class _Session:
    """What one client (an invocation) has seen: its floor per partition, and the version of each document it
    last read or heard written (its process's memory of it: ``StateStore.recent``)."""

    __slots__ = ("floors", "known")

    def __init__(self) -> None:
        self.floors: dict[Partition, int] = {}
        self.known: dict[Key, Any] = {}


class StaleReads:
    def __init__(
        self,
        rate: float,
        lag: timedelta,
        rng: random.Random,
        now: Callable[[], datetime],
        client: Callable[[], object | None],
        injected: Any,
    ) -> None:
        self._rate = rate
        self._lag = lag
        self._rng = rng
        self._now = now
        self._client = client
        self._injected = injected  # the audit's Counter of injected faults
        self._lsn = 0
        self._versions: dict[Key, tuple[_Version, _Version | None]] = {}  # latest, the one before it
        self._sessions: weakref.WeakKeyDictionary[object, _Session] = weakref.WeakKeyDictionary()
        self._runner = _Runner()
        self._lock = threading.Lock()

    def _session(self) -> _Session:
        client = self._client() or self._runner
        session = self._sessions.get(client)
        if session is None:
            session = self._sessions[client] = _Session()
        return session

    def _floors_of_client(self) -> dict[Partition, int]:
        return self._session().floors

    def known(self, key: Key) -> Any:
        """The version of ``key`` this client last read or heard written (None: none)."""
        with self._lock:
            return self._session().known.get(key)

    def heard(self, key: Key, partition: Partition, value: Any) -> None:
        """This client's write of ``key`` (the last ``wrote`` of it) answered: it reads it from now on."""
        with self._lock:
            session = self._session()
            session.known[key] = value
            entry = self._versions.get(key)
            if entry is not None:
                session.floors[partition] = max(session.floors.get(partition, 0), entry[0].lsn)

    def _knows(self, key: Key, value: Any) -> Any:
        self._session().known[key] = value
        return value

    def wrote(self, key: Key, partition: Partition, tag: str, value: Any) -> None:
        """A write of ``key`` committed. Its writer's session has it once the answer reaches it (``heard``): a
        write whose response was lost never gave it the session token, and its next read may miss it."""
        with self._lock:
            self._lsn += 1
            latest = self._versions.get(key)
            self._versions[key] = (_Version(self._lsn, self._now(), tag, value), latest[0] if latest else None)

    def _stale(self, key: Key, partition: Partition, tag: str | None) -> tuple[_Version, _Version | None] | None:
        """The (latest, previous) of ``key`` when this read is served by a replica without the latest write;
        None when it sees the latest (and the client's floor moves up to it)."""
        entry = self._versions.get(key)
        if entry is None or tag is None or entry[0].tag != tag:
            return None  # not written through the runner (or not there): what Cosmos answered stands
        latest, previous = entry
        floors = self._floors_of_client()
        floor = floors.get(partition, 0)
        if latest.lsn > floor and self._now() - latest.at < self._lag and self._rng.random() < self._rate:
            if previous is not None:
                floors[partition] = max(floor, previous.lsn)
            return entry
        floors[partition] = max(floor, latest.lsn)
        return None

    def read(self, key: Key, partition: Partition, tag: str | None, current: Any) -> Any:
        """What a point read of ``key`` returns to this client, Cosmos having answered ``current`` (tag: its
        _etag; None: a 404)."""
        with self._lock:
            stale = self._stale(key, partition, tag)
            if stale is None:
                return self._knows(key, current)
            self._injected["cosmos_stale_reads"] += 1
            previous = stale[1]
            return self._knows(key, None if previous is None else previous.value)

    def queried(
        self, key: Key, partition: Partition, tag: str | None, current: Any, same_match: Callable[[Any, Any], bool]
    ) -> Any:
        """What a query returns of ``key`` to this client (``LEFT_OUT``: nothing), Cosmos having answered
        ``current``; ``same_match(previous, current)``: the version before would match the query too."""
        with self._lock:
            stale = self._stale(key, partition, tag)
            if stale is None:
                return self._knows(key, current)
            latest, previous = stale
            if previous is None:
                self._injected["cosmos_stale_reads"] += 1
                return LEFT_OUT
            if same_match(previous.value, current):
                self._injected["cosmos_stale_reads"] += 1
                return self._knows(key, previous.value)
            floors = self._floors_of_client()  # answered current after all
            floors[partition] = max(floors.get(partition, 0), latest.lsn)
            return self._knows(key, current)
