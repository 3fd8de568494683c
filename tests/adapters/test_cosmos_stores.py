"""The Cosmos adapters against the Cosmos DB protocol server: conditional replaces, fencing,
create-or-verify."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from adapters.cosmos.errors import AlreadyExists, EtagMismatch
from adapters.cosmos.order_store import CreateOutcome
from adapters.cosmos.state_store import CosmosStateStore, update_fenced, update_once
from domain import transitions
from domain.errors import FencingLost, IllegalTransition
from domain.states import ProcessState
from tests.fakes import StateStoreWithAConcurrentWriter

pytestmark = pytest.mark.cosmos
GRACE = timedelta(seconds=60)


def test_get_of_a_missing_record_is_none(app_context):
    assert app_context.states.get("nope") is None
    assert app_context.orders.get("nope") is None


def test_create_twice_is_refused(app_context, clock):
    record = transitions.new_record("o1", None, clock.now())
    app_context.states.create(record)
    with pytest.raises(AlreadyExists):
        app_context.states.create(record)


def test_two_claimers_race_and_exactly_one_wins(app_context, clock):
    app_context.states.create(transitions.new_record("o1", None, clock.now()))
    first = app_context.states.get("o1")
    second = app_context.states.get("o1")  # both read the same version
    winner = update_once(app_context.states, first, lambda r: transitions.claim(r, clock.now(), GRACE))
    with pytest.raises(EtagMismatch):
        update_once(app_context.states, second, lambda r: transitions.claim(r, clock.now(), GRACE))
    stored = app_context.states.get("o1")
    assert stored.locked_by == winner.locked_by == "o1:1"
    assert stored.attempt == 1


def test_a_stale_attempts_fenced_write_is_refused(app_context, clock):
    app_context.states.create(transitions.new_record("o1", None, clock.now()))
    r = app_context.states.get("o1")
    update_once(app_context.states, r, lambda x: transitions.claim(x, clock.now(), GRACE))
    # the supervisor retries attempt 1, the starter claims attempt 2
    clock.advance(GRACE)
    r = app_context.states.get("o1")
    update_once(app_context.states, r, lambda x: transitions.supervisor_retry(x, "o1:1", clock.now(), 3, timedelta(0)))
    r = app_context.states.get("o1")
    update_once(app_context.states, r, lambda x: transitions.claim(x, clock.now(), GRACE))
    before = app_context.states.get("o1")
    with pytest.raises(FencingLost) as lost:
        update_fenced(
            app_context.states,
            "o1",
            "o1:1",
            lambda x: transitions.complete_step(x, "o1:1", "reserve-inventory", {}, clock.now(), clock.now()),
        )
    assert lost.value.actual == "o1:2"
    assert app_context.states.get("o1").version == before.version  # untouched


def test_fenced_write_rereads_on_a_412_while_still_the_owner(app_context, clock):
    app_context.states.create(transitions.new_record("o1", None, clock.now()))
    r = app_context.states.get("o1")
    update_once(app_context.states, r, lambda x: transitions.claim(x, clock.now(), GRACE))
    # someone touches the record between our read and our replace
    states = StateStoreWithAConcurrentWriter(app_context.states, lambda current: replace(current, last_error="touched"))
    deadline = clock.now() + GRACE
    written = update_fenced(
        states,
        "o1",
        "o1:1",
        lambda x: transitions.begin_step(x, "o1:1", "reserve-inventory", "inventory", "q", deadline, clock.now()),
    )
    assert states.raced
    assert written.current_step == "reserve-inventory"
    assert written.last_error == "touched"  # the re-read kept the concurrent change


def test_fenced_write_stops_when_the_412_was_a_takeover(app_context, clock):
    app_context.states.create(transitions.new_record("o1", None, clock.now()))
    r = app_context.states.get("o1")
    update_once(app_context.states, r, lambda x: transitions.claim(x, clock.now(), GRACE))
    clock.advance(GRACE)

    def supervisor_moves_first(current):  # the supervisor's conditional update lands first
        if current.locked_by != "o1:1":
            return None
        moved = transitions.supervisor_retry(current, "o1:1", clock.now(), 3, timedelta(0))
        return replace(moved, version=current.version)

    states = StateStoreWithAConcurrentWriter(app_context.states, supervisor_moves_first)
    deadline = clock.now() + GRACE
    with pytest.raises(FencingLost):
        update_fenced(
            states,
            "o1",
            "o1:1",
            lambda x: transitions.begin_step(x, "o1:1", "reserve-inventory", "inventory", "q", deadline, clock.now()),
        )
    assert app_context.states.get("o1").process_state is ProcessState.PENDING


def test_illegal_moves_never_reach_the_store(app_context, clock):
    app_context.states.create(transitions.new_record("o1", None, clock.now()))
    r = app_context.states.get("o1")
    claimed = update_once(app_context.states, r, lambda x: transitions.claim(x, clock.now(), GRACE))
    with pytest.raises(IllegalTransition):
        update_once(app_context.states, claimed, lambda x: transitions.claim(x, clock.now(), GRACE))
    assert app_context.states.get("o1").version == claimed.version


def test_create_or_verify_identical_is_a_no_op_and_conflicting_is_refused(app_context):
    doc = {"id": "o1", "orderId": "o1", "totalCents": 100, "lines": [{"sku": "A", "quantity": 1}]}
    assert app_context.orders.create_or_verify(doc) is CreateOutcome.CREATED
    assert app_context.orders.create_or_verify(dict(doc)) is CreateOutcome.IDENTICAL
    assert app_context.orders.create_or_verify({**doc, "totalCents": 999}) is CreateOutcome.CONFLICT
    assert app_context.orders.get("o1")["totalCents"] == 100


def test_claimable_honours_the_not_before_time_and_the_limit(app_context, clock):
    for i in range(4):
        record = transitions.new_record(f"o{i}", None, clock.now())
        if i == 3:
            record = replace(record, complete_by=clock.now() + timedelta(minutes=5))
        app_context.states.create(record)
    assert sorted(r.order_id for r in app_context.states.claimable(clock.now(), 10)) == ["o0", "o1", "o2"]
    assert len(app_context.states.claimable(clock.now(), 2)) == 2
    clock.advance(timedelta(minutes=5))
    assert len(app_context.states.claimable(clock.now(), 10)) == 4


def test_count_by_state(app_context, clock):
    for i in range(3):
        app_context.states.create(transitions.new_record(f"o{i}", None, clock.now()))
    assert app_context.states.count(ProcessState.PENDING) == 3
    assert app_context.states.count(ProcessState.PROCESSING) == 0


class CountingReads:
    """Two worker processes are two ``CosmosStateStore``s on one container; this one counts reads."""

    def __init__(self, inner):
        self.inner = inner
        self.reads = 0

    def get(self, order_id):
        self.reads += 1
        return self.inner.get(order_id)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def two_workers(cosmos_db):
    from contracts.names import STATE_CONTAINER

    def worker():
        return CountingReads(CosmosStateStore(cosmos_db.get_container_client(STATE_CONTAINER)))

    return worker(), worker()


def begin(owner: str, clock, step: str = "reserve-inventory"):
    deadline = clock.now() + GRACE
    return lambda r: transitions.begin_step(r, owner, step, "inventory", "q", deadline, clock.now())


def claimed_by(store, clock, order_id: str = "o1"):
    store.create(transitions.new_record(order_id, None, clock.now()))
    return update_once(store, store.get(order_id), lambda r: transitions.claim(r, clock.now(), GRACE))


def test_a_write_after_this_process_own_write_needs_no_read(two_workers, clock):
    a, _ = two_workers
    claimed_by(a, clock)
    a.reads = 0
    update_fenced(a, "o1", "o1:1", begin("o1:1", clock))
    update_fenced(
        a,
        "o1",
        "o1:1",
        lambda r: transitions.complete_step(r, "o1:1", "reserve-inventory", {}, clock.now(), clock.now()),
    )
    assert a.reads == 0


def test_a_stale_cached_version_costs_one_412_and_a_read_never_a_lost_update(two_workers, clock):
    a, b = two_workers
    claimed_by(a, clock)
    current = b.get("o1")  # another process touches the record: a's cached version is now stale
    b.replace(replace(current, last_error="touched elsewhere"))
    a.reads = 0
    written = update_fenced(a, "o1", "o1:1", begin("o1:1", clock))
    assert a.reads == 1
    assert written.last_error == "touched elsewhere" and written.current_step == "reserve-inventory"


def test_a_cached_version_older_than_the_claim_is_read_again_not_judged_lost(two_workers, clock):
    a, b = two_workers
    a.create(transitions.new_record("o1", None, clock.now()))  # a last saw it unclaimed
    b_record = b.get("o1")
    update_once(b, b_record, lambda r: transitions.claim(r, clock.now(), GRACE))  # claimed in another process
    written = update_fenced(a, "o1", "o1:1", begin("o1:1", clock))
    assert written.locked_by == "o1:1" and written.current_step == "reserve-inventory"


def test_a_takeover_seen_only_in_cosmos_still_fences_the_old_owner_out(two_workers, clock):
    a, b = two_workers
    claimed_by(a, clock)  # a's cache says o1:1 owns it
    clock.advance(GRACE)
    taken = b.get("o1")
    update_once(b, taken, lambda r: transitions.supervisor_retry(r, "o1:1", clock.now(), 3, timedelta(0)))
    with pytest.raises(FencingLost):
        update_fenced(a, "o1", "o1:1", begin("o1:1", clock))
    assert b.get("o1").process_state is ProcessState.PENDING
