"""An undo of unknown outcome goes to the agents the step was started with (``StepState.agents``), not to
every agent the step could use: a fallback the step never went to took nothing, and asking it anyway turns
its outage into a failed compensation. A record from before the field keeps today's answer: every agent."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from adapters.cosmos.mapping import from_document, to_document
from domain import compensation as c
from domain import transitions as t
from domain.records import StateRecord

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(seconds=60)
DEADLINE = NOW + timedelta(minutes=1)


def _claimed() -> StateRecord:
    return t.claim(t.new_record("o-1", None, NOW), NOW, GRACE)


def _begin(record: StateRecord, agent: str, tries: int = 1) -> StateRecord:
    assert record.locked_by is not None
    return t.begin_step(record, record.locked_by, "charge-payment", agent, f"r{tries}", DEADLINE, NOW)


def _undo_agents(record: StateRecord) -> list[str]:
    """The agents asked to undo the charge, in the order the round asks them (newest entry first)."""
    entered = c.enter_compensation(record, "client", "changed my mind", NOW)
    unknown = [e for e in entered.compensation if e.step == "charge-payment" and e.data.get("outcomeUnknown")]
    return [e.agent for e in sorted(unknown, key=lambda e: e.seq, reverse=True)]


def test_a_charge_sent_only_to_its_agent_is_undone_there_only():
    record = _begin(_claimed(), "payment")
    assert record.steps["charge-payment"].agents == ["payment"]
    assert _undo_agents(record) == ["payment"]


def test_a_charge_that_went_to_the_fallback_is_undone_at_both_the_last_first():
    record = _begin(_begin(_claimed(), "payment"), "payment-backup", tries=2)  # the primary refused it
    assert _undo_agents(record) == ["payment-backup", "payment"]
    # a later try back at the primary (an operator's "retry") still remembers the fallback
    again = _begin(record, "payment", tries=3)
    assert again.steps["charge-payment"].agents == ["payment", "payment-backup"]
    assert _undo_agents(again) == ["payment", "payment-backup"]


def test_agents_are_kept_across_attempts():
    first = _begin(_begin(_claimed(), "payment"), "payment-backup", tries=2)
    assert first.locked_by is not None
    released = t.release_for_retry(first, first.locked_by, "charge-payment", "timeout", NOW)
    retried = t.supervisor_retry(released, first.locked_by, NOW, max_failures=5, backoff=timedelta(0))
    second = t.claim(retried, NOW, GRACE)
    resumed = _begin(second, "payment-backup")
    assert resumed.attempt == 2
    assert _undo_agents(resumed) == ["payment-backup", "payment"]


def test_an_agent_named_but_never_started_is_not_asked():
    # the supervisor names the fallback for the next attempt (a review's "alternative" left to it), which
    # never began the step there: only the primary can have taken the charge
    record = _begin(_claimed(), "payment")
    state = record.steps["charge-payment"]
    named = replace(record, steps={**record.steps, "charge-payment": replace(state, agent="payment-backup")})
    assert _undo_agents(named) == ["payment"]


def test_a_record_from_before_the_field_is_undone_at_every_agent():
    record = _begin(_claimed(), "payment")
    document = to_document(record)
    del document["steps"]["charge-payment"]["agents"]
    old = from_document(StateRecord, document)
    assert old.steps["charge-payment"].agents is None
    assert _undo_agents(old) == ["payment", "payment-backup"]
    # and it stays unknown when the step is started again
    assert _undo_agents(_begin(old, "payment", tries=2)) == ["payment", "payment-backup"]


def test_agents_round_trip_through_the_document():
    record = _begin(_begin(_claimed(), "payment"), "payment-backup", tries=2)
    document = to_document(record)
    assert document["steps"]["charge-payment"]["agents"] == ["payment", "payment-backup"]
    assert from_document(StateRecord, document) == record
