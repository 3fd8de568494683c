"""Red team (deadlines): the ops summary's "expired" list (``GET /api/ops/summary``, the console's "Oldest
expired") is what the supervisor would recover: a record its attempt still holds is expired only
``SUPERVISOR_GRACE_SECONDS`` after its ``completeBy`` (``domain.transitions.is_expired``). Before, the summary
listed every Processing record whose ``completeBy`` had passed: with the Bicep's 15 s, for those 15 s an operator
saw as expired, "the supervisor recovers it on its own", an attempt the supervisor was still leaving to its owner."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from contracts.names import STATE_CONTAINER
from tests.operations.harness import OPERATOR, OpsHarness

pytestmark = pytest.mark.cosmos


def _expired(ops: OpsHarness) -> list[str]:
    status, body = ops.get("/api/ops/summary")
    assert status == 200
    assert body["expiredCount"] == len(body["expired"])
    return [row["orderId"] for row in body["expired"]]


def _held_by(cosmos_db: Any) -> Any:
    return cosmos_db.get_container_client(STATE_CONTAINER).read_item("o-held", "o-held")["lockedBy"]


def test_a_held_attempt_is_expired_in_the_summary_when_the_supervisor_would_take_it(cosmos_db):
    ops = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR, SUPERVISOR_GRACE_SECONDS="15")
    try:
        record = ops.processing("o-held")
        assert record.complete_by is not None
        for seconds in (1, 5, 14):
            ops.clock.advance_to(record.complete_by + timedelta(seconds=seconds))
            assert _expired(ops) == []  # the supervisor still leaves it to its attempt
            assert _held_by(cosmos_db) == record.locked_by
        ops.clock.advance_to(record.complete_by + timedelta(seconds=15))
        # due: listed while its attempt still holds it, gone once the runner's supervisor took it
        assert _expired(ops) == (["o-held"] if _held_by(cosmos_db) is not None else [])
    finally:
        ops.close()
