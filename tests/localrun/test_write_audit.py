"""The runner's write audit: a write by an attempt that does not hold lockedBy is counted as
stale, from the versions Cosmos returned, whatever the app believed."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

import pytest

from adapters.cosmos.state_store import CosmosStateStore
from contracts.names import STATE_CONTAINER
from domain import transitions
from domain.states import ProcessState
from localrun.audit import Audit, AuditedStateStore, CosmosFaults
from localrun.profile import Profile

pytestmark = pytest.mark.cosmos


@pytest.fixture
def audited(cosmos_db, clock):
    audit = Audit()
    store = AuditedStateStore(
        CosmosStateStore(cosmos_db.get_container_client(STATE_CONTAINER)),
        clock,
        CosmosFaults(Profile(), random.Random(1), audit),
        audit,
    )
    return store, audit


def test_an_owners_writes_are_not_stale(audited, clock):
    store, audit = audited
    store.create(transitions.new_record("o1", None, clock.now()))
    claimed = store.replace(
        replace(transitions.claim(store.get("o1"), clock.now(), timedelta(seconds=60)), version=store.get("o1").version)
    )
    began = transitions.begin_step(claimed, "o1:1", "reserve-inventory", "inventory", "r", clock.now(), clock.now())
    store.replace(replace(began, version=claimed.version))
    assert audit.stale_writes == []
    assert [t.event for t in audit.transitions] == ["Received", "Claimed", "StepStarted"]


def test_a_write_by_an_attempt_that_lost_the_lock_is_counted(audited, clock):
    store, audit = audited
    store.create(transitions.new_record("o1", None, clock.now()))
    first = store.get("o1")
    claimed = store.replace(replace(transitions.claim(first, clock.now(), timedelta(0)), version=first.version))
    clock.advance(timedelta(seconds=1))
    reset = store.replace(
        replace(transitions.supervisor_retry(claimed, "o1:1", clock.now(), 3, timedelta(0)), version=claimed.version)
    )
    # attempt 1 writes over the supervisor's reset without checking ownership (what fencing prevents)
    stale = transitions.begin_step(
        replace(claimed, version=None),
        "o1:1",
        "reserve-inventory",
        "inventory",
        "r",
        clock.now(),
        clock.now(),
    )
    store.replace(replace(stale, version=reset.version, process_state=claimed.process_state))
    assert len(audit.stale_writes) == 1
    assert "o1:1 wrote while lockedBy=None" in audit.stale_writes[0]


def test_a_record_created_claimed_is_logged_as_its_two_moves_and_its_owner_may_write(audited, clock):
    store, audit = audited
    created = store.create(transitions.new_claimed_record("o1", None, clock.now(), timedelta(seconds=60)))
    began = transitions.begin_step(created, "o1:1", "reserve-inventory", "inventory", "r", clock.now(), clock.now())
    store.replace(replace(began, version=created.version))
    assert audit.stale_writes == []
    moves = [(t.before, t.after, t.event, t.by) for t in audit.transitions]
    assert moves == [
        (None, ProcessState.PENDING, "Received", "submission"),
        (ProcessState.PENDING, ProcessState.PROCESSING, "Claimed", "starter"),
        (ProcessState.PROCESSING, ProcessState.PROCESSING, "StepStarted", "o1:1"),
    ]
    assert audit.ops["cosmos_writes"] == 2


@pytest.mark.parametrize(
    "change",
    [
        {"attempt": 2, "locked_by": "o1:2"},  # no create can claim a later attempt
        {"locked_by": "o1:7"},  # owned by an instance that is not attempt 1
        {"failure_count": 1},
    ],
    ids=["attempt-2", "wrong-owner", "failures"],
)
def test_a_record_created_in_any_other_state_is_counted(audited, clock, change):
    store, audit = audited
    store.create(replace(transitions.new_claimed_record("o1", None, clock.now(), timedelta(seconds=60)), **change))
    assert len(audit.stale_writes) == 1
    assert "neither new nor claimed for attempt 1" in audit.stale_writes[0]


def test_the_audit_keeps_a_few_facts_of_the_current_version_not_the_records(audited, clock):
    """Memory grows with the orders in flight: the audit remembers, per version Cosmos returned and
    no write has replaced yet, who held the lock (and the state and deadline), never the record with
    its whole history; a replaced version is forgotten (a conditional replace cannot match it again)."""
    import gc

    from domain.records import StateRecord

    store, audit = audited
    for order in ("o1", "o2"):
        store.create(transitions.new_record(order, None, clock.now()))
        first = store.get(order)
        claimed = store.replace(replace(transitions.claim(first, clock.now(), timedelta(0)), version=first.version))
        owner = f"{order}:1"
        began = transitions.begin_step(claimed, owner, "reserve-inventory", "inventory", "r", clock.now(), clock.now())
        store.replace(replace(began, version=claimed.version))
        store.get(order)
    held = [value for name, value in vars(store).items() if name not in {"_inner", "_clock", "_faults", "_audit"}]
    seen: dict[int, object] = {}
    stack: list[object] = list(held)
    while stack:
        item = stack.pop()
        if id(item) not in seen and not isinstance(item, type):
            seen[id(item)] = item
            stack.extend(gc.get_referents(item))
    assert not [o for o in seen.values() if isinstance(o, StateRecord)]
    current = {order: store.get(order) for order in ("o1", "o2")}
    assert {v.version for v in current.values()} == set(store._versions)  # one version per order
    assert audit.stale_writes == []
    # the facts still tell a stale write: the supervisor resets o1, then attempt o1:1 writes over it
    clock.advance(timedelta(seconds=1))
    reset = store.replace(
        replace(
            transitions.supervisor_retry(current["o1"], "o1:1", clock.now(), 3, timedelta(0)),
            version=current["o1"].version,
        )
    )
    stale = transitions.complete_step(current["o1"], "o1:1", "reserve-inventory", {}, clock.now(), clock.now())
    store.replace(replace(stale, version=reset.version))
    assert len(audit.stale_writes) == 1 and "o1:1 wrote while lockedBy=None" in audit.stale_writes[0]


def test_the_audit_knows_which_failure_records_still_owe_their_alert_and_status(audited, clock):
    """The run does not end while one does (``localrun/simulation.py``: the supervisor's owed sweep is still
    due to send them): it ended right after an escalation whose sends failed (harsh refusal profile, 80
    orders, seed 5), and the report counted a Failed status the next supervisor run would have sent as
    missing (``missing_statuses``, ``silent_failures``)."""
    from supervisor.owed import DELIVERED, owe_notifications

    store, audit = audited
    store.create(transitions.new_record("o1", None, clock.now()))
    first = store.get("o1")
    claimed = store.replace(replace(transitions.claim(first, clock.now(), timedelta(0)), version=first.version))
    clock.advance(timedelta(seconds=1))
    escalated = owe_notifications(transitions.supervisor_retry(claimed, "o1:1", clock.now(), 1, timedelta(0)))
    written = store.replace(replace(escalated, version=claimed.version))
    assert written.process_state is ProcessState.ERROR and audit.owing == {"o1"}

    acknowledged = written.with_changes(clock.now(), DELIVERED, "supervisor", "sent", complete_by=None)
    store.replace(replace(acknowledged, version=written.version))
    assert audit.owing == set()
