"""A Compensated order's ``lastError`` says why it was compensated, not what a round met on the way: a
round that waited out an open circuit left "waiting for payment (circuit open)" on the settled order,
and the console showed a cancelled order as if it were still waiting."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from domain import compensation as c
from domain import outage
from domain import transitions as t
from domain.circuit import waiting_reason
from domain.records import HistoryEntry, StateRecord
from domain.states import ProcessState

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(seconds=60)
REASON = "cancelled by the client: changed my mind"


def _charged() -> StateRecord:
    record = t.claim(t.new_record("o-1", None, NOW), NOW, GRACE)
    assert record.locked_by is not None
    owner = record.locked_by
    begun = t.begin_step(record, owner, "reserve-inventory", "inventory", "r1", NOW + GRACE, NOW)
    return c.complete_step_logged(begun, owner, "reserve-inventory", {"reservationId": "res-1"}, NOW + GRACE, NOW)


def _claimed_round(record: StateRecord, at: datetime) -> StateRecord:
    return c.claim_compensation(record, at, GRACE, max_rounds=5, by="supervisor")


def _undo_all(record: StateRecord, at: datetime) -> StateRecord:
    assert record.locked_by is not None
    for entry in record.compensation:
        record = c.record_undo(record, record.locked_by, entry.seq, at + GRACE, at, {})
    return record


def test_a_round_that_waited_out_an_outage_leaves_the_compensation_s_reason():
    entered = c.enter_compensation(_charged(), "client", REASON, NOW)
    first = _claimed_round(entered, NOW)
    later = NOW + timedelta(minutes=2)
    waiting = outage.wait_compensation_out(first, later, later + timedelta(minutes=5), "inventory", later)
    assert waiting.last_error == waiting_reason("inventory")
    resumed = _claimed_round(waiting, later + timedelta(minutes=5))
    assert resumed.locked_by is not None
    done = c.finish_compensation(_undo_all(resumed, later), resumed.locked_by, later + timedelta(minutes=6))
    assert done.process_state is ProcessState.COMPENSATED
    assert done.last_error == REASON


def test_the_newest_request_is_the_cause():
    entered = c.enter_compensation(_charged(), "client", REASON, NOW)
    later = "cancelled by operator ops@example.com: duplicate order"
    noted = entered.with_changes(NOW, c.COMPENSATION_REQUESTED, "ops@example.com", later)
    assert c.compensation_cause(noted) == later


def test_a_cause_gone_from_the_bounded_history_leaves_no_stale_error():
    entered = _claimed_round(c.enter_compensation(_charged(), "client", REASON, NOW), NOW)
    assert entered.locked_by is not None
    crowded = entered.with_changes(NOW, "UndoStarted", entered.locked_by, "entry 1", last_error=waiting_reason("x"))
    crowded = StateRecord(
        **{
            **{f: getattr(crowded, f) for f in StateRecord.__dataclass_fields__},
            "history": [HistoryEntry(at=NOW, event="UndoStarted", by="x")] * 50,
        }
    )
    assert c.compensation_cause(crowded) is None
    done = c.finish_compensation(_undo_all(crowded, NOW), crowded.locked_by or "", NOW)
    assert done.last_error is None
