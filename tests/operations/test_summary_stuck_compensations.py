"""The ops summary lists stuck compensation rounds as the supervisor finds them
(``domain.compensation.is_stuck_round``): a round that still holds its Compensating record
``SUPERVISOR_GRACE_SECONDS`` past its deadline is listed with its round, failed rounds and last error; a
round released to wait a backoff or an outage out is not, nor is a round still running (or only within the
grace past its deadline). Through the real runtime, as the other ops API tests."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from domain import compensation, outage
from domain.records import StateRecord
from domain.transitions import SUPERVISOR, begin_step
from tests.deadlines import JUST_PAST, just_past
from tests.operations.harness import OPERATOR, OpsHarness

pytestmark = pytest.mark.cosmos

GRACE = timedelta(seconds=15)  # the deployed SUPERVISOR_GRACE_SECONDS: a held round is stuck only this long past
UNDO_DEADLINE = timedelta(seconds=30)


# the supervisor's timer fires at 09:10 first (the harness starts at 09:00): the summary is read while a stuck round
# still holds its record (the supervisor would back it off, or release it to wait an outage out)
SUPERVISOR_SCHEDULE = "0 */10 * * * *"


def rounds_harness(cosmos_db: Any) -> OpsHarness:
    """An ops harness with the deployed grace and a supervisor that does not run in the test's first minutes."""
    return OpsHarness(
        cosmos_db,
        OPS_LOCAL_PRINCIPAL=OPERATOR,
        SUPERVISOR_GRACE_SECONDS=str(GRACE.seconds),
        SUPERVISOR_SCHEDULE=SUPERVISOR_SCHEDULE,
    )


