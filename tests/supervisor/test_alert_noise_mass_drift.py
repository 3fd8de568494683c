"""Red team (alert-noise-2): a mass schema drift paged once per document.

A bad deploy or a hand script that writes many state documents the app cannot map raised one ``UnreadableRecord``
per document (its mark's key was the document's id): 5,000 documents, 5,000 pages. It is one problem: the documents
of a query broken the same way (the mapping error's signature: the field's place in the schema and what was
expected, never the value met, the id or a list index), one alert naming how many this run met and a few of their
ids; every document still logged (``UnmappedDocument``); a document broken another way is another problem and pages
at once. The real supervisor run (``supervisor.run.run_supervisor``, its owed sweep's query) over the real Cosmos
SDK and the local protocol server; the marks are documents in the ``state`` container."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.state_store import CosmosStateStore, map_each
from contracts.names import OPERATOR_ALERTS_QUEUE, STATE_CONTAINER
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.fakes import RecordingSender
from tests.infra.log_alerts import LogRule
from tests.observability.exported import exported
from tests.supervisor.conftest import MakeContext
from tests.supervisor.test_redteam47_alert_noise import T0, Event, _alerts, _failed

pytestmark = pytest.mark.cosmos

# how many documents the drift breaks (``NOISE_DRIFT_DOCUMENTS=5000`` measures the brief's case: slow)
DRIFTED = int(os.environ.get("NOISE_DRIFT_DOCUMENTS", "40"))


def _broken(cosmos_db: Any, order_id: str, **fields: Any) -> dict[str, Any]:
    """The stored document of ``order_id`` with ``fields`` written over it by hand, as read back by the SDK."""
    container = cosmos_db.get_container_client(STATE_CONTAINER)
    doc = container.read_item(order_id, partition_key=order_id)
    container.replace_item(order_id, {**doc, **fields})
    return dict(container.read_item(order_id, partition_key=order_id))


def test_documents_broken_the_same_way_share_a_signature_and_others_do_not(
    states: CosmosStateStore, clock: ManualClock, cosmos_db: Any
) -> None:
    """The signature of the real mapper's errors leaves out what differs between documents broken the same way
    (the value met, the id, a list index, a step's name) and keeps the field and what was expected."""
    for n in range(9):
        _failed(states, clock, f"o-{n}", "client-a")
    first = _broken(cosmos_db, "o-0", failureCount="x")
    docs = [
        first,
        _broken(cosmos_db, "o-1", failureCount={"a": [1, 2]}),  # another id, another wrong value
        _broken(cosmos_db, "o-2", attempt="x"),  # another field
        _broken(cosmos_db, "o-3", updatedAt="2026-13-40T00:00:00Z"),  # a timestamp that does not read
        _broken(cosmos_db, "o-4", updatedAt=12),  # the same field, another problem: not text at all
        _broken(cosmos_db, "o-5", history=[{**e, "at": "yesterday"} for e in first["history"]][:1]),
        _broken(cosmos_db, "o-6", history=[*first["history"], {**first["history"][0], "at": "at noon"}]),
        _broken(cosmos_db, "o-7", steps={"ship": {"status": "Nonsense"}}),
        _broken(cosmos_db, "o-8", steps={"charge-payment": {"status": "Lost"}}),
    ]
    records, unmapped = map_each(docs, "test", log_skipped=False)
    assert not records and [u.doc_id for u in unmapped] == [f"o-{n}" for n in range(9)]
    sig = {u.doc_id: u.signature for u in unmapped}
    assert sig["o-0"] == sig["o-1"] == "StateRecord:failureCount:expected an integer"
    assert sig["o-5"] == sig["o-6"] == "StateRecord:history.*.at:not a timestamp"  # the first entry, a later one
    assert sig["o-7"] == sig["o-8"]  # two step names, one status that is no StepStatus
    assert len({sig["o-0"], sig["o-2"], sig["o-3"], sig["o-4"], sig["o-5"], sig["o-7"]}) == 6
    for u in unmapped:  # the errors themselves still say it all
        assert u.doc_id not in u.signature and "'x'" not in u.signature and "yesterday" not in u.signature
    assert "got 'x'" in unmapped[0].error and f"history.{len(first['history'])}.at" in unmapped[6].error


def test_a_mass_schema_drift_pages_once_and_a_different_break_pages_at_once(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock, cosmos_db: Any
) -> None:
    ctx = make_ctx()
    sender = ctx.sender
    assert isinstance(sender, RecordingSender)
    drifted = [f"o-drift-{n:04d}" for n in range(DRIFTED)]
    for order_id in drifted:  # a bad deploy: each written with a value the app cannot read (each its own)
        _failed(states, clock, order_id, "client-a")
        _broken(cosmos_db, order_id, failureCount=f"x{order_id}")
    log: list[Event] = []
    scan = ScanState()  # one process: its owed sweep pages on through the documents run after run

    def runs(span: timedelta) -> None:
        end = clock.now() + span
        while clock.now() < end:
            clock.advance(timedelta(minutes=2))
            with exported() as rows:
                run_supervisor(ctx, scan)
            minute = (clock.now() - T0).total_seconds() / 60
            log.extend((minute, row.table, row.properties) for row in rows)

    runs(timedelta(minutes=2))
    first = _alerts(sender, "UnreadableRecord")  # at once, on the first run that met them
    runs(timedelta(hours=3))
    # before: one per document (40 alerts and pages here; 5,000 for NOISE_DRIFT_DOCUMENTS=5000)
    assert len(_alerts(sender, "UnreadableRecord")) == len(first) == 1, len(_alerts(sender, "UnreadableRecord"))
    details: Any = first[0]["details"]
    seen = min(DRIFTED, ctx.settings.supervisor_max_records)  # one page of the owed query a run
    assert details["count"] == seen and details["documents"] == drifted[:5]
    assert details["signature"] == "StateRecord:failureCount:expected an integer"
    assert "x" + drifted[0] in details["error"]  # the first document's own error, in full
    logged = {e[2]["orderId"] for e in log if e[2].get("event") == "UnmappedDocument"}
    assert logged == set(drifted)  # none hidden

    _failed(states, clock, "o-other", "client-a")
    _broken(cosmos_db, "o-other", attempt="x")  # broken another way: another problem
    # at once: in the first run whose page of the owed sweep meets it (the sweep goes through the documents a page a
    # run, to the end of what was due when its pass began, then starts over: ``supervisor.owed.deliver_due``)
    runs(timedelta(minutes=2) * 2 * (1 + DRIFTED // ctx.settings.supervisor_max_records))
    unreadable = _alerts(sender, "UnreadableRecord")
    assert len(unreadable) == 2 and unreadable[1]["details"]["documents"] == ["o-other"]  # type: ignore[index]
    runs(timedelta(hours=1))
    alerts = [e for e in log if e[2].get("event") == "OperatorAlert" and e[2].get("alertKind") == "UnreadableRecord"]
    pages = LogRule.of("operatorAlertRaised").pages(alerts, until=int(log[-1][0]) + 60)
    assert len(pages) == 2, pages
    bodies = [json.loads(m.body) for q, m in sender.sent if q == OPERATOR_ALERTS_QUEUE]
    assert not [b for b in bodies if b["kind"] == "UnreadableRecord" and b.get("orderId")]  # the problem's, not one's


def test_a_problem_first_met_outside_its_hours_first_window_pages_in_that_run(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock, cosmos_db: Any
) -> None:
    """A problem is looked at in the first 10 minutes of each hour since its documents' earliest ``completeBy``; a
    document of a large owed backlog is met a page a run, rarely then. One that never paged pages in the run that
    meets it (its mark read finds none); before, it waited for a run that met it in such a window (with 5,000 owed
    documents, none in three hours)."""
    from domain.timefmt import to_text

    ctx = make_ctx()
    sender = ctx.sender
    assert isinstance(sender, RecordingSender)
    _failed(states, clock, "o-late", "client-a")
    _broken(cosmos_db, "o-late", failureCount="x", completeBy=to_text(clock.now() - timedelta(minutes=30)))
    run_supervisor(ctx, ScanState())
    assert [a["details"]["documents"] for a in _alerts(sender, "UnreadableRecord")] == [["o-late"]]  # type: ignore[index]
    for _ in range(30):  # and once only, in its windows too
        clock.advance(timedelta(minutes=2))
        run_supervisor(ctx, ScanState())
    assert len(_alerts(sender, "UnreadableRecord")) == 1
