"""``outageWaitSince`` (when an order began waiting an outage out, bounded by
MAX_OUTAGE_WAIT_MINUTES) is cleared as soon as the order moves on: a step or an undo that succeeded.
A later outage is then a new wait with its own bound, not the rest of the old one."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from domain import transitions
from domain.compensation import begin_undo, claim_compensation, complete_step_logged, enter_compensation, record_undo
from domain.records import StateRecord

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GRACE = timedelta(seconds=60)


def waited_and_claimed() -> StateRecord:
    record = transitions.claim(transitions.new_record("o1", None, T0), T0, GRACE)
    owner = record.locked_by or ""
    record = transitions.begin_step(record, owner, "reserve-inventory", "inventory", "r1", T0 + GRACE, T0)
    later = T0 + GRACE + timedelta(seconds=1)
    record = transitions.wait_out_outage(record, owner, later, later + timedelta(seconds=30), "inventory", later)
    assert record.outage_wait_since == later
    again = later + timedelta(seconds=30)
    claimed = transitions.claim(record, again, GRACE)
    assert claimed.outage_wait_since == later  # a new attempt is still the same wait
    return claimed


def test_a_step_that_succeeds_ends_the_wait() -> None:
    record = waited_and_claimed()
    owner = record.locked_by or ""
    now = record.updated_at
    record = transitions.begin_step(record, owner, "reserve-inventory", "inventory", "r2", now + GRACE, now)
    done = complete_step_logged(record, owner, "reserve-inventory", {"reservationId": "res-1"}, now + GRACE, now)
    assert done.outage_wait_since is None


def test_an_undo_that_succeeds_ends_the_wait_of_its_round() -> None:
    record = waited_and_claimed()
    owner = record.locked_by or ""
    now = record.updated_at
    record = transitions.begin_step(record, owner, "reserve-inventory", "inventory", "r2", now + GRACE, now)
    record = complete_step_logged(record, owner, "reserve-inventory", {"reservationId": "res-1"}, now + GRACE, now)
    record = enter_compensation(record, "supervisor", "payment refused", now, owner=owner)
    record = claim_compensation(record, now, GRACE, 5, "supervisor")
    # the round waited for inventory (supervisor/compensation_rounds.py) and was claimed again
    record = replace(record, outage_wait_since=now)
    round_owner = record.locked_by or ""
    seq = record.compensation[0].seq
    record = begin_undo(record, round_owner, seq, "u1", now + GRACE, now)
    assert record.outage_wait_since == now
    undone = record_undo(record, round_owner, seq, now + GRACE, now + timedelta(seconds=1))
    assert undone.outage_wait_since is None
