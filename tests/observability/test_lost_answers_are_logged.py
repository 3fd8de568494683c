"""A state write whose answer was lost after Cosmos DB committed it is still a logged transition (red team,
observability; the runs that found it: tests/observability/test_events_match_the_record.py).

Before, ``StateTransition`` was logged only from a write's own answer: a write found landed by a read-back
(``WriteConfirmed``) or by its activity's retry (``WriteAlreadyMade``) was never one, so an escalation to ``Error``
whose answer was lost was missed by the failed-orders alert (``infra/modules/alerts.bicep`` counts
``StateTransition`` events to ``Error``), and the ``orders.state_transitions`` counter was short."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.errors import StoreOutcomeUnknown
from adapters.cosmos.state_store import update_fenced, update_once, update_once_or_reread
from domain import transitions
from domain.records import StateRecord
from observability.events import app_event
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.contexts import context_with
from tests.lost_writes import FlakyStates

pytestmark = pytest.mark.cosmos
GRACE = timedelta(seconds=30)


class LosingStates(FlakyStates):
    """The real store; the next ``lose`` replaces commit, then answer ``StoreOutcomeUnknown`` (a timeout, a reset
    connection: what ``adapters.cosmos.errors.mapped_errors`` makes of them)."""

    lost_error = StoreOutcomeUnknown

    def __init__(self, inner: Any, lose: int = 1, fail_reads: int = 0) -> None:
        super().__init__(inner)
        self.lose_all = lose
        self.fail_reads = fail_reads  # the next N reads fail (throttled past the SDK's retries)

    def replace(self, record: StateRecord) -> StateRecord:
        self.lose.setdefault(record.order_id, self.lose_all)
        return super().replace(record)


def moves(caplog: pytest.LogCaptureFixture, name: str = "StateTransition") -> list[tuple[Any, ...]]:
    return [
        (r.orderId, r.fromState, r.toState, r.transition, r.attempt)  # type: ignore[attr-defined]
        for r in caplog.records
        if getattr(r, "event", None) == name
    ]


def claimed(states: Any, clock: Any, order_id: str = "o1") -> StateRecord:
    states.create(transitions.new_record(order_id, None, clock.now()))
    return update_once(states, states.get(order_id), lambda r: transitions.claim(r, clock.now(), GRACE))


def test_a_fenced_write_found_landed_after_its_lost_answer_is_its_transition(app_context, clock, caplog):
    claimed(app_context.states, clock)
    states = LosingStates(app_context.states)
    deadline = clock.now() + GRACE
    with caplog.at_level(logging.INFO):
        written = update_fenced(
            states,
            "o1",
            "o1:1",
            lambda r: transitions.begin_step(r, "o1:1", "reserve-inventory", "inventory", "q", deadline, clock.now()),
        )
    assert written.current_step == "reserve-inventory" and written.version is not None
    assert [h.event for h in app_context.states.get("o1").history].count("StepStarted") == 1  # made once
    assert moves(caplog) == [("o1", "Processing", "Processing", "StepStarted", 1)]


def test_a_fenced_write_whose_read_back_fails_is_logged_unconfirmed_and_fails_as_before(app_context, clock, caplog):
    """Found by the checker in a lost-restarts-locks run (8 % lost answers, 3 % throttling): a ``Processed`` whose
    answer was lost and whose read-back was throttled had no event at all; its activity's retry found it made."""
    claimed(app_context.states, clock)  # the claim's version is the process's own: the write starts from it
    states = LosingStates(app_context.states, fail_reads=1)  # the read-back
    deadline = clock.now() + GRACE
    with caplog.at_level(logging.INFO), pytest.raises(StoreOutcomeUnknown):
        update_fenced(
            states,
            "o1",
            "o1:1",
            lambda r: transitions.begin_step(r, "o1:1", "reserve-inventory", "inventory", "q", deadline, clock.now()),
        )
    assert moves(caplog) == []
    assert moves(caplog, "StateWriteUnconfirmed") == [("o1", "Processing", "Processing", "StepStarted", 1)]


def test_an_escalation_whose_answer_was_lost_reaches_the_failed_orders_query(app_context, clock, caplog):
    """The ordersFailed rule: ``event == "StateTransition" and toState in ("Error", "CompensationFailed")``."""
    record = transitions.claim(transitions.new_record("o1", "submitter-q", clock.now()), clock.now(), timedelta(0))
    app_context.states.create(replace(record, failure_count=2))
    clock.advance(timedelta(seconds=1))
    ctx = context_with(app_context, states=LosingStates(app_context.states))
    with caplog.at_level(logging.INFO):
        run_supervisor(ctx, ScanState())
    assert app_context.states.get("o1").process_state.value == "Error"
    assert [m for m in moves(caplog) if m[2] == "Error" and m[1] != "Error"] == [
        ("o1", "Processing", "Error", "Escalated", 1)
    ]


def test_a_claim_confirmed_by_its_read_back_is_its_transition(app_context, clock, caplog):
    app_context.states.create(transitions.new_record("o1", None, clock.now()))
    pending = app_context.states.get("o1")
    with caplog.at_level(logging.INFO):
        update_once_or_reread(
            LosingStates(app_context.states), pending, lambda r: transitions.claim(r, clock.now(), GRACE)
        )
    assert [r.event for r in caplog.records if getattr(r, "event", None)] == ["WriteConfirmed", "StateTransition"]  # type: ignore[attr-defined]
    assert moves(caplog) == [("o1", "Pending", "Processing", "Claimed", 1)]


def test_a_write_nothing_reads_back_is_logged_as_unconfirmed_with_its_move(app_context, clock, caplog):
    record = claimed(app_context.states, clock)
    clock.advance(GRACE)  # the attempt expired
    with caplog.at_level(logging.INFO), pytest.raises(StoreOutcomeUnknown):
        update_once(
            LosingStates(app_context.states),
            record,
            lambda r: transitions.supervisor_retry(r, "o1:1", clock.now(), 3, timedelta(0)),
        )
    assert moves(caplog) == []  # not known to have happened
    [unconfirmed] = [r for r in caplog.records if getattr(r, "event", None) == "StateWriteUnconfirmed"]
    assert unconfirmed.levelno == logging.WARNING
    assert moves(caplog, "StateWriteUnconfirmed") == [("o1", "Processing", "Pending", "RetryScheduled", 1)]


def test_an_event_about_an_instance_names_its_order(caplog):
    with caplog.at_level(logging.INFO):
        app_event("EventRaised", "raised", instanceId="ord-7:compensate:2")
        app_event("SupervisorTerminateSkipped", "skipped", instanceId="ord-7:3", runtimeStatus="Completed")
        app_event("EventRaised", "raised", instanceId="not an instance id")
        app_event("AlertHandedOver", "handed", instanceId="deliver-alert-x", orderId="ord-8")
    assert [getattr(r, "orderId", None) for r in caplog.records] == ["ord-7", "ord-7", None, "ord-8"]
