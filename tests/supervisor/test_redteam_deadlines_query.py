"""Red team (deadlines), at the store: the supervisor's query (``CosmosStateStore.expired_page``, compared as text
in Cosmos DB) selects exactly what ``domain.transitions.past_due`` says is due: many records of every state, held
and not, ``completeBy`` around ``now`` and ``now - grace`` to the microsecond, paged, with and without the scan's
lower bound. A record the query missed would wait for a scan that never finds it; one it took early is a live
attempt's (the grace's reason)."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.mapping import to_document
from adapters.cosmos.state_store import CosmosStateStore
from contracts.names import STATE_CONTAINER
from domain import transitions
from domain.records import StateRecord
from domain.states import ProcessState

pytestmark = pytest.mark.cosmos

GRACE = timedelta(seconds=15)
TICK = timedelta(microseconds=1)


def _offsets(grace: timedelta) -> list[timedelta]:
    """``completeBy - now``: on and either side of both bounds, and well past or before them."""
    edges = [timedelta(0), -grace, timedelta(seconds=-3600)]
    near = [
        edge + d for edge in edges for d in (-TICK, timedelta(0), TICK, timedelta(seconds=-1), timedelta(seconds=1))
    ]
    return [*near, timedelta(seconds=7), timedelta(seconds=-7), timedelta(seconds=-20)]


def _records(rng: random.Random, now: Any, grace: timedelta, count: int) -> list[StateRecord]:
    states = list(ProcessState)
    offsets = _offsets(grace)
    out = []
    for i in range(count):
        order_id = f"q{i:04d}"
        complete_by = None if rng.random() < 0.08 else now + rng.choice(offsets)
        state = rng.choice(states)
        held = rng.random() < 0.5 and state is not ProcessState.PENDING  # nothing holds a Pending record
        out.append(
            replace(
                transitions.new_record(order_id, None, now),
                process_state=state,
                locked_by=f"{order_id}:{rng.randint(1, 3)}" if held else None,
                complete_by=complete_by,
            )
        )
    return out


def _selected(store: CosmosStateStore, state: ProcessState, now: Any, not_before: Any, grace: timedelta) -> list[str]:
    ids: list[str] = []
    after = None
    while True:
        page = store.expired_page(state, now, not_before, 7, after, grace)
        assert not page.unmapped
        ids.extend(r.order_id for r in page.records)
        after = page.after
        if after is None:
            return ids


@pytest.mark.parametrize("grace", [timedelta(0), GRACE, timedelta(seconds=60)])
def test_the_query_selects_exactly_the_records_past_due(cosmos_db, clock, grace):
    container = cosmos_db.get_container_client(STATE_CONTAINER)
    store = CosmosStateStore(container)
    now = clock.now().replace(microsecond=500_000)
    records = _records(random.Random(int(grace.total_seconds())), now, grace, 160)
    for record in records:
        container.upsert_item(to_document(record))
    for state in ProcessState:
        for not_before in (None, now - timedelta(seconds=30), now - grace - timedelta(seconds=1)):
            # a Processing or Compensating record without a completeBy is due too (a hand edit: ``due_at``), but
            # selected by its own query (``undated_page``, below): a sort over mixed types fails
            expected = sorted(
                (
                    r
                    for r in records
                    if r.process_state is state and r.complete_by is not None and transitions.past_due(r, now, grace)
                ),
                key=lambda r: (r.complete_by, r.order_id),
            )
            expected = [r for r in expected if not_before is None or (r.complete_by and r.complete_by >= not_before)]
            got = _selected(store, state, now, not_before, grace)
            assert sorted(got) == sorted(r.order_id for r in expected), (state, not_before)
            # oldest deadline first
            dues = [next(r.complete_by for r in records if r.order_id == i) for i in got]
            assert dues == sorted(dues)  # type: ignore[type-var]
        undated = store.undated_page(state, len(records))
        assert not undated.unmapped
        assert sorted(r.order_id for r in undated.records) == sorted(
            r.order_id for r in records if r.process_state is state and r.complete_by is None
        )
        for r in undated.records:  # due since its last write (and the grace, held), in those two states only
            due = r.updated_at + (grace if r.locked_by else timedelta(0))
            assert transitions.due_at(r, grace) == (due if state in transitions.DEADLINED else None)
