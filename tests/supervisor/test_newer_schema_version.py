"""A document a newer version wrote with a higher ``schemaVersion`` (its way to say that an older version must not
read past a change of meaning its fields cannot carry) was read by this one as any other: its supervisor retried an
expired attempt of it, writing the record back under the older meaning. Now such a document does not fit
(``DocumentError`` on ``schemaVersion``): the supervisor leaves it untouched and logs it (``UnmappedDocument``,
paged per problem), as every reader does one it cannot read (docs/design.md, "Versions"). Over the real Cosmos SDK
(the local protocol server)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adapters.cosmos.mapping import DocumentError, from_document, to_document
from contracts.names import STATE_CONTAINER
from domain import transitions
from domain.circuit import DependencyHealth
from domain.dead_letters import DeadLetterCursor
from domain.deferral import DeferralDocument
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.supervisor.conftest import expired

pytestmark = pytest.mark.cosmos


def test_an_expired_attempt_of_a_newer_schema_is_left_untouched(make_ctx, states, clock, cosmos_db, caplog) -> None:
    caplog.set_level(logging.INFO)
    expired(states, "o1", clock, timedelta(minutes=5))
    container = cosmos_db.get_container_client(STATE_CONTAINER)
    item = container.read_item("o1", partition_key="o1")
    newer = {k: v for k, v in item.items() if not k.startswith("_")} | {"schemaVersion": 2}
    container.replace_item("o1", newer)
    report = run_supervisor(make_ctx(), ScanState())
    after = container.read_item("o1", partition_key="o1")
    assert {k: v for k, v in after.items() if not k.startswith("_")} == newer  # before: retried, rewritten
    assert report.to_terminate == []
    unmapped = [r for r in caplog.records if getattr(r, "event", "") == "UnmappedDocument"]
    assert unmapped and "schemaVersion" in unmapped[0].getMessage()


NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "record",
    [
        transitions.new_record("o1", None, NOW),
        DeferralDocument.empty("o1", NOW),
        DependencyHealth.fresh("payment", NOW),
        DeadLetterCursor.fresh("orders", NOW),
    ],
    ids=["state record", "deferral document", "health", "dead-letter cursor"],
)
def test_every_stored_kind_refuses_a_newer_schema_and_reads_its_own(record: Any) -> None:
    kind = type(record)
    document = to_document(record)
    assert from_document(kind, document) == record
    assert from_document(kind, {**document, "schemaVersion": 1}) == record
    with pytest.raises(DocumentError) as refused:
        from_document(kind, {**document, "schemaVersion": 2})
    assert refused.value.field == "schemaVersion"