@pytest.fixture
def ops(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = rounds_harness(cosmos_db)
    yield made
    made.close()


def _write(ops: OpsHarness, before: StateRecord, after: StateRecord) -> StateRecord:
    assert ops.ctx is not None
    return ops.ctx.states.replace(replace(after, version=before.version))


def round_running(ops: OpsHarness, order_id: str, *, failed_rounds: int = 0) -> StateRecord:
    """Inventory reserved, then compensated: a round (after ``failed_rounds`` stuck ones the supervisor backed off)
    holds the record, undoing the reservation until ``UNDO_DEADLINE`` from now."""
    assert ops.ctx is not None
    record = ops.processing(order_id)
    owner, now = str(record.locked_by), ops.clock.now()
    started = _write(ops, record, begin_step(record, owner, "reserve-inventory", "inventory", f"{owner}:r", now, now))
    done = compensation.complete_step_logged(started, owner, "reserve-inventory", {"ref": "r"}, now, now)
    record = _write(ops, started, done)
    record = _write(ops, record, compensation.enter_compensation(record, "ops", "customer cancelled", now))
    settings = ops.ctx.settings
    for _ in range(failed_rounds + 1):
        claimed = compensation.claim_compensation(
            record, now, settings.start_grace, settings.max_failures, SUPERVISOR, GRACE
        )
        record = _write(ops, record, claimed)
        if _ < failed_rounds:  # this round got stuck: counted, released until a backoff (none here) passed
            now = now + just_past(settings.start_grace + GRACE)
            ops.clock.advance_to(now)
            backed_off = compensation.back_off_stuck_round(
                record, now, timedelta(0), settings.max_failures, SUPERVISOR, GRACE
            )
            record = _write(ops, record, backed_off)
    owner = str(record.locked_by)
    seq = record.compensation[-1].seq
    began = compensation.begin_undo(record, owner, seq, f"{owner}:undo", now + UNDO_DEADLINE, now)
    return _write(ops, record, began)


def released_to_wait(ops: OpsHarness, order_id: str, until: timedelta) -> StateRecord:
    """A round whose undo met the inventory service's open circuit (it ends, due to the supervisor at once), released
    by the supervisor to wait the outage out, no round before ``until`` from now."""
    record = round_running(ops, order_id)
    now, seq = ops.clock.now(), record.compensation[-1].seq
    ended = _write(ops, record, compensation.release_undo(record, str(record.locked_by), seq, "open", now, GRACE))
    assert compensation.is_stuck_round(ended, now, GRACE)
    released = outage.wait_compensation_out(ended, now, now + until, "inventory", now, GRACE)
    return _write(ops, ended, released)


def test_a_stuck_round_is_listed_a_released_or_running_one_is_not(ops):
    stuck = round_running(ops, "o-stuck", failed_rounds=1)
    released_to_wait(ops, "o-waits", until=timedelta(minutes=10))
    released_to_wait(ops, "o-wait-over", until=timedelta(seconds=1))  # due again, for its next claim: not stuck
    ops.clock.advance_to(ops.clock.now() + timedelta(seconds=5))
    running = round_running(ops, "o-running")  # its undo's deadline is 5 s later than o-stuck's
    assert stuck.complete_by is not None and running.complete_by is not None

    ops.clock.advance_to(stuck.complete_by + GRACE - JUST_PAST)  # past o-stuck's deadline, within the grace
    status, body = ops.get("/api/ops/summary")
    assert status == 200 and body["stuckCompensations"] == [] and body["stuckCompensationsCount"] == 0, body
    assert body["counts"]["Compensating"] == 4
    # released to wait the outage out: listed as waiting, its next round not before completeBy
    assert [row["orderId"] for row in body["compensationsWaitingOutage"]] == ["o-wait-over", "o-waits"]
    assert body["compensationsWaitingOutageCount"] == 2
    waits = body["compensationsWaitingOutage"][1]
    assert waits["lastError"] == "waiting for inventory (circuit open)" and waits["waitingSince"] is not None

    ops.clock.advance_to(stuck.complete_by + just_past(GRACE))  # past it and the grace; o-running's not yet
    assert running.complete_by + GRACE > ops.clock.now()
    status, body = ops.get("/api/ops/summary")
    assert status == 200
    assert [row["orderId"] for row in body["stuckCompensations"]] == ["o-stuck"], body["stuckCompensations"]
    row = body["stuckCompensations"][0]
    # rounds are numbered on from the forward attempts (``claim_compensation``): attempt 1, then rounds 2 and 3
    assert row["round"] == stuck.attempt == 3 and stuck.locked_by == compensation.compensation_instance_id("o-stuck", 3)
    assert row["failureCount"] == 1 and row["maxRounds"] == ops.ctx.settings.max_failures
    assert row["processState"] == "Compensating" and row["undoService"] == "inventory"
    assert row["lastError"] == stuck.last_error and row["completeBy"] is not None
    assert body["stuckCompensationsCount"] == 1 and body["compensatingCapped"] is False
    assert [row["orderId"] for row in body["compensationsWaitingOutage"]] == ["o-wait-over", "o-waits"]
    # the released ones hold nothing: the supervisor claims their next round when due, it backs off no stuck one
    assert ops.ctx is not None
    for order_id in ("o-waits", "o-wait-over"):
        record = ops.ctx.states.get(order_id)
        assert record is not None and record.locked_by is None and record.outage_wait_since is not None

    ops.clock.advance_to(running.complete_by + just_past(GRACE))
    status, body = ops.get("/api/ops/summary")
    assert [row["orderId"] for row in body["stuckCompensations"]] == ["o-stuck", "o-running"]  # oldest deadline first


def test_the_stuck_rounds_are_capped_like_the_other_lists(ops, monkeypatch):
    monkeypatch.setattr("operations.views.SUMMARY_LIST_LIMIT", 2)
    rounds = [round_running(ops, f"o-cap-{n}") for n in range(3)]
    ops.clock.advance_to(max(r.complete_by for r in rounds if r.complete_by) + just_past(GRACE))
    status, body = ops.get("/api/ops/summary")
    assert status == 200 and len(body["stuckCompensations"]) == 2 and body["stuckCompensationsCount"] == 3
    assert body["compensatingCapped"] is False

    monkeypatch.setattr("operations.views.SUMMARY_COMPENSATING_LIMIT", 3)  # the summary reads only the oldest three
    released_to_wait(ops, "o-cap-waits", until=timedelta(minutes=10))
    status, body = ops.get("/api/ops/summary")
    assert status == 200 and body["stuckCompensationsCount"] == 3 and body["compensatingCapped"] is True
