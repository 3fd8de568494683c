"""Red team of the sweep of stray state documents (``supervisor/stray.py``) and of the records without a deadline
(``state_store.undated_page``), against the real protocol server: what the sweep still missed, what it paged too
often, and what it paged that is no problem."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.errors import StoreUnavailable
from adapters.cosmos.state_store import CosmosStateStore, update_once
from contracts.names import STATE_CONTAINER
from domain import compensation, transitions
from domain.timefmt import to_text
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.fakes import RecordingSender
from tests.supervisor.conftest import MakeContext, claimed, expired_in_a_step
from tests.supervisor.test_redteam_stray_documents import REMOVED, _edit, _unreadable

pytestmark = pytest.mark.cosmos


# --- the alert of a lasting stray document ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "every"),
    [
        ({"processState": "Archived", "completeBy": "2099-01-01T00:00:00.000000Z"}, timedelta(minutes=5)),
        ({"completeBy": "2099-01-01T00:00:00.000000Z"}, timedelta(minutes=50)),
    ],
    ids=["unknown state, a deadline ahead", "far ahead, catch-ups 50 minutes apart"],
)
def test_a_stray_document_that_lasts_pages_once_a_day_not_every_two_hours(
    make_ctx: MakeContext,
    states: CosmosStateStore,
    cosmos_db: Any,
    clock: Any,
    sender: RecordingSender,
    edit: dict[str, Any],
    every: timedelta,
) -> None:
    """FINDING. A problem's alert mark is noted seen only by a run in the first duplicate window of an hour since its
    documents' earliest ``completeBy`` (``supervisor/unmapped.py``), and a problem not seen for two hours is over: its
    next sighting pages again. The sweep selects documents that are not due: one of an unknown state whose
    ``completeBy`` is ahead (``since`` in the future: never in a window), or any stray document when catch-ups (the
    only runs that sweep) are further apart than the window (SUPERVISOR_CATCHUP_EVERY runs). Each paged again every
    two hours while it lasted, where the alert says once a day. Now every sighting notes the mark seen."""
    ctx = make_ctx()
    states.create(transitions.new_record("o-stray", None, clock.now()))
    _edit(cosmos_db, "o-stray", **edit)

    end = clock.now() + timedelta(hours=9)
    runs = 0
    while clock.now() < end:
        assert run_supervisor(ctx, ScanState()).stray == 1  # each a fresh catch-up: it sweeps
        runs += 1
        clock.advance(every)

    assert runs >= 10
    assert [a["details"]["documents"] for a in _unreadable(sender)] == [["o-stray"]]


# --- documents the sweep still missed ---------------------------------------------------------------------------------


def _pending(states: CosmosStateStore, clock: Any, order_id: str) -> None:
    states.create(transitions.new_record(order_id, None, clock.now()))


def _processing(states: CosmosStateStore, clock: Any, order_id: str) -> None:
    expired_in_a_step(states, order_id, clock, timedelta(minutes=5))


def _compensating(states: CosmosStateStore, clock: Any, order_id: str) -> None:
    record = states.create(transitions.new_record(order_id, None, clock.now()))
    update_once(states, record, lambda r: compensation.enter_compensation(r, "operator", "cancelled", clock.now()))


@pytest.mark.parametrize("updated_at", [REMOVED, None, 1_767_225_600], ids=["absent", "null", "a number"])
@pytest.mark.parametrize(
    ("make", "complete_by"),
    [(_pending, "kept"), (_processing, REMOVED), (_compensating, None)],
    ids=["Pending", "Processing without a deadline", "Compensating without a deadline"],
)
def test_a_record_whose_updated_at_is_not_text_is_paged(
    make_ctx: MakeContext,
    states: CosmosStateStore,
    cosmos_db: Any,
    clock: Any,
    sender: RecordingSender,
    make: Any,
    complete_by: Any,
    updated_at: Any,
) -> None:
    """FINDING. The starter's claims and the catch-up's query of records without a deadline sort by ``updatedAt`` and
    keep to text keys (``IS_STRING(c.updatedAt)``: a sort over mixed types fails on Azure); the scans of deadlines
    select a Processing or Compensating record by its ``completeBy``. So a Pending record whose ``updatedAt`` was
    removed, set to null or to a number, or a Processing or Compensating one whose ``completeBy`` was removed too,
    was selected by no query, and the sweep of documents no query selects did not select it either: its order sat for
    ever, nothing paged. Now the sweep selects it; it does not map (``updatedAt`` is a timestamp): paged."""
    ctx = make_ctx()
    make(states, clock, "o-stale")
    fields: dict[str, Any] = {"updatedAt": updated_at}
    if complete_by != "kept":
        fields["completeBy"] = complete_by
    _edit(cosmos_db, "o-stale", **fields)

    report = run_supervisor(ctx, ScanState())

    assert report.stray == 1
    [alert] = _unreadable(sender)
    assert (alert["details"]["query"], alert["details"]["documents"]) == ("stray documents", ["o-stale"])
    assert alert["details"]["signature"].startswith("StateRecord:updatedAt:")


def test_a_processing_record_with_a_deadline_and_no_updated_at_is_paged_once_by_the_scan_not_the_sweep(
    make_ctx: MakeContext, states: CosmosStateStore, cosmos_db: Any, clock: Any, sender: RecordingSender
) -> None:
    """The scan of expired attempts selects a Processing record by its ``completeBy`` whatever its ``updatedAt``: it
    skips and pages it; the sweep leaves it out (one page per problem, not one per query)."""
    ctx = make_ctx()
    _processing(states, clock, "o-dated")
    _edit(cosmos_db, "o-dated", updatedAt=REMOVED)

    report = run_supervisor(ctx, ScanState())

    assert report.stray == 0
    assert [a["details"]["query"] for a in _unreadable(sender)] == ["expired attempts"]


# --- documents the sweep paged that are no problem --------------------------------------------------------------------


def test_a_newer_version_s_document_of_another_kind_is_not_paged(
    make_ctx: MakeContext, states: CosmosStateStore, cosmos_db: Any, clock: Any, sender: RecordingSender
) -> None:
    """FINDING. Every document of the ``state`` container that is not a state record has a ``kind`` (a state record
    has none); the sweep left out only the kinds this version knows. A newer version's new kind of document (read by
    this one after a rollback, or during a rolling upgrade) has no ``processState``: paged as an unreadable state
    record, though it is none and nothing waits on it. Now a document with a ``kind`` is never a stray state record;
    a newer version's record in a state this one does not know still is (nothing here moves its order)."""
    ctx = make_ctx()
    container = cosmos_db.get_container_client(STATE_CONTAINER)
    now = to_text(clock.now())
    container.create_item({"id": "lease:scan", "orderId": "lease:scan", "kind": "ScanLease", "updatedAt": now})
    _pending(states, clock, "o-newer")
    _edit(cosmos_db, "o-newer", processState="Suspended")

    report = run_supervisor(ctx, ScanState())

    assert report.stray == 1
    assert [a["details"]["documents"] for a in _unreadable(sender)] == [["o-newer"]]


