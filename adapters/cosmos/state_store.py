"""The state store: state records in the ``state`` container, conditional replaces on the version
read (the item's ``_etag``).

Sort keys are text only: every cross-partition ORDER BY (here and in ``ops_queries``) keeps to documents
whose sort key is a string (``IS_STRING``, or a range on text such as ``c.completeBy <= @now``). The
azure-cosmos SDK merges the partitions' sorted results itself and raises on values of mixed types, a missing
property counting as one (README, "Limitations": "Cross-partition ORDER BY for mixed types";
Azure/azure-sdk-for-python#43965): one hand-edited document would fail the query for every other. A document
left out this way would not map anyway (a record's ``updatedAt``, a Processing one's ``completeBy``, are
timestamps)."""

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
    """A document a query returned that is not a valid ``StateRecord`` (schema drift, a hand edit, a
    timestamp outside ``timefmt``'s years): skipped, so that it never fails the page it is on. The sweep of stray
    documents (``supervisor/stray.py``) also pages a record that maps but whose ``completeBy`` is far ahead as one."""

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
    """Where a keyset ("seek") page ended: the sort key and the id of its last document. The next page
    is a fresh query for what comes after it in ``ORDER BY <key>, c.id`` order (``seek_page``): the app's
    own cursor, never a Cosmos DB continuation token, which the SDK cannot resume a cross-partition
    ORDER BY from (azure-cosmos README, "Limitations": "Continuation token support for aggregate
    cross-partition queries like sorting, counting, and distinct" is not supported)."""

    key: str
    id: str


@dataclass(frozen=True)
class StrayPage:
    """What ``stray_page`` found: the records that map (a known state, ``completeBy`` far ahead), the documents that do
    not (an unknown state, or broken besides), whether more matched than the page held, and the query's RU; ``after``:
    the id of the page's last document when more follow (None: the query's end)."""

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
    """The record of a state document read (not one the app just wrote): its ``attempt`` as the record shows it
    (``records.attempt_as_shown``: a hand edit lowered it). ``DocumentError`` if it does not fit."""
    return attempt_as_shown(stored(StateRecord, doc))


