"""Red team: state documents edited by hand that no query of the app selected, against the real protocol server. A
Processing or Compensating record whose ``completeBy`` was removed, one whose ``completeBy`` was moved far ahead, and
a document whose ``processState`` is no state the app knows sat silently for ever: every query filters on one known
state and a due ``completeBy``. Now the first is taken as due (``transitions.due_at``; a live instance left to its own
deadline), and the others are found by a catch-up run's sweep and paged (``supervisor/stray.py``)."""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.dead_letter_store import CosmosDeadLetterCursors
from adapters.cosmos.state_store import CosmosStateStore, update_once
from contracts.names import OPERATOR_ALERTS_QUEUE, STATE_CONTAINER
from domain import compensation, transitions
from domain.circuit import DependencyHealth
from domain.circuit import document_id as health_id
from domain.dead_letters import DeadLetterCursor
from domain.dead_letters import document_id as cursor_id
from domain.deferral import DeferralDocument
from domain.deferral import document_id as deferral_id
from domain.states import ProcessState
from domain.timefmt import to_text
from supervisor.horizon import MARGIN, deadline_horizon
from supervisor.run import run_supervisor
from supervisor.scan import ScanState, scan_expired
from tests.fakes import RecordingSender
from tests.supervisor.conftest import MakeContext, expired_in_a_step

pytestmark = pytest.mark.cosmos
REMOVED = ...  # ``_edit``: the key removed from the document


def _edit(cosmos_db: Any, order_id: str, **fields: Any) -> dict[str, Any]:
    """Replaces the fields of ``order_id``'s state document as an operator would (``REMOVED``: the key removed)."""
    container = cosmos_db.get_container_client(STATE_CONTAINER)
    doc = container.read_item(order_id, partition_key=order_id)
    for key, value in fields.items():
        if value is REMOVED:
            doc.pop(key, None)
        else:
            doc[key] = value
    written: dict[str, Any] = container.replace_item(order_id, doc)
    return written


def _unreadable(sender: RecordingSender) -> list[dict[str, Any]]:
    return [a for a in sender.bodies(OPERATOR_ALERTS_QUEUE) if a["kind"] == "UnreadableRecord"]


def _events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", "") == name]


# --- 1. a deadline removed -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("removed", [REMOVED, None], ids=["absent", "null"])
def test_an_attempt_whose_deadline_was_removed_is_recovered_once_its_instance_is_gone(
    make_ctx: MakeContext, states: CosmosStateStore, cosmos_db: Any, clock: Any, removed: Any
) -> None:
    """FINDING. A Processing record whose ``completeBy`` was removed or set to null was selected by no query (the
    supervisor's needs ``completeBy <= @now``): its orchestration gone, the order stayed Processing for ever, nothing
    logged. Now a catch-up run selects it, due at once: its instance ended, it is recovered as any expired attempt."""
    ctx = make_ctx(MAX_FAILURES="3")
    expired_in_a_step(states, "o-nodeadline", clock, timedelta(minutes=5))
    _edit(cosmos_db, "o-nodeadline", completeBy=removed)

    report = run_supervisor(ctx, ScanState(), statuses={"o-nodeadline:1": "Completed"})

    assert (report.found, report.recovered, report.to_terminate) == (1, 1, ["o-nodeadline:1"])
    record = states.get("o-nodeadline")
    assert record is not None
    assert (record.process_state, record.locked_by, record.failure_count) == (ProcessState.PENDING, None, 1)
    assert record.complete_by is not None  # a not-before time again: the starter claims it after the backoff


