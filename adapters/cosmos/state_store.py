"""The state store: state records in the ``state`` container, written by conditional replace on their ``_etag``.

Sort keys are text only. Every cross-partition ORDER BY (here and in ``ops_queries``) selects only documents whose
sort key is a string (``IS_STRING``, or a range on text such as ``c.completeBy <= @now``). The azure-cosmos SDK
merges the partitions' sorted results itself and raises on mixed types, a missing property counting as one
(Azure/azure-sdk-for-python#43965), so one hand-edited document would fail the query for all the others. A
document left out this way would not map anyway."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from adapters.cosmos.documents import document_of, stored
from adapters.cosmos.errors import (
    ConcurrencyExhausted,
    EtagMismatch,
    StaleRead,
    StoreOutcomeUnknown,
    StoreUnavailable,
    mapped_errors,
    query_all,
    read_or_none,
)
from adapters.cosmos.mapping import DocumentError
from domain.errors import FencingLost, IllegalTransition, WriteAlreadyMade
from domain.ids import instance_number
from domain.records import StateRecord, attempt_as_shown
from domain.states import ProcessState
from domain.text import carriable
from domain.timefmt import parse as parse_time
from domain.timefmt import to_text
from domain.transitions import NO_GRACE
from observability.events import app_event, state_transition

if TYPE_CHECKING:
    from azure.cosmos import ContainerProxy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Unmapped:
    """A document a query returned that is not a valid ``StateRecord``, skipped so it never fails its page.

    Causes: schema drift, a hand edit, a timestamp outside ``timefmt``'s years. The stray sweep
    (``supervisor/stray.py``) also reports a record whose ``completeBy`` is far ahead as one."""

    doc_id: str
    error: str  # the mapping error (``DocumentError``: the field and the problem), cut to 500 characters
    due_at: datetime | None  # its ``completeBy`` (what the query selected it by), if that reads as a timestamp
    # how it is broken, the same for every document broken the same way (``unmapped_signature``)
    signature: str = ""


def unmapped_signature(exc: Exception) -> str:
    """The signature of a mapping error: ``DocumentError.signature`` (the record kind, the field's place in the
    schema, what was expected), else the error's type alone (its text may hold the document's values)."""
    signature = exc.signature if isinstance(exc, DocumentError) else type(exc).__name__
    return carriable(signature)[:200]


@dataclass(frozen=True)
class SeekKey:
    """Where a keyset ("seek") page ended: the sort key and id of its last document.

    The next page is a fresh query for what comes after it in ``ORDER BY <key>, c.id`` order (``seek_page``). The
    app keeps its own cursor because the SDK cannot resume a cross-partition ORDER BY from a continuation token
    (azure-cosmos README, "Limitations")."""

    key: str
    id: str


@dataclass(frozen=True)
class StrayPage:
    """What ``stray_page`` found: records with ``completeBy`` far ahead, and documents that do not map.

    ``more``: more matched than the page held; ``after``: the id to continue from (None: the query's end)."""

    far_ahead: list[StateRecord]
    unreadable: list[Unmapped]
    more: bool
    request_charge: float
    after: str | None = None


@dataclass(frozen=True)
class Page:
    records: list[StateRecord]
    after: SeekKey | None  # where the page ended when more may follow; None: the query's end
    request_charge: float
    unmapped: list[Unmapped] = field(default_factory=list)  # documents of the page that did not map


def _due_at(doc: Any) -> datetime | None:
    value = doc.get("completeBy") if isinstance(doc, dict) else None
    try:
        return parse_time(value) if isinstance(value, str) else None
    except ValueError:
        return None


def read_state(doc: dict[str, Any]) -> StateRecord:
    """Maps a state document read from the store; raises ``DocumentError`` if it does not fit.

    ``attempt`` is taken as the record shows it (``records.attempt_as_shown``), in case a hand edit lowered it."""
    return attempt_as_shown(stored(StateRecord, doc))


def map_each(
    docs: list[dict[str, Any]], query: str, *, log_skipped: bool = True
) -> tuple[list[StateRecord], list[Unmapped]]:
    """Maps a query's documents one by one, skipping (and returning) those that do not map.

    A skipped document never fails the others. It is logged ``UnmappedDocument`` (ERROR, with the order id and
    mapping error); callers that can alert do so (``supervisor/unmapped.py``). ``log_skipped=False``: the caller
    shows the skipped documents itself (the ops API)."""
    records: list[StateRecord] = []
    unmapped: list[Unmapped] = []
    for doc in docs:
        try:
            records.append(read_state(doc))
        except Exception as exc:  # isolation: whatever a document holds, the page goes on
            doc_id = carriable(str(doc.get("id") if isinstance(doc, dict) else doc))[:200]
            error = carriable(f"{type(exc).__name__}: {exc}")[:500]
            signature = unmapped_signature(exc)
            unmapped.append(Unmapped(doc_id, error, _due_at(doc), signature))
            if not log_skipped:
                continue
            app_event(
                "UnmappedDocument",
                f"order {doc_id}: state document skipped by the {query} query, it does not map: {error}",
                logging.ERROR,
                orderId=doc_id,
                query=query,
                error=type(exc).__name__,
                signature=signature,
            )
    return records, unmapped


class StateStore(Protocol):
    def get(self, order_id: str) -> StateRecord | None: ...

    def create(self, record: StateRecord) -> StateRecord: ...

    def replace(self, record: StateRecord) -> StateRecord:
        """Replace if ``record.version`` is still current; raises ``EtagMismatch`` otherwise."""
        ...

    def claimable(self, now: datetime, limit: int) -> list[StateRecord]: ...

    def expired_page(
        self,
        state: ProcessState,
        now: datetime,
        not_before: datetime | None,
        page_size: int,
        after: SeekKey | None,
        grace: timedelta = NO_GRACE,
    ) -> Page:
        """Returns a page of ``state`` records past their ``completeBy``, oldest first, after ``after``.

        Due as ``transitions.past_due`` says: ``grace`` later for a held record. ``not_before`` bounds the range
        from below."""
        ...

    def undated_page(self, state: ProcessState, page_size: int) -> Page:
        """Returns one page of ``state`` records whose ``completeBy`` is not text, oldest write first.

        Absent or null (a hand edit) maps and is due at once when held (``transitions.due_at``); another type is in
        ``Page.unmapped``. ``expired_page`` cannot select these, since it sorts by ``completeBy``."""
        ...

    def stray_page(self, beyond: datetime, limit: int, after: str | None = None) -> StrayPage:
        """Returns up to ``limit`` state documents no other query selects, in id order after ``after``.

        Selected: an unknown ``processState`` (missing, not text, another name); or a Pending, Processing or
        Compensating record whose ``completeBy`` is after ``beyond`` (moved far ahead by hand), or whose
        ``updatedAt`` is not text where no deadline scan selects it. Documents with a ``kind`` are not state
        records and are left out."""
        ...

    def count(self, state: ProcessState) -> int: ...

    def recent(self, order_id: str) -> StateRecord | None:
        """Returns the last version of the record this process read or wrote, with no I/O; it may be stale.

        A conditional write may start from it; an unconditional verdict may not (docs/design.md, "Every state
        write is an activity")."""
        ...


class CosmosStateStore:
    RECENT_LIMIT = 10_000

    def __init__(self, container: ContainerProxy) -> None:
        self._c = container
        self._recent: OrderedDict[str, StateRecord] = OrderedDict()
        self._recent_lock = threading.Lock()

    def _remember(self, record: StateRecord) -> StateRecord:
        with self._recent_lock:
            self._recent[record.order_id] = record
            self._recent.move_to_end(record.order_id)
            while len(self._recent) > self.RECENT_LIMIT:
                self._recent.popitem(last=False)
        return record

    def recent(self, order_id: str) -> StateRecord | None:
        with self._recent_lock:
            return self._recent.get(order_id)

    def forget_recent(self) -> None:
        """Drops the cache (what a process restart loses)."""
        with self._recent_lock:
            self._recent.clear()

    def get(self, order_id: str) -> StateRecord | None:
        doc = read_or_none(self._c, order_id, order_id)
        return None if doc is None else self._remember(read_state(doc))

    def create(self, record: StateRecord) -> StateRecord:
        with mapped_errors(record.id):
            doc = self._c.create_item(document_of(record))
        return self._remember(stored(StateRecord, doc))

    def replace(self, record: StateRecord) -> StateRecord:
        from azure.core import MatchConditions

        if record.version is None:
            raise ValueError("a conditional replace needs the version of the record it was derived from")
        with mapped_errors(record.id):
            doc = self._c.replace_item(
                record.id, document_of(record), etag=record.version, match_condition=MatchConditions.IfNotModified
            )
        return self._remember(stored(StateRecord, doc))

    def claimable(self, now: datetime, limit: int) -> list[StateRecord]:
        # Sort keys are text only (module docstring), hence IS_STRING(c.updatedAt).
        # No filter on lockedBy: a Pending record holds none, and a hand-edited one that does is selected so it is
        # skipped and logged (``UnmappedDocument``), not hidden. A non-text completeBy is selected the same way.
        # Up to ``CLAIM_PAGES`` pages, so unmappable old documents filling a page cannot stop every claim.
        where = (
            "c.processState = @pending AND (NOT IS_STRING(c.completeBy) OR c.completeBy <= @now) "
            "AND IS_STRING(c.updatedAt)"
        )
        params: list[dict[str, Any]] = [
            {"name": "@pending", "value": ProcessState.PENDING.value},
            {"name": "@now", "value": to_text(now)},
        ]
        records: list[StateRecord] = []
        after: SeekKey | None = None
        for _ in range(CLAIM_PAGES):
            with mapped_errors():
                docs, after = seek_page(self._c, where, params, CLAIM_ORDER, limit - len(records), after)
            records += map_each(docs, ProcessState.PENDING.value)[0]
            if after is None or len(records) >= limit:
                break
        return records

    def expired_page(
        self,
        state: ProcessState,
        now: datetime,
        not_before: datetime | None,
        page_size: int,
        after: SeekKey | None,
        grace: timedelta = NO_GRACE,
    ) -> Page:
        # ``transitions.past_due``: a held record is due ``grace`` after its completeBy, an unheld one at it. Both
        # bounds are ``timefmt`` text, so string order is time order. The range on completeBy stays the composite
        # index's seek; the grace only filters within it.
        where = "c.processState = @state AND c.completeBy <= @now AND (IS_NULL(c.lockedBy) OR c.completeBy <= @overdue)"
        params: list[dict[str, Any]] = [
            {"name": "@state", "value": state.value},
            {"name": "@now", "value": to_text(now)},
            {"name": "@overdue", "value": to_text(now - grace)},
        ]
        if not_before is not None:
            where += " AND c.completeBy >= @since"
            params.append({"name": "@since", "value": to_text(not_before)})
        charge = RequestCharge()
        with mapped_errors():
            docs, last = seek_page(self._c, where, params, EXPIRED_ORDER, page_size, after, charge)
        records, unmapped = map_each(docs, state.value)
        return Page(records, last, charge.total, unmapped)

    def undated_page(self, state: ProcessState, page_size: int) -> Page:
        # A query of its own: ``expired_page``'s range on completeBy is false for these, and sorting mixed types fails
        # on Azure. Sorted by ``updatedAt``, so the claims' composite index (processState, updatedAt, id) serves it.
        where = "c.processState = @state AND NOT IS_STRING(c.completeBy) AND IS_STRING(c.updatedAt)"
        params: list[dict[str, Any]] = [{"name": "@state", "value": state.value}]
        charge = RequestCharge()
        with mapped_errors():
            docs, _ = seek_page(self._c, where, params, CLAIM_ORDER, page_size, None, charge)
        records, unmapped = map_each(docs, state.value)
        return Page(records, None, charge.total, unmapped)  # no ``after``: it would be of another key than completeBy

    def stray_page(self, beyond: datetime, limit: int, after: str | None = None) -> StrayPage:
        # Each test is written to be true for an absent key or another type where it must be (``NOT IS_STRING``): on
        # Azure, ``IN`` with an undefined value is undefined and so is its NOT, which selects nothing (the local
        # server answers false: docs/testing.md). Documents with a ``kind`` are not state records.
        known = [{"name": f"@known{i}", "value": state.value} for i, state in enumerate(ProcessState)]
        dated = [{"name": f"@dated{i}", "value": state.value} for i, state in enumerate(STRAY_DATED)]
        where = (
            "NOT IS_STRING(c.kind) AND ("
            f"NOT IS_STRING(c.processState) OR NOT (c.processState IN ({_names(known)})) "
            f"OR (c.processState IN ({_names(dated)}) AND ("
            "(IS_STRING(c.completeBy) AND c.completeBy > @beyond) "
            # the claims and the query of records without a deadline sort by updatedAt, text only; the scans of
            # deadlines select a Processing or Compensating record whose completeBy is text whatever its updatedAt
            "OR (NOT IS_STRING(c.updatedAt) AND (c.processState = @pending OR NOT IS_STRING(c.completeBy))))))"
        )
        params: list[dict[str, Any]] = [
            *known,
            *dated,
            {"name": "@beyond", "value": to_text(beyond)},
            {"name": "@pending", "value": ProcessState.PENDING.value},
            {"name": "@top", "value": limit + 1},
        ]
        if after is not None:  # the page after the one before: more stray documents than a page are each reached
            where = f"c.id > @after AND ({where})"
            params.append({"name": "@after", "value": after})
        charge = RequestCharge()
        docs = query_all(
            self._c,
            f"SELECT TOP @top * FROM c WHERE {where} ORDER BY c.id",
            parameters=params,
            enable_cross_partition_query=True,
            response_hook=charge,
        )
        records, unmapped = map_each(docs[:limit], STRAY_QUERY)
        more = len(docs) > limit
        return StrayPage(records, unmapped, more, charge.total, str(docs[limit - 1]["id"]) if more else None)

    def count(self, state: ProcessState) -> int:
        query = "SELECT VALUE COUNT(1) FROM c WHERE c.processState = @state"
        values = query_all(
            self._c, query, parameters=[{"name": "@state", "value": state.value}], enable_cross_partition_query=True
        )
        return sum(int(v) for v in values)


# The states whose records a far-ahead ``completeBy`` keeps from every query (``stray_page``): the starter claims a
# Pending record at it, the supervisor takes a Processing or Compensating one at it.
STRAY_DATED = (ProcessState.PENDING, ProcessState.PROCESSING, ProcessState.COMPENSATING)
STRAY_QUERY = "stray documents"  # the query's name in ``UnmappedDocument`` and the supervisor's alerts


def _names(params: list[dict[str, Any]]) -> str:
    return ", ".join(p["name"] for p in params)


# The ORDER BY of every paged query (``seek_page``). Each ends in the unique ``c.id``, so a page resumes after the
# last (key, id) without repeating or skipping ties. Sorting on ``processState`` first (equal on every row) lets
# the query use the composite index (processState, key, id) (docs/design.md, "Queries and indexes"). Azure
# answers 400 without that index; tests/infra/test_consistency.py checks infra/modules/cosmos.bicep declares each.
EXPIRED_ORDER = "ORDER BY c.processState, c.completeBy, c.id"
# The starter's claims, oldest write first (the composite index of the ops list's order serves it, reversed).
CLAIM_ORDER = "ORDER BY c.processState, c.updatedAt, c.id"
# The pages one claim query reads at most while documents that do not map fill them (each skipped and logged):
# with the starter's batch of 50, the claims go on past up to 500 such Pending documents older than the others.
CLAIM_PAGES = 10


def expired_key(record: StateRecord) -> SeekKey | None:
    """Returns the ``Page.after`` of an ``expired_page`` page ending at ``record`` (None without ``completeBy``).

    Lets a caller that stops within a page go on after the last record it handled."""
    return None if record.complete_by is None else SeekKey(to_text(record.complete_by), record.order_id)


@dataclass(frozen=True)
class SeekOrder:
    """An ORDER BY clause ``seek_page`` pages by: its text, the sort key's field, the direction."""

    clause: str
    key: str  # the document field of the sort key (the one before ``c.id``)
    descending: bool = False


def seek_order(clause: str) -> SeekOrder:
    """The ``SeekOrder`` of an ``ORDER BY ..., c.<key> [DESC], c.id [DESC]`` clause."""
    terms = [t.split() for t in clause.removeprefix("ORDER BY ").split(",")]
    directions = {t[-1] == "DESC" for t in terms}
    if len(terms) < 2 or terms[-1][0] != "c.id" or len(directions) != 1:
        raise ValueError(f"not a keyset order (..., <key>, c.id, one direction): {clause!r}")
    return SeekOrder(clause, terms[-2][0].removeprefix("c."), directions.pop())


class RequestCharge:
    """Sums the RU of every response one query took; pass it as the SDK's ``response_hook``.

    On a multi-partition container the SDK queries each partition key range, so the client's
    ``last_response_headers`` would show one range's page, or another thread's request (docs/testing.md,
    "Partition key ranges")."""

    def __init__(self) -> None:
        self.total = 0.0

    def __call__(self, headers: Any, _result: Any) -> None:
        self.total += float(headers.get("x-ms-request-charge", 0) or 0)


def seek_page(
    container: ContainerProxy,
    where: str,
    params: list[dict[str, Any]],
    order: str,
    page_size: int,
    after: SeekKey | None,
    charge: RequestCharge | None = None,
) -> tuple[list[dict[str, Any]], SeekKey | None]:
    """Reads one keyset page of a cross-partition query; returns its documents and where it ended.

    ``SELECT TOP`` page size plus one (to know whether more follow) ``WHERE <where>``, after ``after`` in
    ``order``. No continuation token goes to Cosmos DB. The end is None when nothing follows. ``charge`` sums the
    RU of every response.

    A last document whose key is not text (a hand edit) ends the paging. Text sorts after every other type, so
    only such documents could follow it in a descending order, and the scans only select text anyway. A cursor
    built from it would compare as text and start the list over."""
    seek = seek_order(order)
    clauses = [where]
    values = list(params)
    if after is not None:
        beyond = "<" if seek.descending else ">"
        clauses.append(f"(c.{seek.key} {beyond} @afterKey OR (c.{seek.key} = @afterKey AND c.id {beyond} @afterId))")
        values += [{"name": "@afterKey", "value": after.key}, {"name": "@afterId", "value": after.id}]
    values.append({"name": "@seekTop", "value": page_size + 1})
    query = f"SELECT TOP @seekTop * FROM c WHERE {' AND '.join(clauses)} {order}"
    hook = RequestCharge() if charge is None else charge
    docs = query_all(container, query, parameters=values, enable_cross_partition_query=True, response_hook=hook)
    if len(docs) <= page_size:
        return docs, None
    docs = docs[:page_size]
    key, last_id = docs[-1].get(seek.key), docs[-1].get("id")
    if not isinstance(key, str) or not isinstance(last_id, str):
        return docs, None
    return docs, SeekKey(key, last_id)


# Pauses (seconds) before re-reading a record that looks older than the reader's own writes (``read_as_owner``,
# ``update_fenced``). A replica usually catches up in milliseconds; these outlast a slow one.
STALE_READ_PAUSES_S = (0.1, 0.25, 0.5, 1.0, 2.0)


def read_as_owner(
    store: StateStore, order_id: str, owner: str, pause: Callable[[float], None] | None = None
) -> StateRecord | None:
    """Reads the record for orchestration instance ``owner`` to judge whether it still holds it.

    The instance exists only because its claim (``attempt`` n) was written, and ``attempt`` only grows. So a 404
    or an earlier attempt's version is a lagging replica (the claim was another process's write), not a verdict.
    It is read again after each of ``STALE_READ_PAUSES_S`` (``pause``: the clock's sleep; None: no retries), then
    raises ``StaleRead``, which is transient: the orchestration retries the activity. For an ``owner`` that is not
    an instance id, the record as read."""
    number = instance_number(owner)
    pauses = iter(STALE_READ_PAUSES_S if pause is not None else ())
    while True:
        record = store.get(order_id)
        if number is None or (record is not None and record.attempt >= number):
            return record
        wait = next(pauses, None)
        if wait is None or pause is None:
            found = "no record" if record is None else f"attempt {record.attempt}'s record"
            raise StaleRead(f"order {order_id}: {owner} read {found}, from before its own claim")
        pause(wait)


def _paused(pause: Callable[[float], None] | None, pauses: Iterator[float]) -> bool:
    """Waits the next of ``pauses`` and returns True; False if none is left or ``pause`` is None."""
    wait = next(pauses, None)
    if pause is None or wait is None:
        return False
    pause(wait)
    return True


def update_fenced(
    store: StateStore,
    order_id: str,
    owner: str,
    change: Callable[[StateRecord], StateRecord],
    attempts: int = 5,
    pause: Callable[[float], None] | None = None,
) -> StateRecord:
    """Writes ``change`` by conditional replace on ``_etag`` while ``owner`` holds the record: the fenced write.

    Every orchestration attempt writes through it. ``change`` raises ``FencingLost`` unless ``lockedBy`` is still
    ``owner``.

    - It starts from the last version this process saw (``store.recent``) and skips the read. The replace is
      conditional, so a stale version costs a 412 and a re-read, never a lost update.
    - A verdict (``FencingLost``, ``IllegalTransition``, ``WriteAlreadyMade``) is only reached on a fresh read,
      never on the cached version: another instance may have taken the record since.
    - On 412 it re-reads and tries again. That is safe only because ``change`` re-checks ownership on the re-read.
    - A fresh read that looks older than the instance's own writes (``read_as_owner``; an ``IllegalTransition``;
      the very version a 412 just refused) is a lagging replica: it is read again after a ``pause``
      (``STALE_READ_PAUSES_S``) and not counted as a try.
    - A lost response (``StoreOutcomeUnknown``) is read back (``_lost_fenced_answer``).

    ``attempts``: the etag races allowed before ``ConcurrencyExhausted``."""
    record = store.recent(order_id)
    cached = record is not None
    # for a fresh read that looks older than the instance's own writes (see the docstring)
    pauses = iter(STALE_READ_PAUSES_S if pause is not None else ())
    refused: str | None = None  # the version the last 412 refused
    tries = 0
    while tries < attempts:
        tries += 1
        if record is None:
            record = read_as_owner(store, order_id, owner, pause)
            cached = False
            if record is None:
                raise FencingLost(order_id, owner, None)
            if record.version is not None and record.version == refused and _paused(pause, pauses):
                tries -= 1  # a replica without the write that won the race: not a race
                record = None
                continue
        try:
            updated = change(record)
        except (FencingLost, IllegalTransition, WriteAlreadyMade) as exc:
            if cached:
                record = None  # judge on a fresh read, not on what this process last saw
                continue
            if isinstance(exc, IllegalTransition) and _paused(pause, pauses):
                tries -= 1  # perhaps a replica without this instance's own last write: read again
                record = None
                continue
            raise
        try:
            written = store.replace(replace(updated, version=record.version))
        except EtagMismatch:
            if not cached:
                log.info("etag race on %s for %s; re-reading", order_id, owner)
            refused = record.version
            record = None
            continue
        except StoreOutcomeUnknown as lost:
            return _lost_fenced_answer(store, record, updated, lost)
        state_transition(record, written)
        return written
    raise ConcurrencyExhausted(f"order {order_id}: {attempts} etag races in a row for {owner}")


def _lost_fenced_answer(
    store: StateStore, record: StateRecord, updated: StateRecord, lost: StoreOutcomeUnknown
) -> StateRecord:
    """Returns ``update_fenced``'s write if a read-back shows it landed as the last move; else raises ``lost``.

    On ``lost`` the activity fails and its retry judges the record as it is then (``WriteAlreadyMade``,
    ``FencingLost``)."""
    try:
        landed = _read_back(store, record, updated, lost)
    except StoreUnavailable:
        landed = None
    if landed is None or landed.version is None:
        raise lost
    return landed


def _unconfirmed(record: StateRecord, updated: StateRecord, lost: StoreUnavailable) -> None:
    """Logs ``StateWriteUnconfirmed`` for a write whose response was lost (``StoreOutcomeUnknown``); it may have landed.

    Without it, a write the app never hears of again (an acknowledgement, a side note) would go unseen. A later
    read-back that finds it logs its ``StateTransition``; an activity's next run that finds it made
    (``WriteAlreadyMade``) logs nothing more. The failed-orders alert counts this event too."""
    if not isinstance(lost, StoreOutcomeUnknown):
        return
    entry = updated.history[-1].event if updated.history else "Written"
    app_event(
        "StateWriteUnconfirmed",
        f"order {record.order_id}: the answer to {entry} ({record.process_state.value} -> "
        f"{updated.process_state.value}) was lost ({lost}); it may have landed",
        logging.WARNING,
        orderId=record.order_id,
        fromState=record.process_state.value,
        toState=updated.process_state.value,
        transition=entry,
        attempt=updated.attempt,
        lockedBy=updated.locked_by,
    )


def update_once(store: StateStore, record: StateRecord, change: Callable[[StateRecord], StateRecord]) -> StateRecord:
    """One conditional update, NOT retried: a 412 means someone else moved the record.

    ``EtagMismatch`` propagates (starter and supervisor skip the record). A lost response (``StoreOutcomeUnknown``)
    propagates too, logged ``StateWriteUnconfirmed``; ``update_once_or_reread`` reads it back instead."""
    updated = change(record)
    try:
        return _replace_once(store, record, updated)
    except StoreOutcomeUnknown as lost:
        _unconfirmed(record, updated, lost)
        raise


def _replace_once(store: StateStore, record: StateRecord, updated: StateRecord) -> StateRecord:
    """Replaces the record with ``updated`` on ``record``'s version; a lost response is the caller's to read back."""
    written = store.replace(replace(updated, version=record.version))
    state_transition(record, written)
    return written


def update_once_or_reread(
    store: StateStore, record: StateRecord, change: Callable[[StateRecord], StateRecord]
) -> StateRecord:
    """``update_once`` that reads the record back when the write fails with ``StoreUnavailable``.

    If this write's history entry is on the record, the write happened and is returned (``_read_back`` says with
    which version). Otherwise the original error propagates: nothing was written, and a later run tries again."""
    updated = change(record)
    try:
        return _replace_once(store, record, updated)
    except StoreUnavailable as exc:
        landed = _read_back(store, record, updated, exc)
        if landed is None:
            raise
        return landed


def _read_back(
    store: StateStore, record: StateRecord, updated: StateRecord, exc: StoreUnavailable
) -> StateRecord | None:
    """Reads the record again after the write of ``updated`` failed with ``exc``; returns it if the write landed.

    - The write's history entry is on the record: logged ``WriteConfirmed`` and as its ``StateTransition``, and
      returned with the version read if still the last move, else without a version (moved on since).
    - It is not: None, and ``StateWriteUnconfirmed`` is logged for a lost response.
    - A lost response whose read-back is the very version it replaced is ambiguous (not landed, or a lagging
      replica), so the write is made once more on that version, which settles it.

    A read that fails propagates."""
    try:
        current = store.get(record.order_id)
        if isinstance(exc, StoreOutcomeUnknown) and current is not None and current.version == record.version:
            # Not landed, or a replica without it (the lost response also lost the session token). The same write on
            # the same version tells which: it lands now, or 412 (it had landed, or someone wrote since).
            try:
                return _replace_once(store, record, updated)
            except EtagMismatch:
                current = store.get(record.order_id)
    except StoreUnavailable as again:
        if isinstance(exc, StoreOutcomeUnknown):  # else refused (a 429, a 503): nothing was made that may have landed
            _unconfirmed(record, updated, again if isinstance(again, StoreOutcomeUnknown) else exc)
        raise
    mine = updated.history[-1] if updated.history else None
    if current is None or mine is None or mine not in current.history:
        _unconfirmed(record, updated, exc)
        return None
    app_event(
        "WriteConfirmed",
        f"order {record.order_id}: the response to {mine.event} was lost ({exc}); a re-read shows it landed",
        logging.WARNING,
        orderId=record.order_id,
        writeEvent=mine.event,
    )
    state_transition(record, updated)
    if current.history[-1] == mine:
        return current
    return replace(updated, version=None)