def map_each(
    docs: list[dict[str, Any]], query: str, *, log_skipped: bool = True
) -> tuple[list[StateRecord], list[Unmapped]]:
    """The records of a query's documents, mapped one by one: one that does not map is skipped and
    logged (``UnmappedDocument``, ERROR, naming the order id and the mapping error; the callers that
    can also alert, ``supervisor/unmapped.py``), never the failure of the others. ``log_skipped=False``:
    the caller shows the skipped documents itself (the ops API's answer) and is not logged on every read."""
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
        """Records of ``state`` whose ``completeBy`` has passed at ``now`` (``transitions.past_due``: ``grace``
        ago for a record someone holds), oldest first (``completeBy``, then id), none before ``not_before``,
        only those after ``after`` (the ``Page.after`` of the page before)."""
        ...

    def undated_page(self, state: ProcessState, page_size: int) -> Page:
        """Records of ``state`` whose ``completeBy`` is not text (absent, null: a hand edit; another type does not map
        and is in ``Page.unmapped``), oldest write first (``updatedAt``, then id): one page, its ``after`` None. Due
        at once when held (``transitions.due_at``), and left out of ``expired_page``, which selects on and sorts by
        ``completeBy``."""
        ...

    def stray_page(self, beyond: datetime, limit: int, after: str | None = None) -> StrayPage:
        """Up to ``limit`` state documents no other query of the app selects: a ``processState`` that is not one the
        app knows (missing, not text, another name), or a Pending, Processing or Compensating record whose
        ``completeBy`` is after ``beyond`` (moved far ahead by hand), or whose ``updatedAt`` is not text (the claims'
        sort key) when no scan of deadlines selects it (Pending, or its ``completeBy`` not text either). A document
        with a ``kind`` (deferral logs, dependency health, alert marks, dead-letter cursors, a newer version's new
        kind: a state record has none) is not selected. In id order, after ``after`` (the ``StrayPage.after`` of the
        page before; None: from the first)."""
        ...

    def count(self, state: ProcessState) -> int: ...

    def recent(self, order_id: str) -> StateRecord | None:
        """The last version of the record this process read or wrote (no I/O; it may be stale: other instances
        write the record too). A conditional write may start from it; a verdict acted on without a condition may
        not (docs/design.md, "Every state write is an activity")."""
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
        # sort keys are text only (module docstring): one document whose updatedAt is not would stop every claim.
        # No filter on lockedBy: a Pending record holds none, and a document that does (a hand edit) does not map,
        # selected to be skipped and logged (``UnmappedDocument``), not hidden (``IS_NULL`` was also false for an
        # absent key, which the record reads as null: that order was never claimed again). A completeBy that is no
        # text is taken the same way: absent, null; of another type, skipped and logged.
        # Pages follow each other (``CLAIM_PAGES`` at most) while documents that do not map fill them: the oldest
        # first, ``limit`` hand-broken documents stopped every claim of every sweep.
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
        # ``transitions.past_due``: a record someone holds is due ``grace`` after its completeBy, one nobody
        # holds at it; both bounds are ``timefmt`` text, as every stored completeBy (string order is time order).
        # (the range on completeBy stays the composite index's seek; the grace only filters within it)
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
        # Their own query: in ``expired_page``'s the range on completeBy is false for them, and its sort by completeBy
        # over values of mixed types fails on Azure (module docstring). Sorted by a key that is text (``updatedAt``),
        # the composite index (processState, updatedAt, id) the claims use serves it.
        where = "c.processState = @state AND NOT IS_STRING(c.completeBy) AND IS_STRING(c.updatedAt)"
        params: list[dict[str, Any]] = [{"name": "@state", "value": state.value}]
        charge = RequestCharge()
        with mapped_errors():
            docs, _ = seek_page(self._c, where, params, CLAIM_ORDER, page_size, None, charge)
        records, unmapped = map_each(docs, state.value)
        return Page(records, None, charge.total, unmapped)  # no ``after``: it would be of another key than completeBy

    def stray_page(self, beyond: datetime, limit: int, after: str | None = None) -> StrayPage:
        # Each test is true for an absent key or one of another type where it must be (``NOT IS_STRING``): on Azure an
        # equality (``IN``) with an undefined value or one of another type is undefined, and so is its NOT, which
        # selects nothing (the local server answers false: docs/testing.md). A document with a ``kind`` is none of the
        # state records (they have none): the app's other documents, and a newer version's new kind, are left out.
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
        with mapped_errors():
            docs = list(
                self._c.query_items(
                    f"SELECT TOP @top * FROM c WHERE {where} ORDER BY c.id",
                    parameters=params,
                    enable_cross_partition_query=True,
                    response_hook=charge,
                )
            )
        records, unmapped = map_each(docs[:limit], STRAY_QUERY)
        more = len(docs) > limit
        return StrayPage(records, unmapped, more, charge.total, str(docs[limit - 1]["id"]) if more else None)

    def count(self, state: ProcessState) -> int:
        query = "SELECT VALUE COUNT(1) FROM c WHERE c.processState = @state"
        with mapped_errors():
            result = list(
                self._c.query_items(
                    query, parameters=[{"name": "@state", "value": state.value}], enable_cross_partition_query=True
                )
            )
        values: list[Any] = list(result)
        return sum(int(v) for v in values)


# The states whose records a far-ahead ``completeBy`` keeps from every query (``stray_page``): the starter claims a
# Pending record at it, the supervisor takes a Processing or Compensating one at it.
STRAY_DATED = (ProcessState.PENDING, ProcessState.PROCESSING, ProcessState.COMPENSATING)
STRAY_QUERY = "stray documents"  # the query's name in ``UnmappedDocument`` and the supervisor's alerts


def _names(params: list[dict[str, Any]]) -> str:
    return ", ".join(p["name"] for p in params)


# The ORDER BY of every query that is paged (``seek_page``), each ending in the unique ``c.id``: a page
# resumes after the last (key, id) it returned, so ties on the key are neither repeated nor skipped.
# A query filtered on one ``processState`` sorts on it first (equal on every row, so the order is the
# key's), which lets it use the composite index (processState, key, id) (docs/design.md, "Queries and
# indexes"). Every multi-property ORDER BY needs its composite index on Azure (a 400 without it):
# tests/infra/test_consistency.py checks infra/modules/cosmos.bicep declares one for each.
EXPIRED_ORDER = "ORDER BY c.processState, c.completeBy, c.id"
# The starter's claims, oldest write first (the composite index of the ops list's order serves it, reversed).
CLAIM_ORDER = "ORDER BY c.processState, c.updatedAt, c.id"
# The pages one claim query reads at most while documents that do not map fill them (each skipped and logged):
# with the starter's batch of 50, the claims go on past up to 500 such Pending documents older than the others.
CLAIM_PAGES = 10


