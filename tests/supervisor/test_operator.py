"""Operator resubmit: Error -> Pending with the failure count reset and who/why in the history."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from adapters.cosmos.state_store import CosmosStateStore
from domain import transitions
from domain.compensation import enter_compensation
from domain.errors import IllegalTransition
from domain.states import ProcessState
from orchestrators.starter import sweep
from supervisor.operator import RecordNotFound, compensate_action, resubmit_action, resubmit_order
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.orchestrators.support import sample_order
from tests.supervisor.conftest import expired

pytestmark = pytest.mark.cosmos


class InterferingStore:
    """The real store, with another writer changing the record just before this caller's first
    replace (so that replace gets a real 412 from Cosmos)."""

    def __init__(self, store: CosmosStateStore, interfere) -> None:
        self._store = store
        self._interfere = interfere
        self.replaces = 0

    def __getattr__(self, name):
        return getattr(self._store, name)

    def replace(self, record):
        self.replaces += 1
        if self.replaces == 1:
            self._interfere()
        return self._store.replace(record)


def _escalated(make_ctx, states, clock):
    ctx = make_ctx(MAX_FAILURES="1")
    expired(states, "o1", clock, timedelta(seconds=5))
    run_supervisor(ctx, ScanState())
    record = states.get("o1")
    assert record is not None and record.process_state is ProcessState.ERROR
    return ctx


def test_resubmit_resets_the_failures_and_records_who_and_why(make_ctx, states, clock):
    ctx = _escalated(make_ctx, states, clock)
    clock.advance(timedelta(minutes=5))

    record = resubmit_order(ctx, "o1", "alice@contoso.com", "payment provider fixed")

    assert (record.process_state, record.failure_count, record.locked_by) == (ProcessState.PENDING, 0, None)
    assert record.complete_by is None and record.last_error is None
    entry = record.history[-1]
    assert (entry.event, entry.by, entry.detail, entry.at) == (
        "Resubmitted",
        "alice@contoso.com",
        "payment provider fixed",
        clock.now(),
    )
    ctx.counts.clear()
    ctx.orders.create_or_verify(sample_order("o1"))  # the claim reads it into the attempt's plan
    [claim] = sweep(ctx)
    assert (claim.attempt, claim.instance_id) == (2, "o1:2")


def test_only_an_error_record_can_be_resubmitted(make_ctx, states, clock):
    ctx = make_ctx()
    states.create(transitions.new_record("o2", None, clock.now()))
    with pytest.raises(IllegalTransition):
        resubmit_order(ctx, "o2", "alice", "retry")
    with pytest.raises(RecordNotFound):
        resubmit_order(ctx, "missing", "alice", "retry")
    with pytest.raises(ValueError, match="reason"):
        resubmit_order(ctx, "o2", "alice", " ")


def test_a_lost_race_on_a_record_still_in_error_is_retried_once(make_ctx, states, clock):
    ctx = _escalated(make_ctx, states, clock)

    def touch():  # e.g. a compensation log entry written meanwhile: still Error
        current = states.get("o1")
        assert current is not None
        states.replace(current.with_changes(clock.now(), "Noted", "someone-else"))

    ctx = replace(ctx, states=InterferingStore(states, touch))

    record = resubmit_order(ctx, "o1", "alice", "retry")

    assert ctx.states.replaces == 2
    assert record.process_state is ProcessState.PENDING
    assert [h.event for h in record.history][-2:] == ["Noted", "Resubmitted"]


def test_a_lost_race_to_another_resubmit_is_not_repeated(make_ctx, states, clock):
    ctx = _escalated(make_ctx, states, clock)

    def other_operator():
        current = states.get("o1")
        assert current is not None
        states.replace(transitions.resubmit(current, "bob", "first", clock.now()))

    ctx = replace(ctx, states=InterferingStore(states, other_operator))

    with pytest.raises(IllegalTransition):
        resubmit_order(ctx, "o1", "alice", "second")
    record = states.get("o1")
    assert record is not None
    assert [h.by for h in record.history if h.event == "Resubmitted"] == ["bob"]


def test_the_same_resubmit_posted_again_is_repeated_and_another_operators_is_refused(make_ctx, states, clock):
    ctx = _escalated(make_ctx, states, clock)
    first = resubmit_action(ctx, "o1", "alice", "retry")
    assert not first.repeated and first.record.process_state is ProcessState.PENDING
    again = resubmit_action(ctx, "o1", "alice", "retry")  # posted again: its first answer was lost
    assert again.repeated and again.record.version == first.record.version  # nothing written
    with pytest.raises(IllegalTransition):  # another reason is another resubmit: it would be recorded nowhere
        resubmit_order(ctx, "o1", "alice", "retry, with the ticket number")
    with pytest.raises(IllegalTransition):
        resubmit_order(ctx, "o1", "bob", "retry")
    record = states.get("o1")
    assert record is not None
    assert [h.by for h in record.history if h.event == "Resubmitted"] == ["alice"]


def test_a_compensate_losing_a_race_to_a_write_that_leaves_the_record_in_error_is_retried_once(make_ctx, states, clock):
    """Found by the red team (session 32) on 36c310f: resubmit and cancel judge again on a fresh read
    when another write came first, compensate did not: a write that leaves the order in Error (the
    supervisor acknowledging the alert and status it owed, a note) between the operator's read and
    write made compensate a 409 "changed while you acted", though the order could still be compensated."""
    ctx = _escalated(make_ctx, states, clock)

    def touch():
        current = states.get("o1")
        assert current is not None
        states.replace(current.with_changes(clock.now(), "Noted", "someone-else"))

    ctx = replace(ctx, states=InterferingStore(states, touch))

    taken = compensate_action(ctx, "o1", "alice", "undo it")

    assert ctx.states.replaces == 2 and not taken.repeated
    assert taken.record.process_state is ProcessState.COMPENSATING
    assert [(h.event, h.by) for h in taken.record.history][-2:] == [
        ("Noted", "someone-else"),
        ("CompensationRequested", "alice"),
    ]


def _compensated_by(states, clock, operator):
    def write():
        current = states.get("o1")
        assert current is not None
        states.replace(enter_compensation(current, operator, "undo it", clock.now()))

    return write


def test_a_compensate_losing_a_race_to_another_operators_is_refused(make_ctx, states, clock):
    ctx = _escalated(make_ctx, states, clock)
    racing = replace(ctx, states=InterferingStore(states, _compensated_by(states, clock, "bob")))
    with pytest.raises(IllegalTransition, match="only an Error or CompensationFailed"):
        compensate_action(racing, "o1", "alice", "undo it")
    record = states.get("o1")
    assert record is not None
    assert [h.by for h in record.history if h.event == "CompensationRequested"] == ["bob"]


def test_a_compensate_losing_a_race_to_the_same_one_posted_twice_is_repeated(make_ctx, states, clock):
    ctx = _escalated(make_ctx, states, clock)
    racing = replace(ctx, states=InterferingStore(states, _compensated_by(states, clock, "alice")))
    taken = compensate_action(racing, "o1", "alice", "undo it")
    assert taken.repeated and taken.record.process_state is ProcessState.COMPENSATING
    assert [h.by for h in taken.record.history if h.event == "CompensationRequested"] == ["alice"]