# --- a round without a deadline on a catch-up that hands an order to compensation -------------------------------------


def test_a_round_without_a_deadline_is_claimed_by_a_catch_up_whose_recoveries_start_compensations(
    make_ctx: MakeContext, states: CosmosStateStore, cosmos_db: Any, clock: Any
) -> None:
    """FINDING. A catch-up run reads the Compensating records without a deadline first (``due_compensations``), but one
    whose recoveries handed an order to compensation reads the due rounds again, and that second read left them out:
    the round waited for the next catch-up, and under failures that compensate at every catch-up, for ever. Now the
    second read of a fresh catch-up reads them too."""
    ctx = make_ctx(MAX_FAILURES="1")
    _compensating(states, clock, "o-undated")
    _edit(cosmos_db, "o-undated", completeBy=REMOVED)
    # an attempt at its last failure whose reservation's outcome is unknown: the supervisor hands it to compensation
    began = clock.now() - timedelta(minutes=5)
    record = claimed(states, "o-expired", began, began + timedelta(seconds=60))
    deadline = began + timedelta(seconds=60)
    update_once(
        states,
        record,
        lambda r: transitions.begin_step(r, "o-expired:1", "reserve-inventory", "inventory", "req-1", deadline, began),
    )

    report = run_supervisor(ctx, ScanState(), statuses={"o-expired:1": "Completed"})

    assert report.compensating == 1
    assert sorted(c.order_id for c in report.compensations) == ["o-expired", "o-undated"]


