"""An upgrade over documents the older releases' code really wrote.

``recorded_documents.json.gz`` holds documents of the ``state`` and ``orders`` containers written by the code of
earlier commits (``recordedBy``: bf16471 and 70b9094, the mornings of 2026-12-01 and 02, to 6155b2d and f3c38df on
2026-12-05), each from a local-runner run under fault profiles cut mid-flight, one per shape (its keys, nested
ones included, and their types): state records in every state, dependency health, deferral documents, orders.
The other tests of older documents drop one field at a time from a document the author wrote.

Today's code reads each one, and writes it back as it was (a key it no longer knows kept, none changed, a field
added since written at its default, which reads back as the absent key did); through
the Azure Cosmos DB SDK against the local protocol server, the stores read each, the operator's list pages through
them all with none unmapped, and a supervisor run half an hour later takes them with no phase failed
(docs/deploy.md, "Upgrading and rolling back")."""

from __future__ import annotations

import gzip
import json
import logging
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.deferral_store import CosmosDeferralLog
from adapters.cosmos.documents import document_of, stored
from adapters.cosmos.health_store import CosmosHealthStore
from adapters.cosmos.ops_queries import CosmosOpsQueries
from adapters.cosmos.order_store import CosmosOrderStore
from adapters.cosmos.state_store import CosmosStateStore
from contracts.names import ORDERS_CONTAINER, STATE_CONTAINER
from dependencies import AppContext
from domain.circuit import DependencyHealth
from domain.deferral import DeferralDocument
from domain.records import StateRecord
from domain.timefmt import parse
from settings import Settings
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.fakes import QueuesWithNothingDeferred, RecordingSender

RECORDED = Path(__file__).with_name("recorded_documents.json.gz")
KINDS: dict[str | None, type[Any]] = {"DependencyHealth": DependencyHealth, "DeferredMessages": DeferralDocument}
RELEASES = ("bf16471", "70b9094", "36c310f", "a1dfc93", "6155b2d", "f3c38df")


def recorded() -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = json.loads(gzip.decompress(RECORDED.read_bytes()))
    return documents


def state_documents(recorded_by: str) -> list[dict[str, Any]]:
    return [d["document"] for d in recorded() if d["recordedBy"] == recorded_by and d["container"] == STATE_CONTAINER]


def test_the_recorded_documents_span_the_releases_the_kinds_and_the_states() -> None:
    documents = recorded()
    assert {d["recordedBy"] for d in documents} >= set(RELEASES)
    kinds = {d["document"].get("kind") for d in documents if d["container"] == STATE_CONTAINER}
    assert kinds >= {None, "DependencyHealth", "DeferredMessages"}
    states = {d["document"].get("processState") for d in documents}
    assert states >= {"Processing", "Processed", "Error", "Compensating", "Compensated"}


def changes(before: Any, after: Any, where: str = "") -> list[str]:
    """What writing ``after`` for ``before`` loses: a key dropped or a value changed, anywhere."""
    if isinstance(before, dict) and isinstance(after, dict):
        found = [f"{where}.{key} dropped" for key in before if key not in after]
        return found + [c for key in before if key in after for c in changes(before[key], after[key], f"{where}.{key}")]
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [c for old, new in zip(before, after, strict=True) for c in changes(old, new, f"{where}[]")]
    return [] if before == after else [f"{where}: {before!r} -> {after!r}"]


@pytest.mark.parametrize("recorded_by", RELEASES)
def test_a_document_an_older_release_wrote_reads_and_is_written_back_as_it_was(recorded_by: str) -> None:
    for document in state_documents(recorded_by):
        kind = KINDS.get(document.get("kind"), StateRecord)
        read = stored(kind, document)
        written = document_of(read)
        assert changes(document, written) == [], document["id"]
        # what it adds (a field added since, at its default) reads back as the absent key did
        assert stored(kind, written) == read, document["id"]


@pytest.mark.cosmos
@pytest.mark.parametrize("recorded_by", RELEASES)
def test_the_stores_the_ops_list_and_the_supervisor_take_what_an_older_release_wrote(
    cosmos_db: Any, recorded_by: str, caplog: pytest.LogCaptureFixture
) -> None:
    state = cosmos_db.get_container_client(STATE_CONTAINER)
    orders = cosmos_db.get_container_client(ORDERS_CONTAINER)
    for entry in recorded():
        if entry["recordedBy"] == recorded_by:
            (state if entry["container"] == STATE_CONTAINER else orders).create_item(entry["document"])
    documents = state_documents(recorded_by)
    states = CosmosStateStore(state)
    health = CosmosHealthStore(state)
    deferrals = CosmosDeferralLog(state)
    for document in documents:
        kind = document.get("kind")
        if kind == "DependencyHealth":
            assert health.get(document["dependency"]) is not None
        elif kind == "DeferredMessages":
            assert deferrals.get(document["orderId"]) is not None
        else:
            assert isinstance(states.get(document["orderId"]), StateRecord)

    ops = CosmosOpsQueries(state)
    listed, after, unmapped = 0, None, []
    while True:
        page = ops.page(None, 10, after)
        listed += len(page.records)
        unmapped += page.unmapped
        if page.after is None:
            break
        after = page.after
    assert unmapped == []
    assert listed == sum(1 for d in documents if "processState" in d)

    latest = max(parse(d["updatedAt"]) for d in documents if isinstance(d.get("updatedAt"), str))
    ctx = AppContext(
        settings=Settings.from_env({}),
        clock=ManualClock(latest + timedelta(minutes=30)),
        states=states,
        orders=CosmosOrderStore(orders),
        sender=RecordingSender(),
        remote={},
        deferred=QueuesWithNothingDeferred(),
        deferrals=deferrals,
        ops=ops,
        health=health,
        rng=random.Random(1),
    )
    caplog.set_level(logging.INFO)
    report = run_supervisor(ctx, ScanState())
    assert report.failed == 0
    # the run is a catch-up: its sweep of stray documents selects none of what the app wrote (docs/supervisor.md)
    assert report.stray == 0
    failures = [r.getMessage() for r in caplog.records if getattr(r, "event", "") == "SupervisorPhaseFailed"]
    assert failures == []
    assert all(isinstance(parse(d["updatedAt"]), datetime) for d in documents if "processState" in d)
