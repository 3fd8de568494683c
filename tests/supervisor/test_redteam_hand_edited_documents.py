"""Red team: state documents edited by hand (Cosmos DB Data Explorer), against the real protocol server. A value no
writer of the app makes must never stop the starter's or the supervisor's work on the other orders, leave its order
stuck without a trace, or reach another order (docs/supervisor.md, "Documents edited by hand")."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.documents import document_of
from adapters.cosmos.mapping import DocumentError
from adapters.cosmos.state_store import CLAIM_PAGES, CosmosStateStore, update_once
from contracts.names import STATE_CONTAINER
from domain import transitions
from domain.ids import MAX_ATTEMPT
from domain.states import ProcessState
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.orchestrators.support import sample_order
from tests.supervisor.conftest import MakeContext, claimed, expired_in_a_step

pytestmark = pytest.mark.cosmos
GRACE = timedelta(seconds=60)


def _edit(cosmos_db: Any, order_id: str, **fields: Any) -> None:
    """Replaces the fields of ``order_id``'s state document as an operator would (``...``: the key removed)."""
    container = cosmos_db.get_container_client(STATE_CONTAINER)
    doc = container.read_item(order_id, partition_key=order_id)
    for key, value in fields.items():
        if value is ...:
            doc.pop(key, None)
        else:
            doc[key] = value
    container.replace_item(order_id, doc)


def _pending(ctx: Any, clock: Any, *order_ids: str) -> None:
    for order_id in order_ids:
        ctx.orders.create_or_verify(sample_order(order_id))  # the claim reads it into the attempt's plan
        ctx.states.create(transitions.new_record(order_id, None, clock.now()))


@pytest.mark.parametrize("key", ["lockedBy", "completeBy"])
def test_a_pending_record_whose_null_key_was_removed_is_claimed(
    app_context: Any, cosmos_db: Any, clock: Any, key: str
) -> None:
    """FINDING. A record reads an absent ``lockedBy``/``completeBy`` as null (the field's default), claimable, but the
    claim query asked ``IS_NULL``, false for an absent key: the order stayed Pending for ever, nothing logged."""
    from orchestrators.starter import sweep

    _pending(app_context, clock, "o-edited")
    _edit(cosmos_db, "o-edited", **{key: ...})
    record = app_context.states.get("o-edited")
    assert transitions.is_claimable(record, clock.now())  # the control: the record reads as claimable
    assert [c.order_id for c in sweep(app_context)] == ["o-edited"]


@pytest.mark.parametrize("held_by", ["", "o-held:1", 7], ids=["empty", "an instance", "a number"])
def test_a_pending_record_given_a_locked_by_is_skipped_and_logged(
    app_context: Any, cosmos_db: Any, clock: Any, caplog: pytest.LogCaptureFixture, held_by: Any
) -> None:
    """FINDING. A Pending record given a ``lockedBy`` (any text: no claim takes it, and no query of the supervisor's
    selects a Pending record) waited for ever, nothing logged; one of another type was hidden by ``IS_NULL``. Now
    such a document does not map and the claim query selects it: skipped and logged (``UnmappedDocument``, paged by
    the supervisorFailing rule); the order beside it is claimed."""
    from orchestrators.starter import sweep

    _pending(app_context, clock, "o-held", "o-fine")
    _edit(cosmos_db, "o-held", lockedBy=held_by)
    with caplog.at_level(logging.ERROR):
        assert [c.order_id for c in sweep(app_context)] == ["o-fine"]
    assert [getattr(r, "orderId", None) for r in caplog.records if getattr(r, "event", "") == "UnmappedDocument"] == [
        "o-held"
    ]


def test_pending_documents_that_do_not_map_do_not_stop_the_claims_of_the_others(
    make_ctx: MakeContext, cosmos_db: Any, clock: Any
) -> None:
    """FINDING. The claim query took the ``STARTER_BATCH_SIZE`` oldest Pending documents and skipped those that do
    not map: as many hand-broken ones older than the rest (or a newer version's, after a rollback) left the batch
    empty, every sweep, and no order was started again. Now the next pages are read (``CLAIM_PAGES`` at most)."""
    from orchestrators.starter import sweep

    ctx = make_ctx(STARTER_BATCH_SIZE="3")
    broken = [f"o-broken-{n}" for n in range(7)]
    _pending(ctx, clock, *broken)
    for order_id in broken:
        _edit(cosmos_db, order_id, failureCount="several")
    clock.advance(timedelta(seconds=1))
    _pending(ctx, clock, "o-good-1", "o-good-2")
    assert len(broken) < CLAIM_PAGES * 3
    assert sorted(c.order_id for c in sweep(ctx)) == ["o-good-1", "o-good-2"]


def test_an_attempt_lowered_by_hand_never_numbers_an_earlier_instance_again(
    states: CosmosStateStore, cosmos_db: Any, clock: Any
) -> None:
    """FINDING. ``attempt`` was read as written: lowered below the attempts the record shows, the next claim
    numbered its instance as an earlier one (``o-lowered:1`` again: ``start_new`` of a finished instance's id
    replaces its history); below 0, an id no agent replies to (``o-lowered:-4``); and a running owner's every
    write read the record as stale (``read_as_owner``: attempt 0 < 2). It now reads as the highest attempt the
    record shows (its owner, its last write, a step, an instance its history names)."""
    record = states.create(transitions.new_record("o-lowered", None, clock.now()))
    for _ in range(2):
        record = update_once(states, record, lambda r: transitions.claim(r, clock.now(), GRACE))
        clock.advance(GRACE * 2)  # the attempt's deadline passes
        record = update_once(
            states, record, lambda r: transitions.supervisor_retry(r, r.locked_by, clock.now(), 9, timedelta(0))
        )
    assert record.attempt == 2 and record.process_state is ProcessState.PENDING
    _edit(cosmos_db, "o-lowered", attempt=-5)
    edited = states.get("o-lowered")
    assert edited is not None and edited.attempt == 2
    again = update_once(states, edited, lambda r: transitions.claim(r, clock.now(), GRACE))
    assert again.locked_by == "o-lowered:3"