# --- the sweep's query failing ----------------------------------------------------------------------------------------


class SweepThrottled:
    """The shared store, its sweep's query throttled past the SDK's retries (a 429, ``StoreUnavailable``)."""

    def __init__(self, store: CosmosStateStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def stray_page(self, beyond: Any, limit: int, after: Any = None) -> Any:
        raise StoreUnavailable("Cosmos DB 429: request rate is large")


def test_a_sweep_the_store_cannot_answer_is_left_for_the_next_catch_up_not_paged(
    make_ctx: MakeContext,
    states: CosmosStateStore,
    cosmos_db: Any,
    clock: Any,
    sender: RecordingSender,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """FINDING. The sweep let a store that is unavailable (throttled past the SDK's retries, a blip) fail its phase:
    ``SupervisorPhaseFailed``, which the ``supervisorFailing`` log alert rule pages, for a query the next catch-up
    makes again; every other query of a run takes it as a warning (the scan ``SupervisorScanInterrupted``, the owed
    sweep, the claims). Now it is logged as a sweep not read (WARNING), and the next catch-up sweeps."""
    _pending(states, clock, "o-2099")
    _edit(cosmos_db, "o-2099", completeBy="2099-01-01T00:00:00.000000Z")

    with caplog.at_level(logging.INFO):
        report = run_supervisor(make_ctx(states=SweepThrottled(states)), ScanState())

    assert report.stray == 0
    assert [r for r in caplog.records if getattr(r, "event", "") == "SupervisorPhaseFailed"] == []
    [sweep] = [r for r in caplog.records if getattr(r, "event", "") == "SupervisorStraySweep"]
    assert sweep.levelno == logging.WARNING and "429" in str(getattr(sweep, "unread", ""))
    assert run_supervisor(make_ctx(), ScanState()).stray == 1  # the next catch-up
    assert len(_unreadable(sender)) == 1


# --- more stray documents than a sweep's page -------------------------------------------------------------------------


def test_stray_documents_past_the_sweep_s_page_are_reached_by_later_catch_ups(
    make_ctx: MakeContext, states: CosmosStateStore, cosmos_db: Any, clock: Any, sender: RecordingSender
) -> None:
    """FINDING. The sweep read one page (TOP, no order, no cursor): every catch-up the same first documents. More
    stray documents than a page (old orders set to a state of the operators' own by a script, say) hid every other
    one for good: a record moved far ahead behind them was never paged. Now the sweep goes on after the last id of
    the page before (``ScanState.stray_after``), and starts over at the end: each is met within a round of pages."""
    ctx = make_ctx(SUPERVISOR_PAGE_SIZE="5", SUPERVISOR_CATCHUP_EVERY="1")
    for i in range(12):
        _pending(states, clock, f"o-archived-{i:02}")
        _edit(cosmos_db, f"o-archived-{i:02}", processState="Archived")
    _pending(states, clock, "z-2099")
    _edit(cosmos_db, "z-2099", completeBy="2099-01-01T00:00:00.000000Z")

    scan = ScanState()
    found = []
    for _ in range(6):
        scan.stray_swept_at = None  # each catch-up sweeps (its cadence, STRAY_SWEEP_EVERY, is another test's)
        found.append(run_supervisor(ctx, scan).stray)

    assert sum(found) >= 13  # every one met, once a round
    documents = [tuple(a["details"]["documents"]) for a in _unreadable(sender)]
    assert any("z-2099" in d for d in documents), documents
    assert [a["details"]["signature"] for a in _unreadable(sender)].count(
        "Pending:completeBy:beyond the app's deadlines"
    ) == 1
