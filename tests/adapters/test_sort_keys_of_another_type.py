"""Every cross-partition ORDER BY of the adapters sorts only values of one type. On Azure the azure-cosmos SDK
merges the partitions' sorted results itself and raises on mixed types, a missing property counting as one
(README, "Limitations": "Cross-partition ORDER BY for mixed types"; Azure/azure-sdk-for-python#43965: one
item without the property is enough). So one state document whose sort key is missing, null or not text (a
hand edit, a document another version wrote: the documents the queries promise to skip, never to fail on)
failed the whole query: the starter's claim of Pending records (``ORDER BY c.updatedAt``: no order would be
started again), the ops summary's Processing records (``ORDER BY c.completeBy``) and the ops list (``ORDER BY
c.updatedAt DESC``). The local protocol server sorted them, and left the ones without the property out; it
now refuses such a sort as Azure fails it (``localrun/cosmos_guards.cjs``), and each query keeps to text
keys (``IS_STRING``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.state_store import update_once
from contracts.names import STATE_CONTAINER
from domain import transitions
from domain.states import ProcessState

pytestmark = pytest.mark.cosmos
GRACE = timedelta(seconds=60)
BROKEN = {"missing": ..., "null": None, "a number": 1_796_000_000}


@pytest.fixture(params=list(BROKEN), ids=list(BROKEN))
def broken(request: pytest.FixtureRequest) -> Any:
    return BROKEN[request.param]


def _edit(cosmos_db: Any, order_id: str, field: str, value: Any) -> None:
    container = cosmos_db.get_container_client(STATE_CONTAINER)
    doc = container.read_item(order_id, partition_key=order_id)
    doc.pop(field)
    if value is not ...:
        doc[field] = value
    container.replace_item(order_id, doc)


def _pending(ctx: Any, clock: Any, *order_ids: str) -> None:
    for order_id in order_ids:
        ctx.states.create(transitions.new_record(order_id, None, clock.now()))


def _processing(ctx: Any, clock: Any, *order_ids: str) -> None:
    _pending(ctx, clock, *order_ids)
    for order_id in order_ids:
        update_once(ctx.states, ctx.states.get(order_id), lambda r: transitions.claim(r, clock.now(), GRACE))


def test_the_starter_claims_pending_orders_beside_one_whose_updated_at_is_not_text(
    app_context: Any, cosmos_db: Any, clock: Any, broken: Any
) -> None:
    from orchestrators.starter import sweep
    from tests.orchestrators.support import sample_order

    _pending(app_context, clock, "o1", "o-bad", "o2")
    for order_id in ("o1", "o2"):
        app_context.orders.create_or_verify(sample_order(order_id))  # the claim reads it into the attempt's plan
    _edit(cosmos_db, "o-bad", "updatedAt", broken)
    assert sorted(r.order_id for r in app_context.states.claimable(clock.now(), 10)) == ["o1", "o2"]
    assert sorted(c.order_id for c in sweep(app_context)) == ["o1", "o2"]


def test_the_ops_summary_reads_processing_orders_beside_one_whose_complete_by_is_not_text(
    app_context: Any, cosmos_db: Any, clock: Any, broken: Any
) -> None:
    from operations.views import summary

    _processing(app_context, clock, "o1", "o-bad", "o2")
    _edit(cosmos_db, "o-bad", "completeBy", broken)
    page = app_context.ops.oldest_deadlines(ProcessState.PROCESSING, 10)
    assert sorted(r.order_id for r in page.records) == ["o1", "o2"]
    answer = summary(app_context)
    assert answer["counts"][ProcessState.PROCESSING.value] == 3  # still counted
    assert answer["oldestProcessing"]["orderId"] in ("o1", "o2")


@pytest.mark.parametrize("state", [None, ProcessState.PENDING], ids=["every state", "one state"])
def test_the_ops_list_pages_orders_beside_one_whose_updated_at_is_not_text(
    app_context: Any, cosmos_db: Any, clock: Any, broken: Any, state: ProcessState | None
) -> None:
    _pending(app_context, clock, "o1", "o-bad", "o2")
    _edit(cosmos_db, "o-bad", "updatedAt", broken)
    page = app_context.ops.page(state, 25, None)
    assert sorted(r.order_id for r in page.records) == ["o1", "o2"]
