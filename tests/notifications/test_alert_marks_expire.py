"""Alert marks expire (``domain.alert_marks.EXPIRE_AFTER``, the mark's ``ttl``; the ``state`` container's
``defaultTtl`` -1): before, every problem that ever paged left its mark in the ``state`` container for ever, one per
content of a producer's conflicting orders. Through the real Cosmos SDK against the local protocol server, which
expires items as Azure does (``localrun/cosmos_ttl.cjs``), on a server of this module's own whose clock the test
moves ahead (``CosmosServer.set_clock_offset``) with the app's.

The raiser is the status courier's give-up (``notifications.status.give_up``: one ``StatusUndelivered`` per reply
queue and send error while it lasts); the containers are made by ``ensure_database``, as the runner makes them."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.alert_mark_store import CosmosAlertMarks
from adapters.cosmos.errors import EtagMismatch
from adapters.cosmos.mapping import NOT_STORED, camel
from adapters.cosmos.state_store import CosmosStateStore
from adapters.servicebus.sender import SendError
from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_CONTAINER, STATE_CONTAINER, STATE_DEFAULT_TTL
from domain import transitions
from domain.alert_marks import ENDED_AFTER, EXPIRE_AFTER, REPEAT_AFTER, AlertMark, document_id
from domain.circuit import DependencyHealth
from domain.dead_letters import DeadLetterCursor
from domain.deferral import DeferralDocument
from domain.records import StateRecord
from localrun.cosmos_server import CosmosServer
from notifications.status import give_up
from tests.conftest import fresh_database
from tests.fakes import RecordingSender

pytestmark = pytest.mark.cosmos

PROBLEM = "StatusUndelivered:client-a:SendError"  # the key give_up marks (the queue and the error's type)


@pytest.fixture(scope="module")
def server() -> Iterator[CosmosServer]:
    with CosmosServer() as started:
        yield started


@pytest.fixture
def database(server: CosmosServer) -> Iterator[Any]:
    server.set_clock_offset(0)
    with fresh_database(server.client()) as db:
        yield db
    server.set_clock_offset(0)


def test_the_local_state_container_expires_what_has_a_ttl_and_orders_nothing(database: Any) -> None:
    """As the Bicep declares them (tests/infra/test_consistency.py): without ``defaultTtl`` a ``ttl`` is ignored."""
    assert database.get_container_client(STATE_CONTAINER).read().get("defaultTtl") == STATE_DEFAULT_TTL == -1
    assert database.get_container_client(ORDERS_CONTAINER).read().get("defaultTtl") is None


def test_a_mark_lives_a_day_and_two_hours_past_its_last_write_then_the_problem_pages_again(
    database: Any, server: CosmosServer
) -> None:
    state = database.get_container_client(STATE_CONTAINER)
    marks, states, sender, clock = CosmosAlertMarks(state), CosmosStateStore(state), RecordingSender(), ManualClock()
    states.create(transitions.new_record("o-kept", "client-a", clock.now()))  # no ttl: never expires
    full = SendError("send to 'client-a' failed: QuotaExceeded")
    started = clock.now()

    def tick(since_start: timedelta) -> None:  # the app's clock and the server's, moved together
        clock.advance(started + since_start - clock.now())
        server.set_clock_offset(since_start.total_seconds())

    def give(order_id: str) -> None:
        at = clock.now()
        give_up(sender, order_id=order_id, status="Completed", attempt=1, variant=None, reply_to="client-a", at=at,
                error=full, marks=marks)  # fmt: skip

    give("o-1")  # pages, marked
    doc = state.read_item(document_id(PROBLEM), partition_key=document_id(PROBLEM))
    assert doc["ttl"] == EXPIRE_AFTER.total_seconds() == (REPEAT_AFTER + ENDED_AFTER).total_seconds()
    tick(timedelta(minutes=30))
    give("o-2")  # held; the mark noted seen: written again, its time to live counted from here
    last_write = timedelta(minutes=30)
    tick(last_write + EXPIRE_AFTER - timedelta(minutes=1))
    assert marks.get(PROBLEM) is not None  # still kept a minute before
    tick(last_write + EXPIRE_AFTER + timedelta(minutes=1))
    assert marks.get(PROBLEM) is None  # before: kept for ever
    ids = {d["id"] for d in state.query_items("SELECT c.id FROM c", enable_cross_partition_query=True)}
    assert ids == {"o-kept"}  # gone from queries; the state record, without a ttl, stays
    give("o-3")  # the same problem, no mark: pages again, and a new mark is written
    alerts = [json.loads(m.body)["orderId"] for q, m in sender.sent if q == OPERATOR_ALERTS_QUEUE]
    assert alerts == ["o-1", "o-3"]
    again = marks.get(PROBLEM)
    assert again is not None and again.first_at == clock.now() and again.ttl == EXPIRE_AFTER.total_seconds()


def test_a_mark_gone_between_its_read_and_its_replace_is_a_race_lost_not_an_sdk_error(
    database: Any, server: CosmosServer
) -> None:
    """Before: the replace's plain 404 left the store as the SDK's ``CosmosResourceNotFoundError``, which the raisers
    (``note_paged``, ``already_paged``: store errors only) let out after the alert was sent."""
    marks, clock = CosmosAlertMarks(database.get_container_client(STATE_CONTAINER)), ManualClock()
    marks.save(AlertMark.paged("a problem", "alert:x", clock.now()))
    read = marks.get("a problem")
    assert read is not None
    server.set_clock_offset((EXPIRE_AFTER + timedelta(minutes=1)).total_seconds())  # it expires meanwhile
    with pytest.raises(EtagMismatch):
        marks.save(read.seen(clock.now() + timedelta(hours=1)))


def test_a_404_with_a_substatus_on_the_replace_is_not_a_mark_gone(database: Any, server: CosmosServer) -> None:
    """Only a plain 404 says the document does not exist (``errors.read_or_none``'s rule, which ``get`` keeps): a 404
    with a substatus (1003: the container or database does not exist) is not "expired since it was read". Before,
    ``save`` made every 404 a lost race, which the raisers log at info and go on: the failure hidden as a race."""
    from azure.cosmos.exceptions import CosmosResourceNotFoundError

    marks, clock = CosmosAlertMarks(database.get_container_client(STATE_CONTAINER)), ManualClock()
    marks.save(AlertMark.paged("a problem", "alert:x", clock.now()))
    read = marks.get("a problem")
    assert read is not None
    server.set_faults([{"op": "replace", "container": STATE_CONTAINER, "status": 404, "substatus": 1003}])
    try:
        with pytest.raises(CosmosResourceNotFoundError) as failed:
            marks.save(read.seen(clock.now() + timedelta(hours=1)))
    finally:
        server.set_faults([])
    assert failed.value.sub_status == 1003


@pytest.mark.parametrize("kind", [StateRecord, DeferralDocument, DependencyHealth, DeadLetterCursor, AlertMark])
def test_only_the_marks_carry_a_ttl_of_the_documents_of_the_state_container(kind: type) -> None:
    """Every kind of document the app writes to the ``state`` container (``dependencies.build_from_settings``): a
    ``ttl`` key on any other would make it expire (``documents.document_of`` writes a record's fields, camelCase)."""
    keys = {camel(f.name) for f in dataclasses.fields(kind) if f.name not in NOT_STORED}
    assert ("ttl" in keys) == (kind is AlertMark)