def expired_key(record: StateRecord) -> SeekKey | None:
    """Where a page of ``expired_page`` that ended at ``record`` ended (its ``Page.after``): a caller that stops
    within a page goes on after the last record it did (None: the record has no ``completeBy``)."""
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
    """The RU of one query, every response it took summed: the SDK calls it (``response_hook``) with the headers of
    each page it reads. On a container of more than one physical partition the SDK queries each partition key range
    and merges their results, and the client's ``last_response_headers`` is one range's page (and, the client being
    shared, perhaps another thread's request): it counted one range of N (docs/testing.md, "Partition key ranges")."""

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
    """One keyset page of a cross-partition query: ``SELECT TOP`` the page (and one more, to know whether
    more follow) ``WHERE <where>`` and after ``after`` in ``order``, read as one list; no continuation token
    goes to Cosmos DB. Returns the page's documents and where it ended (None: nothing follows it); ``charge``
    sums the RU of every response the query took (each partition key range's).

    A page whose last document's key is not text (a hand edit: a record always has timestamps there) ends
    the paging: text sorts after every other type, so in a descending order nothing but such documents
    follows it, and the scans' filters (``completeBy <= @now``) only select text. A cursor built from it
    would compare as text and start the list over (the records listed twice)."""
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
    docs = list(container.query_items(query, parameters=values, enable_cross_partition_query=True, response_hook=hook))
    if len(docs) <= page_size:
        return docs, None
    docs = docs[:page_size]
    key, last_id = docs[-1].get(seek.key), docs[-1].get("id")
    if not isinstance(key, str) or not isinstance(last_id, str):
        return docs, None
    return docs, SeekKey(key, last_id)


# The pauses before each read again of a record that looks older than its reader's own claim (``read_as_owner``):
# a replica catches up within milliseconds as a rule; these outlast a slow one before the activity gives up its try.
STALE_READ_PAUSES_S = (0.1, 0.25, 0.5, 1.0, 2.0)


def read_as_owner(
    store: StateStore, order_id: str, owner: str, pause: Callable[[float], None] | None = None
) -> StateRecord | None:
    """The record as ``owner``, an orchestration instance, reads it to judge whether it still holds it. The
    instance exists because the claim that numbered it (``attempt`` n) was written, and a record's ``attempt``
    only grows: a 404, or a version of an earlier attempt, is a replica that has not caught up with that claim
    (Session consistency: the claim was another instance's write, the starter's or the supervisor's), not a
    verdict. It is read again after each of ``STALE_READ_PAUSES_S`` (``pause``: the clock's sleep; None: not
    again), then ``StaleRead`` (transient: the activity fails, its orchestration tries it again on a durable
    timer). None (an id that is not an instance's): the record as read."""
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
    """Waits the next of ``pauses`` (True), or there is none left, or nothing to wait with (False)."""
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
    """The fenced write every orchestration attempt makes: check that ``lockedBy`` is still
    ``owner`` (``change`` raises ``FencingLost`` otherwise), then a conditional replace on ``_etag``.

    It starts from the last version this process saw (``store.recent``), which is usually the one
    its previous write returned, and skips the read: the replace is conditional on that version's
    ``_etag``, so a stale version costs one 412 and a re-read, never a lost update. A verdict is
    only ever reached on a fresh read, and never on one from before the instance's own claim
    (``read_as_owner``, read again after each ``pause``: another instance's replica may lag behind that
    write): a cached version that looks lost or not yet claimed is read
    again before ``FencingLost`` is raised, and so is one that holds this very write already
    (``WriteAlreadyMade``: the process's own earlier run wrote it; another instance may have taken the
    record since, which only a fresh read shows). On 412 it re-reads and tries again, which is safe only
    because the re-read re-checks ownership: the moment another writer takes the record, this
    attempt stops. A fresh read that looks older than the instance's own writes is read again after a
    ``pause`` (``STALE_READ_PAUSES_S``), not counted as a try: one the change cannot apply to
    (``IllegalTransition``: the step it completes not yet begun, this instance's previous write made from
    another invocation, whose replica the read did not reach), or the very version a 412 just refused.
    ``attempts``: the etag races (``ConcurrencyExhausted`` after them)."""
    record = store.recent(order_id)
    cached = record is not None
    # Pauses for a fresh read that looks older than the instance's own writes: one this record cannot take the
    # change from (``IllegalTransition``: its previous step not yet begun), or the very version a 412 just refused.
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
    """``update_fenced``'s write of ``updated`` over ``record`` whose answer was lost: read back (``_read_back``),
    the write found landed is logged as the transition it made and returned when it is still the record's last
    move. Otherwise ``lost`` propagates as before: the activity fails and its retry judges the record as it is
    then (``WriteAlreadyMade``, ``FencingLost``), the transition logged already if the read showed it."""
    try:
        landed = _read_back(store, record, updated, lost)
    except StoreUnavailable:
        landed = None
    if landed is None or landed.version is None:
        raise lost
    return landed