def test_an_attempt_whose_deadline_was_removed_is_left_to_its_live_instance(
    make_ctx: MakeContext, states: CosmosStateStore, cosmos_db: Any, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The deadline removed, the attempt's own durable timer still holds it (a review pause's may be a day away):
    while its instance runs, or its status could not be read, the record is left to it, even with no backend wait,
    up to its last write plus the deadline horizon; never taken (counted, terminated) for the edit alone. Its
    instance ended, the next catch-up takes it."""
    ctx = make_ctx(SUPERVISOR_BACKEND_WAIT_SECONDS="0", SUPERVISOR_CATCHUP_EVERY="1")
    expired_in_a_step(states, "o-live", clock, timedelta(minutes=5))
    edited = _edit(cosmos_db, "o-live", completeBy=REMOVED)
    scan = ScanState()

    with caplog.at_level(logging.INFO):
        for status in ("Running", "Unread", "Pending"):
            report = run_supervisor(ctx, scan, statuses={"o-live:1": status})
            assert (report.found, report.left_to_backend, report.to_terminate) == (1, 1, []), status
            clock.advance(timedelta(days=1))
    assert [getattr(r, "runtimeStatus", None) for r in _events(caplog, "SupervisorLeftToBackend")] == [
        "Running",
        "Unread",
        "Pending",
    ]
    record = states.get("o-live")
    assert record is not None and record.version == edited["_etag"]  # never written

    report = run_supervisor(ctx, scan, statuses={"o-live:1": "Terminated"})
    assert (report.recovered, report.to_terminate) == (1, ["o-live:1"])


def test_a_live_instance_is_left_no_longer_than_the_deadline_horizon(
    make_ctx: MakeContext, states: CosmosStateStore, cosmos_db: Any, clock: Any
) -> None:
    """The wait for an instance that never ends is bounded: past its last write plus the deadline horizon (beyond any
    deadline it can hold) and the backend wait, it is taken, counted and saying so, as any attempt the backend kept."""
    ctx = make_ctx(SUPERVISOR_CATCHUP_EVERY="1")
    record = expired_in_a_step(states, "o-hung", clock, timedelta(minutes=5))
    _edit(cosmos_db, "o-hung", completeBy=REMOVED)
    bound = record.updated_at + deadline_horizon(ctx.settings) + ctx.settings.supervisor_backend_wait
    clock.advance(bound - clock.now() - timedelta(seconds=1))
    assert run_supervisor(ctx, ScanState(), statuses={"o-hung:1": "Running"}).left_to_backend == 1
    clock.advance(timedelta(seconds=1))
    report = run_supervisor(ctx, ScanState(), statuses={"o-hung:1": "Running"})
    assert (report.recovered, report.to_terminate) == (1, ["o-hung:1"])
    taken = states.get("o-hung")
    assert taken is not None and "the Durable backend had not run" in (taken.last_error or "")


def test_an_attempt_whose_deadline_is_not_text_is_paged(
    make_ctx: MakeContext, states: CosmosStateStore, cosmos_db: Any, clock: Any, sender: RecordingSender
) -> None:
    """FINDING. A ``completeBy`` set to a number was selected by no query either. Now the catch-up's query selects it;
    it does not map (a timestamp is text): skipped and paged as any such document (``UnreadableRecord``)."""
    ctx = make_ctx()
    expired_in_a_step(states, "o-number", clock, timedelta(minutes=5))
    _edit(cosmos_db, "o-number", completeBy=1767225600)

    run_supervisor(ctx, ScanState())

    [alert] = _unreadable(sender)
    assert (alert["details"]["query"], alert["details"]["documents"]) == ("expired attempts", ["o-number"])
    assert alert["details"]["signature"].startswith("StateRecord:completeBy:")


def test_a_compensation_whose_deadline_was_removed_gets_its_round(
    make_ctx: MakeContext, states: CosmosStateStore, cosmos_db: Any, clock: Any
) -> None:
    """FINDING. A Compensating record handed over (nobody holds it) whose ``completeBy`` was removed: due by the domain
    (``is_compensation_due``), selected by no query, never compensated. Now a catch-up run claims its round."""
    ctx = make_ctx()
    record = states.create(transitions.new_record("o-undo", None, clock.now()))
    update_once(states, record, lambda r: compensation.enter_compensation(r, "operator", "cancelled", clock.now()))
    _edit(cosmos_db, "o-undo", completeBy=REMOVED)

    report = run_supervisor(ctx, ScanState())

    assert [(c.order_id, c.round) for c in report.compensations] == [("o-undo", 1)]
    claimed = states.get("o-undo")
    assert claimed is not None and claimed.locked_by == "o-undo:compensate:1" and claimed.complete_by is not None


@pytest.mark.parametrize("db", ["cosmos_db", "cosmos_db_ranges"], ids=["one range", "ranges"])
def test_scans_meet_each_record_once_with_and_without_deadlines(
    make_ctx: MakeContext, clock: Any, request: pytest.FixtureRequest, db: str
) -> None:
    """Records without a deadline have no key in the scan's order (``expired_key`` is None): they are read by their
    own query, before the deadlines, at most half a run's records, and a run stopped among them leaves no cursor.
    Runs of small pages over both kinds recover every record exactly once, and end (no cursor goes round)."""
    store = CosmosStateStore(request.getfixturevalue(db).get_container_client(STATE_CONTAINER))
    ctx = make_ctx(states=store, SUPERVISOR_MAX_RECORDS="4", SUPERVISOR_PAGE_SIZE="2", SUPERVISOR_CATCHUP_EVERY="2")
    undated = [f"u{i}" for i in range(5)]
    dated = [f"d{i}" for i in range(7)]
    for i, order_id in enumerate([*undated, *dated]):
        expired_in_a_step(store, order_id, clock, timedelta(minutes=90 + i))  # older than the window
    container = request.getfixturevalue(db).get_container_client(STATE_CONTAINER)
    for order_id in undated:  # null in some, absent in the others
        doc = container.read_item(order_id, partition_key=order_id)
        if order_id < "u3":
            doc["completeBy"] = None
        else:
            doc.pop("completeBy")
        container.replace_item(order_id, doc)
    seen: Counter[str] = Counter()
    scan = ScanState()
    for _ in range(12):
        result = scan_expired(store, scan, ctx.settings, clock.now())
        assert len(result.records) <= 4
        assert sum(r.complete_by is None for r in result.records) <= 2  # at most half a run's records
        for record in result.records:
            seen[record.order_id] += 1
            update_once(store, record, _retried_by(record.locked_by, clock.now()))
    assert seen == Counter(dict.fromkeys([*undated, *dated], 1))
    assert scan.cursor is None


def _retried_by(owner: str | None, now: Any) -> Any:
    return lambda r: transitions.supervisor_retry(r, owner, now, 9, timedelta(hours=9))


# --- 2. a deadline moved far ahead ----------------------------------------------------------------------------------


def _far_ahead(states: CosmosStateStore, cosmos_db: Any, clock: Any, state: ProcessState, order_id: str) -> None:
    record = states.create(transitions.new_record(order_id, None, clock.now()))
    if state is ProcessState.PROCESSING:
        record = update_once(states, record, lambda r: transitions.claim(r, clock.now(), timedelta(seconds=60)))
    elif state is ProcessState.COMPENSATING:
        update_once(states, record, lambda r: compensation.enter_compensation(r, "operator", "cancelled", clock.now()))
    _edit(cosmos_db, order_id, completeBy="2099-01-01T00:00:00.000000Z")


@pytest.mark.parametrize("state", [ProcessState.PENDING, ProcessState.PROCESSING, ProcessState.COMPENSATING])
def test_a_record_whose_deadline_was_moved_far_ahead_is_paged_not_touched(
    make_ctx: MakeContext,
    states: CosmosStateStore,
    cosmos_db: Any,
    clock: Any,
    sender: RecordingSender,
    caplog: pytest.LogCaptureFixture,
    state: ProcessState,
) -> None:
    """FINDING. A ``completeBy`` moved to 2099 by hand: no query selected the record before then, the order waited
    untouched for 73 years, nothing paged. Now a catch-up run's sweep pages it (``UnreadableRecord``, query ``stray
    documents``, one per state's signature, with the ids), and does not write it: a live attempt may hold it."""
    ctx = make_ctx()
    _far_ahead(states, cosmos_db, clock, state, "o-2099")
    before = states.get("o-2099")

    with caplog.at_level(logging.INFO):
        report = run_supervisor(ctx, ScanState())

    [alert] = _unreadable(sender)
    assert alert["details"]["query"] == "stray documents"
    assert alert["details"]["signature"] == f"{state.value}:completeBy:beyond the app's deadlines"
    assert alert["details"]["documents"] == ["o-2099"]
    assert "2099-01-01" in alert["details"]["error"]
    [sweep] = _events(caplog, "SupervisorStraySweep")
    assert (getattr(sweep, "farAhead", None), getattr(sweep, "unreadable", None)) == (1, 0)
    assert report.stray == 1
    after = states.get("o-2099")
    assert after is not None and before is not None and after.version == before.version  # not written

    # once per problem: the next catch-ups meet it again, and do not page it again
    for _ in range(3):
        clock.advance(timedelta(minutes=5))
        run_supervisor(ctx, ScanState())
    assert len(_unreadable(sender)) == 1


