"""A state document that does not map is skipped by every supervisor query (expired attempts, due
compensations, owed notifications), logged and alerted (once per problem: its query and how it is broken) at once:
never the failure of its page (supervisor/unmapped.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from contracts.names import OPERATOR_ALERTS_QUEUE, STATE_CONTAINER
from domain.states import ProcessState
from domain.timefmt import to_text
from tests.operations.harness import OPERATOR, OpsHarness

pytestmark = pytest.mark.cosmos


@pytest.fixture
def ops(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR)
    yield made
    made.close()


@pytest.mark.parametrize(
    "state",
    [ProcessState.PROCESSING, ProcessState.COMPENSATING, ProcessState.ERROR, ProcessState.COMPENSATION_FAILED],
    ids=lambda s: s.value,
)
def test_a_document_that_does_not_map_is_skipped_and_alerted_once_an_hour(
    ops: OpsHarness, cosmos_db: Any, state: ProcessState, caplog: pytest.LogCaptureFixture
) -> None:
    assert ops.ctx is not None
    ops.pending("o-bad")
    container = cosmos_db.get_container_client(STATE_CONTAINER)
    doc = container.read_item("o-bad", partition_key="o-bad")
    due = to_text(ops.clock.now() - timedelta(minutes=1))
    container.replace_item("o-bad", {**doc, "processState": state.value, "completeBy": due, "failureCount": "x"})

    ops.host.run_until(ops.clock.now() + timedelta(minutes=40))

    alerts = [json.loads(m.body) for m in ops.broker.peek(OPERATOR_ALERTS_QUEUE, 1000)]
    unreadable = [a for a in alerts if a["kind"] == "UnreadableRecord"]
    # one in 40 minutes of runs every 30 s
    assert [a["details"]["documents"] for a in unreadable] == [["o-bad"]], alerts
    assert "failureCount" in unreadable[0]["details"]["error"]
    events = [r for r in caplog.records if getattr(r, "event", None) == "UnmappedDocument"]
    assert events and all(getattr(r, "orderId", None) == "o-bad" for r in events)
    assert not [r for r in caplog.records if getattr(r, "event", None) == "SupervisorPhaseFailed"]
