"""A document's keys this code does not know (a newer version's fields, read after a rollback) are written
back unchanged by every replace of the document, against the Cosmos DB protocol server: a state record's
fenced update and single updates (read by id or by a query), a deferral document's and a dependency's health's
conditional updates (the keys inside a record's entries: test_cosmos_newer_nested_fields.py). The orders container's
create-or-verify takes a key that is null on one side and absent on the other as the same order."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.deferral_store import update_deferrals
from adapters.cosmos.health_store import update_health
from adapters.cosmos.mapping import to_document
from adapters.cosmos.order_store import CreateOutcome
from adapters.cosmos.state_store import update_fenced, update_once
from contracts.names import ORDERS_CONTAINER, STATE_CONTAINER
from domain import circuit, deferral, transitions
from domain.circuit import CircuitPolicy
from domain.deferral import DeferralDocument
from domain.states import ProcessState

pytestmark = pytest.mark.cosmos
GRACE = timedelta(seconds=60)
NEWER = {"futureSince": "2026-12-05T00:00:00.000000Z", "futureNote": {"by": "v9", "seen": [1, 2]}}


def _container(app_context: Any, name: str = STATE_CONTAINER) -> Any:
    return app_context.states._c if name == STATE_CONTAINER else app_context.orders._c


def _as_a_newer_version_wrote_it(app_context: Any, doc_id: str, partition: str) -> None:
    """Adds ``NEWER``'s keys to the stored document (a newer version's fields), as its writer would."""
    container = _container(app_context)
    item = container.read_item(doc_id, partition_key=partition)
    container.replace_item(doc_id, {**item, **NEWER})


def _raw(app_context: Any, doc_id: str, partition: str) -> dict[str, Any]:
    item: dict[str, Any] = _container(app_context).read_item(doc_id, partition_key=partition)
    return {k: v for k, v in item.items() if not k.startswith("_")}


def test_a_fenced_update_keeps_the_keys_it_does_not_know(app_context, clock):
    states = app_context.states
    states.create(transitions.new_record("o1", None, clock.now()))
    update_once(states, states.get("o1"), lambda r: transitions.claim(r, clock.now(), GRACE))
    _as_a_newer_version_wrote_it(app_context, "o1", "o1")
    states.forget_recent()
    deadline = clock.now() + GRACE
    written = update_fenced(
        states,
        "o1",
        "o1:1",
        lambda r: transitions.begin_step(r, "o1:1", "reserve-inventory", "inventory", "q", deadline, clock.now()),
    )
    assert _raw(app_context, "o1", "o1") == {**to_document(written), **NEWER}
    # the next write starts from this process's own last version (no read): still kept
    again = update_fenced(
        states, "o1", "o1:1", lambda r: transitions.release_for_retry(r, "o1:1", "reserve-inventory", "x", clock.now())
    )
    assert _raw(app_context, "o1", "o1") == {**to_document(again), **NEWER}


def test_an_update_of_a_record_a_query_returned_keeps_the_keys_it_does_not_know(app_context, clock):
    states = app_context.states
    states.create(transitions.new_record("o1", None, clock.now()))
    update_once(states, states.get("o1"), lambda r: transitions.claim(r, clock.now(), GRACE))
    _as_a_newer_version_wrote_it(app_context, "o1", "o1")
    clock.advance(GRACE * 2)
    page = states.expired_page(ProcessState.PROCESSING, clock.now(), None, 10, None)
    (expired,) = page.records
    retried = update_once(
        states, expired, lambda r: transitions.supervisor_retry(r, "o1:1", clock.now(), 3, timedelta(0))
    )
    assert retried.process_state is ProcessState.PENDING
    assert _raw(app_context, "o1", "o1") == {**to_document(retried), **NEWER}


def test_a_deferral_document_update_keeps_the_keys_it_does_not_know(app_context, clock):
    log = app_context.deferrals
    now = clock.now()
    update_deferrals(log, "o1", lambda doc: deferral.rejected(doc, now, 7), now)
    _as_a_newer_version_wrote_it(app_context, deferral.document_id("o1"), "o1")
    written = update_deferrals(log, "o1", lambda doc: deferral.accepted(doc, now), now)
    assert written.rejected_at is None
    assert _raw(app_context, deferral.document_id("o1"), "o1") == {**to_document(written), **NEWER}
    # one that changes nothing writes nothing
    assert update_deferrals(log, "o1", lambda doc: doc, now) == written


def test_a_health_update_keeps_the_keys_it_does_not_know(app_context, clock):
    health = app_context.health
    policy = CircuitPolicy(threshold=1, cooldown=timedelta(seconds=30), cooldown_max=timedelta(minutes=5), probes=1)
    now = clock.now()
    opened, _ = update_health(health, "payment", lambda h: circuit.record_failure(h, now, policy), now)
    doc_id, partition = circuit.document_id("payment"), circuit.partition_key("payment")
    _as_a_newer_version_wrote_it(app_context, doc_id, partition)
    closed, _ = update_health(health, "payment", lambda h: circuit.record_success(h, now), now)
    assert opened.unavailable() and not closed.unavailable()
    assert _raw(app_context, doc_id, partition) == {**to_document(closed), **NEWER}


def test_a_save_on_a_version_read_keeps_the_keys_it_does_not_know(app_context, clock):
    """``ConditionalDocuments.save`` itself, as the deferral log and the health store call it."""
    log = app_context.deferrals
    log.save(DeferralDocument.empty("o2", clock.now()))
    _as_a_newer_version_wrote_it(app_context, deferral.document_id("o2"), "o2")
    read = log.get("o2")
    saved = log.save(deferral.absent_checked(read, clock.now() + GRACE))
    assert _raw(app_context, deferral.document_id("o2"), "o2") == {**to_document(saved), **NEWER}


def _order(**extra: Any) -> dict[str, Any]:
    return {
        "id": "o1",
        "orderId": "o1",
        "customerId": "c1",
        "lines": [{"sku": "SKU-1", "quantity": 1, "unitPriceCents": 100}],
        "currency": "EUR",
        "shipTo": "somewhere",
        "replyTo": None,
        "prepaid": False,
        "totalCents": 100,
        "schemaVersion": 1,
        **extra,
    }


def test_an_order_stored_with_a_newer_optional_field_left_null_is_the_same_order(app_context):
    """A newer version's order document has its new optional field, null where the submitter left it out;
    the same message handled again by the older version (a redelivery, a store-retry copy) is that order, not
    ConflictingOrderData. Both ways: the older version's document, verified by the newer."""
    orders = app_context.orders
    _container(app_context, ORDERS_CONTAINER).create_item(_order(giftMessage=None))
    assert orders.create_or_verify(_order()) is CreateOutcome.IDENTICAL
    assert orders.get("o1") == _order(giftMessage=None)  # kept as it was
    assert orders.create_or_verify(_order(giftMessage=None, priority=None)) is CreateOutcome.IDENTICAL
    assert orders.create_or_verify(_order(giftMessage="hello")) is CreateOutcome.CONFLICT
    assert orders.create_or_verify(_order(shipTo="elsewhere")) is CreateOutcome.CONFLICT