def test_deadlines_the_app_writes_are_not_paged_even_under_a_lowered_setting(
    make_ctx: MakeContext, states: CosmosStateStore, cosmos_db: Any, clock: Any, sender: RecordingSender
) -> None:
    """A review pause's deadline is a day ahead (REVIEW_TIMEOUT_SECONDS), and one written before a deploy that
    lowered the timeout by up to the margin is further: neither is paged. Beyond the margin it is."""
    ctx = make_ctx(REVIEW_TIMEOUT_SECONDS="3600")
    horizon = deadline_horizon(ctx.settings)
    assert horizon >= timedelta(hours=1) + MARGIN
    for order_id, ahead in (
        ("o-review", timedelta(days=1)),
        ("o-lowered", horizon),
        ("o-beyond", horizon + timedelta(minutes=1)),
    ):
        _far_ahead(states, cosmos_db, clock, ProcessState.PROCESSING, order_id)
        _edit(cosmos_db, order_id, completeBy=to_text(clock.now() + ahead))

    run_supervisor(ctx, ScanState())

    assert [a["details"]["documents"] for a in _unreadable(sender)] == [["o-beyond"]]


def test_regular_runs_do_not_sweep(
    make_ctx: MakeContext, states: CosmosStateStore, cosmos_db: Any, clock: Any, sender: RecordingSender
) -> None:
    """The sweep's query is not bounded by an index range: only fresh catch-ups run it (SUPERVISOR_CATCHUP_EVERY), and
    a process's first, then one ``STRAY_SWEEP_EVERY`` after its last sweep (a catch-up every 5 minutes or so spent a
    scan of the container's index each time)."""
    from supervisor.stray import STRAY_SWEEP_EVERY

    ctx = make_ctx(SUPERVISOR_CATCHUP_EVERY="4")
    scan = ScanState()
    run_supervisor(ctx, scan)  # the first run of a process: a catch-up, which sweeps
    _far_ahead(states, cosmos_db, clock, ProcessState.PENDING, "o-later")
    assert [run_supervisor(ctx, scan).stray for _ in range(2)] == [0, 0]
    assert run_supervisor(ctx, scan).stray == 0  # the fourth: a catch-up, within a day of the sweep
    assert _unreadable(sender) == []
    clock.advance(STRAY_SWEEP_EVERY)
    assert [run_supervisor(ctx, scan).stray for _ in range(3)] == [0, 0, 0]
    assert run_supervisor(ctx, scan).stray == 1  # the eighth: a catch-up, a day after the sweep


