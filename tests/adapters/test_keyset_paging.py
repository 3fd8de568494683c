"""Keyset ("seek") paging of the two sorted cross-partition queries that are paged: the supervisor's
``CosmosStateStore.expired_page`` (``completeBy``, then id) and the ops list ``CosmosOpsQueries.page``
(``updatedAt`` newest first, then the greatest id). Each page is a fresh query after the last row of the
one before (``state_store.seek_page``), never a Cosmos DB continuation token, which the SDK cannot resume a
cross-partition ORDER BY from on Azure (and which the local server now refuses, as Azure does:
tests/localrun/test_cosmos_server_refuses_resumed_sorts.py). Through more records than a page, with ties on
the key, and with records changing between pages, every record comes once, in order: on one partition key
range and on a container split into several (``cosmos_db_either``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from adapters.cosmos.mapping import to_document
from adapters.cosmos.ops_queries import CosmosOpsQueries
from adapters.cosmos.state_store import CosmosStateStore, SeekKey
from contracts.names import STATE_CONTAINER
from domain import transitions
from domain.records import StateRecord
from domain.states import ProcessState

pytestmark = pytest.mark.cosmos


@pytest.fixture
def container(cosmos_db_either: Any) -> Any:
    """The ``state`` container with one partition key range, then split into ranges: there the SDK fetches a query
    plan, sends each range the page's ``TOP n+1 ... ORDER BY <key>, c.id`` and merges their results itself."""
    return cosmos_db_either.get_container_client(STATE_CONTAINER)


def _put(container: Any, record: StateRecord) -> None:
    container.upsert_item(to_document(record))


def _record(order_id: str, state: ProcessState, complete_by: datetime | None, updated_at: datetime) -> StateRecord:
    record = transitions.new_record(order_id, None, updated_at)
    return replace(record, process_state=state, complete_by=complete_by, updated_at=updated_at)


def _walk(fetch: Any, between: Any = None) -> list[list[str]]:
    """The order ids of every page ``fetch(after)`` gives, each page after the last one's end, until one ends
    the query; ``between(pages read)`` runs between two pages."""
    pages: list[list[str]] = []
    after: SeekKey | None = None
    while True:
        page = fetch(after)
        assert not page.unmapped
        pages.append([r.order_id for r in page.records])
        if page.after is None:
            return pages
        after = page.after
        if between is not None:
            between(len(pages))


def _expired_ids(store: CosmosStateStore, now: datetime, size: int, between: Any = None) -> list[list[str]]:
    return _walk(lambda after: store.expired_page(ProcessState.PROCESSING, now, None, size, after), between)