def test_a_record_owned_by_another_orders_instance_is_skipped_and_that_instance_left_alone(
    make_ctx: MakeContext, states: CosmosStateStore, cosmos_db: Any, clock: Any
) -> None:
    """FINDING. An expired record whose ``lockedBy`` was edited to another order's live instance was recovered as
    its own: the supervisor waited on that instance's status, then listed it to terminate (the other order's
    attempt, mid-step). Now the document does not map (``lockedBy``: an instance of another order): skipped,
    logged and paged as any such document; the other order is untouched."""
    ctx = make_ctx()
    expired_in_a_step(states, "o-edited", clock, timedelta(minutes=5))
    live = claimed(states, "o-other", clock.now(), clock.now() + timedelta(minutes=10))
    _edit(cosmos_db, "o-edited", lockedBy=live.locked_by)
    with pytest.raises(DocumentError) as raised:
        states.get("o-edited")
    assert raised.value.field == "lockedBy"

    report = run_supervisor(ctx, ScanState())
    assert live.locked_by not in report.to_terminate
    other = states.get("o-other")
    assert other is not None and other.process_state is ProcessState.PROCESSING and other.locked_by == live.locked_by


def test_a_record_stored_under_another_id_than_its_order_does_not_map(
    states: CosmosStateStore, cosmos_db: Any, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """FINDING. A document whose ``orderId`` (the partition key) is not its ``id`` mapped: the starter claimed it as
    the other order (``instance_id(order_id, ...)``: that order's instance ids, numbered from this document's
    attempt), its orchestration then fenced on the other order's record. Now it does not map (``orderId``)."""
    container = cosmos_db.get_container_client(STATE_CONTAINER)
    record = transitions.new_record("o-real", None, clock.now())
    container.create_item({**document_of(record), "id": "o-copy"})  # in o-real's partition, beside no o-real
    with caplog.at_level(logging.ERROR):
        assert states.claimable(clock.now(), 10) == []
    unmapped = [r for r in caplog.records if getattr(r, "event", "") == "UnmappedDocument"]
    assert [getattr(r, "signature", None) for r in unmapped] == ["StateRecord:orderId:expected the document's id"]


def test_an_attempt_past_the_last_instance_number_does_not_map_and_one_at_it_does_not_stop_the_claims(
    app_context: Any, cosmos_db: Any, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """FINDING. An ``attempt`` past ``MAX_ATTEMPT`` mapped: its claims numbered instances no agent replies to and no
    request or status carries (``contracts.messages``). Now it does not map; and the claim of one at it, which can
    number no next attempt, fails alone: the starter's sweep claims the others (it stopped at any error but a
    store's)."""
    from orchestrators.starter import sweep

    _pending(app_context, clock, "o-past", "o-at", "o-fine")
    _edit(cosmos_db, "o-past", attempt=MAX_ATTEMPT + 1)
    _edit(cosmos_db, "o-at", attempt=MAX_ATTEMPT)
    with pytest.raises(DocumentError) as raised:
        app_context.states.get("o-past")
    assert raised.value.field == "attempt"
    with caplog.at_level(logging.ERROR):
        assert [c.order_id for c in sweep(app_context)] == ["o-fine"]
    failed = [getattr(r, "orderId", None) for r in caplog.records if getattr(r, "event", "") == "StartFailed"]
    skipped = [getattr(r, "orderId", None) for r in caplog.records if getattr(r, "event", "") == "UnmappedDocument"]
    assert (failed, skipped) == (["o-at"], ["o-past"])
    record = app_context.states.get("o-at")
    assert record is not None and record.process_state is ProcessState.PENDING


def test_an_expired_record_naming_an_unknown_agent_is_skipped_not_failed_at_every_run(
    make_ctx: MakeContext, states: CosmosStateStore, cosmos_db: Any, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """FINDING. A step whose ``agent`` was edited to a name the workflow does not have mapped, and every run's
    recovery of its expired attempt raised on it (``unknown agent``: ``SupervisorPhaseFailed``), for ever, the order
    Processing. Now the document does not map: skipped, logged and paged once per problem as any such document."""
    ctx = make_ctx()
    expired_in_a_step(states, "o-agent", clock, timedelta(minutes=5))
    container = cosmos_db.get_container_client(STATE_CONTAINER)
    doc = container.read_item("o-agent", partition_key="o-agent")
    doc["steps"]["reserve"]["agent"] = "nobody"
    container.replace_item("o-agent", doc)

    with caplog.at_level(logging.INFO):
        for _ in range(3):
            run_supervisor(ctx, ScanState())
            clock.advance(timedelta(minutes=1))
    events = [getattr(r, "event", "") for r in caplog.records]
    assert "SupervisorPhaseFailed" not in events
    signatures = {
        getattr(r, "signature", None) for r in caplog.records if getattr(r, "event", "") == "UnmappedDocument"
    }
    assert signatures == {"StateRecord:steps.*.agent:expected one of the workflow's agents"}