# --- 3. a state no one knows ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "signature"),
    [
        ("Archived", "StateRecord:processState:"),
        (REMOVED, "StateRecord:processState:"),
        (5, "StateRecord:processState:"),
    ],
    ids=["unknown name", "absent", "a number"],
)
def test_a_document_of_no_known_state_is_paged_and_the_container_s_other_documents_are_not(
    make_ctx: MakeContext,
    states: CosmosStateStore,
    cosmos_db: Any,
    clock: Any,
    sender: RecordingSender,
    caplog: pytest.LogCaptureFixture,
    value: Any,
    signature: str,
) -> None:
    """FINDING. A ``processState`` that is no state the app knows (edited, removed, not text): every query filters on
    a known one, only the operator console's list showed it, as unreadable; its order sat for ever, nothing paged.
    Now the catch-up's sweep selects it: logged (``UnmappedDocument``, query ``stray documents``) and paged once
    (``UnreadableRecord``, the mapping error's signature). The container's other documents (a deferral log, a
    dependency's health, a dead-letter cursor, the alert marks the sweep itself writes) are never selected."""
    ctx = make_ctx()
    now = clock.now()
    states.create(transitions.new_record("o-odd", None, now))
    _edit(cosmos_db, "o-odd", processState=value)
    states.create(transitions.new_record("o-fine", None, now))
    ctx.deferrals.save(DeferralDocument(id=deferral_id("o-early"), order_id="o-early", updated_at=now))
    ctx.health.save(
        DependencyHealth(
            id=health_id("inventory"), order_id=health_id("inventory"), dependency="inventory", updated_at=now
        )
    )
    container = cosmos_db.get_container_client(STATE_CONTAINER)
    CosmosDeadLetterCursors(container).save(
        DeadLetterCursor(id=cursor_id("orders"), order_id=cursor_id("orders"), queue="orders", updated_at=now)
    )

    with caplog.at_level(logging.INFO):
        run_supervisor(ctx, ScanState())
        clock.advance(timedelta(minutes=5))
        run_supervisor(ctx, ScanState())  # the alert marks now in the container too

    [alert] = _unreadable(sender)
    assert alert["details"]["query"] == "stray documents"
    assert alert["details"]["signature"].startswith(signature)
    assert alert["details"]["documents"] == ["o-odd"]
    assert {getattr(r, "orderId", None) for r in _events(caplog, "UnmappedDocument")} == {"o-odd"}
    sweeps = _events(caplog, "SupervisorStraySweep")
    assert [
        (getattr(s, "farAhead", None), getattr(s, "unreadable", None), getattr(s, "documents", None)) for s in sweeps
    ] == [
        (0, 1, ["o-odd"]),
        (0, 1, ["o-odd"]),
    ]
    kinds = Counter(d.get("kind") for d in container.query_items("SELECT * FROM c", enable_cross_partition_query=True))
    assert kinds["AlertMark"] >= 1 and kinds["DeferredMessages"] == kinds["DependencyHealth"] == 1