def test_the_scan_pages_through_ties_on_complete_by_each_record_once_in_order(container, clock):
    now = clock.now()
    # 23 due records, deadlines in groups of up to 5 equal ones, written in an order unrelated to their ids
    due = {f"o{(i * 7) % 23:02d}": now - timedelta(minutes=10) + timedelta(seconds=(i // 5)) for i in range(23)}
    for order_id, deadline in due.items():
        _put(container, _record(order_id, ProcessState.PROCESSING, deadline, now))
    _put(container, _record("later", ProcessState.PROCESSING, now + timedelta(seconds=1), now))
    _put(container, _record("pending", ProcessState.PENDING, now - timedelta(hours=1), now))

    pages = _expired_ids(CosmosStateStore(container), now, 4)

    assert [len(p) for p in pages] == [4, 4, 4, 4, 4, 3]  # no empty page after the last: one more was read to know
    assert [i for p in pages for i in p] == sorted(due, key=lambda i: (due[i], i))


def test_a_page_that_ends_the_query_says_so(container, clock):
    now = clock.now()
    for i in range(4):
        _put(container, _record(f"o{i}", ProcessState.PROCESSING, now - timedelta(seconds=1), now))
    store = CosmosStateStore(container)
    page = store.expired_page(ProcessState.PROCESSING, now, None, 4, None)
    assert len(page.records) == 4 and page.after is None
    page = store.expired_page(ProcessState.PROCESSING, now, None, 3, None)
    assert [r.order_id for r in page.records] == ["o0", "o1", "o2"] and page.after == SeekKey(
        next(to_document(r)["completeBy"] for r in page.records), "o2"
    )


def test_records_changing_between_pages(container, clock):
    """Between pages (recoveries, attempts): a record the scan has not reached that leaves the query is not
    met; one it has read that moves ahead, still due, is met again at its new place (the supervisor's writes
    are conditional on the version read: harmless); one that moves behind the cursor is left to the next scan;
    a new one ahead is met; every record that did not change is met exactly once, and the whole stays in order."""
    now = clock.now()
    base = now - timedelta(minutes=30)
    ids = [f"o{i:02d}" for i in range(12)]
    for n, order_id in enumerate(ids):  # pairs of equal deadlines
        _put(container, _record(order_id, ProcessState.PROCESSING, base + timedelta(minutes=n // 2), now))
    store = CosmosStateStore(container)

    def get(order_id: str) -> StateRecord:
        found = store.get(order_id)
        assert found is not None
        return found

    def change(after_page: int) -> None:
        if after_page != 1:
            return
        _put(container, replace(get("o09"), process_state=ProcessState.PENDING))  # ahead, recovered by another
        _put(container, replace(get("o01"), complete_by=base + timedelta(minutes=4, seconds=30)))  # read: moves ahead
        _put(container, replace(get("o07"), complete_by=base - timedelta(minutes=1)))  # ahead: moves behind
        _put(container, replace(get("o11"), complete_by=now + timedelta(minutes=5)))  # ahead: no longer due
        _put(container, _record("new", ProcessState.PROCESSING, base + timedelta(minutes=5, seconds=1), now))

    pages = _expired_ids(store, now, 3, change)
    seen = [i for p in pages for i in p]

    assert pages[0] == ["o00", "o01", "o02"]
    assert seen == ["o00", "o01", "o02", "o03", "o04", "o05", "o06", "o08", "o01", "o10", "new"]
    unchanged = {"o00", "o02", "o03", "o04", "o05", "o06", "o08", "o10"}
    assert all(seen.count(i) == 1 for i in unchanged)
    # the next scan, from the start, meets the one that moved behind
    assert [i for p in _expired_ids(store, now, 3) for i in p][:2] == ["o07", "o00"]


def _list_ids(ops: CosmosOpsQueries, state: ProcessState | None, size: int, between: Any = None) -> list[list[str]]:
    return _walk(lambda after: ops.page(state, size, after), between)


def test_the_ops_list_pages_newest_first_through_ties_each_record_once(container, clock):
    now = clock.now()
    states = [ProcessState.ERROR, ProcessState.PROCESSED, ProcessState.PENDING]
    updated = {}
    for i in range(20):
        order_id = f"o{(i * 9) % 20:02d}"
        updated[order_id] = (now - timedelta(seconds=i // 4), states[i % 3])  # groups of 4 equal updatedAt
        _put(container, _record(order_id, states[i % 3], None, updated[order_id][0]))
    container.upsert_item({"id": "deferred:o01", "orderId": "o01", "messages": []})  # no processState: not listed
    ops = CosmosOpsQueries(container)

    def newest_first(ids: Any) -> list[str]:
        return sorted(ids, key=lambda i: (updated[i][0], i), reverse=True)

    pages = _list_ids(ops, None, 3)
    assert [i for p in pages for i in p] == newest_first(updated)
    assert max(len(p) for p in pages) == 3
    for state in states:
        of_state = [i for p in _list_ids(ops, state, 2) for i in p]
        assert of_state == newest_first(i for i in updated if updated[i][1] is state)


def test_the_ops_list_with_records_written_between_pages(container, clock):
    """A record written while the operator pages (its updatedAt is the newest) goes to the front: not met
    again on the later pages; every other record is met once, in order."""
    now = clock.now()
    ids = [f"o{i:02d}" for i in range(9)]
    for n, order_id in enumerate(ids):
        _put(container, _record(order_id, ProcessState.ERROR, None, now - timedelta(seconds=n // 3)))
    ops = CosmosOpsQueries(container)

    def touch(after_page: int) -> None:
        if after_page == 1:
            clock.advance(timedelta(seconds=5))
            for order_id in ("o01", "o07"):  # one already listed, one not yet
                _put(container, replace(ops_record(order_id), updated_at=clock.now()))

    def ops_record(order_id: str) -> StateRecord:
        found = CosmosStateStore(container).get(order_id)
        assert found is not None
        return found

    seen = [i for p in _list_ids(ops, ProcessState.ERROR, 3, touch) for i in p]
    assert seen == ["o02", "o01", "o00", "o05", "o04", "o03", "o08", "o06"]  # o07 moved in front of the cursor


def test_a_document_whose_sort_key_is_not_text_ends_the_list_instead_of_starting_it_over(container, clock):
    """A hand-edited document whose ``updatedAt`` is not text is left out of the newest-first list (``IS_STRING``:
    a cross-partition sort over mixed types fails on Azure, tests/adapters/test_sort_keys_of_another_type.py), so
    no cursor is ever made of it (one would compare as text and start the list over: every record listed again);
    the list ends after the records it can sort."""
    now = clock.now()
    _put(container, _record("o0", ProcessState.ERROR, None, now))
    for n in range(2):  # on the first page after o0 (a later page seeks by text: they are not on it)
        doc = to_document(_record(f"x{n}", ProcessState.ERROR, None, now))
        doc["updatedAt"] = [None, 5][n]
        container.upsert_item(doc)
    ops = CosmosOpsQueries(container)
    listed: list[str] = []
    after: SeekKey | None = None
    for _ in range(10):
        page = ops.page(ProcessState.ERROR, 2, after)
        listed += [r.order_id for r in page.records] + [u.doc_id for u in page.unmapped]
        if page.after is None:
            break
        after = page.after
    assert listed == ["o0"] and page.after is None  # was o0, x1, o0: the cursor "5" is after every timestamp