def _unconfirmed(record: StateRecord, updated: StateRecord, lost: StoreUnavailable) -> None:
    """A write whose answer was lost (``StoreOutcomeUnknown``) and that nobody has read back yet: it may have
    landed. Logged with the move it would make (``StateWriteUnconfirmed``), so that a write the app never hears of
    again (an acknowledgement, a side note) is still seen; one a later read-back finds landed is logged then as its
    ``StateTransition``, one an activity's next run finds made (``WriteAlreadyMade``) is not logged again (the
    failed-orders alert counts this event too)."""
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
    """A conditional update that is NOT retried: a 412 means someone else moved the record
    (``EtagMismatch`` propagates; starter and supervisor skip the record). A lost answer (``StoreOutcomeUnknown``)
    propagates too, logged ``StateWriteUnconfirmed`` (``update_once_or_reread`` reads it back instead)."""
    updated = change(record)
    try:
        return _replace_once(store, record, updated)
    except StoreOutcomeUnknown as lost:
        _unconfirmed(record, updated, lost)
        raise


def _replace_once(store: StateStore, record: StateRecord, updated: StateRecord) -> StateRecord:
    """``update_once`` of ``updated`` as it is, its lost answer left to the caller to read back."""
    written = store.replace(replace(updated, version=record.version))
    state_transition(record, written)
    return written


def update_once_or_reread(
    store: StateStore, record: StateRecord, change: Callable[[StateRecord], StateRecord]
) -> StateRecord:
    """``update_once`` for a write whose response may be lost (a timeout or a reset connection after
    Cosmos DB committed it): on ``StoreUnavailable`` the record is read again and, if this write's
    history entry is in it, the write happened and is returned as written (with the ``_etag`` of the
    version read, or none when another writer has moved the record on since). Otherwise the
    original error propagates: nothing was written, a later run tries again. A lost answer
    (``StoreOutcomeUnknown``) whose read-back is the very version it replaced is ambiguous (not landed, or
    a replica without it): the write is made once more on that version, which settles it."""
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
    """After the write of ``updated`` over ``record`` failed with ``exc``: the record read again. This write's
    history entry in it: the write landed, logged (``WriteConfirmed`` and the ``StateTransition`` it made) and
    answered with the version read if it is still the last move, else as written without a version (another
    writer moved the record on since). Not in it: None, ``StateWriteUnconfirmed`` logged for a lost answer.
    A lost answer whose read-back is the very version it replaced is ambiguous (not landed, or a replica without
    it): the write is made once more on that version, which settles it. A read that fails propagates (a lost answer
    still unconfirmed then)."""
    try:
        current = store.get(record.order_id)
        if isinstance(exc, StoreOutcomeUnknown) and current is not None and current.version == record.version:
            # The version this write replaced, read back: it did not land, or this read is another replica's that
            # has not got it (the lost answer also lost this client's session token for it: Session consistency).
            # The same write again, on the same version, tells which: it lands now, or 412 (it had landed, or
            # someone wrote since) and the record is read once more.
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
