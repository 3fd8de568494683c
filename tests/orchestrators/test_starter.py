"""The starter: sweep, claim races, caps, and what happens when a start fails."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

import pytest

from adapters.cosmos.errors import StoreUnavailable
from contracts.activities import OrderPlan
from domain import transitions
from domain.states import ProcessState
from orchestrators import starter
from orchestrators.names import SCHEDULER
from settings import Settings
from tests.fakes import RecordingClient, StateStoreCountingScans
from tests.orchestrators.support import sample_order

pytestmark = pytest.mark.cosmos

GRACE = timedelta(seconds=60)  # START_GRACE_SECONDS' default


def seed(ctx, clock, n: int) -> None:
    for i in range(n):
        ctx.orders.create_or_verify(sample_order(f"o{i}"))
        ctx.states.create(transitions.new_record(f"o{i}", None, clock.now()))


def plan(order_id: str) -> OrderPlan:
    return OrderPlan(order=sample_order(order_id), completed={}, step_timeout_seconds=60.0)


def test_sweep_claims_pending_records_in_a_bounded_batch(app_context, clock):
    batch = 3
    ctx = dataclasses.replace(app_context, settings=Settings.from_env({}, STARTER_BATCH_SIZE=str(batch)))
    seed(ctx, clock, batch + 2)
    claims = starter.sweep(ctx)
    assert len(claims) == batch
    assert {c.instance_id for c in claims} == {f"{c.order_id}:1" for c in claims}
    assert ctx.states.count(ProcessState.PROCESSING) == batch


def test_two_starters_sweeping_the_same_records_never_claim_one_twice(app_context, clock):
    seed(app_context, clock, 6)
    records = app_context.states.claimable(clock.now(), 10)
    a = [starter.try_claim(app_context, r) for r in records]  # starter A
    b = [starter.try_claim(app_context, r) for r in records]  # starter B, same stale reads
    assert all(c is not None for c in a)
    assert all(c is None for c in b)


def test_in_flight_cap_stops_claims(app_context, clock):
    cap = 2
    # a context built with these settings (assigning ctx.settings would leave its count cache's lifetime at 5 s)
    settings = Settings.from_env({}, MAX_IN_FLIGHT=str(cap), STATE_COUNT_CACHE_SECONDS="0")
    ctx = dataclasses.replace(app_context, settings=settings)
    seed(ctx, clock, cap + 3)
    assert len(starter.sweep(ctx)) == cap
    assert starter.sweep(ctx) == []
    assert ctx.states.count(ProcessState.PENDING) == 3


def test_the_in_flight_count_is_cached_not_scanned_per_claim(app_context, clock):
    cache = timedelta(seconds=5)
    states = StateStoreCountingScans(app_context.states)
    ctx = dataclasses.replace(
        app_context,
        settings=Settings.from_env({}, STATE_COUNT_CACHE_SECONDS=str(int(cache.total_seconds()))),
        states=states,
    )
    seed(ctx, clock, 4)
    for record in ctx.states.claimable(clock.now(), 10):
        starter.try_claim(ctx, record)
    assert states.counted == [ProcessState.PROCESSING]  # one scan, then the cache (bumped locally)
    clock.advance(cache)
    starter.has_capacity(ctx)
    assert len(states.counted) == 2


def test_a_reset_record_is_reclaimed_only_after_its_not_before_time_with_the_next_attempt(app_context, clock):
    seed(app_context, clock, 1)
    [first] = starter.sweep(app_context)
    clock.advance(app_context.settings.start_grace)
    from adapters.cosmos.state_store import update_once

    record = app_context.states.get("o0")
    update_once(
        app_context.states,
        record,
        lambda r: transitions.supervisor_retry(r, first.instance_id, clock.now(), 3, timedelta(seconds=30)),
    )
    assert starter.sweep(app_context) == []  # backoff not over
    clock.advance(timedelta(seconds=30))
    [second] = starter.sweep(app_context)
    assert (second.attempt, second.instance_id) == (2, "o0:2")


# what every attempt started now says in its input (an instance started before replays without it)
NEW_INPUT = {"timerPerRound": True, "reviewsFitFallback": True, "deadlineAtBegin": True, "answersGiveUp": True}


def test_start_claimed_starts_one_versioned_orchestration_per_claim():
    client = RecordingClient()
    claims = [starter.Claim("o1", "o1:1", 1, plan("o1")), starter.Claim("o2", "o2:3", 3, plan("o2"))]
    assert asyncio.run(starter.start_claimed(client, claims, GRACE)) == ["o1:1", "o2:3"]
    assert client.started == [
        (SCHEDULER, "o1:1", {"orderId": "o1", "attempt": 1, "plan": plan("o1").to_json(), **NEW_INPUT}),
        (SCHEDULER, "o2:3", {"orderId": "o2", "attempt": 3, "plan": plan("o2").to_json(), **NEW_INPUT}),
    ]


def test_a_claim_carries_the_plan_of_its_attempt(app_context, clock):
    """The order as stored, the steps earlier attempts finished and left in flight, and the settings."""
    seed(app_context, clock, 1)
    record = app_context.states.get("o0")
    begun = transitions.begin_step(
        transitions.claim(record, clock.now(), app_context.settings.start_grace),
        "o0:1",
        "charge-payment",
        "payment-backup",
        "o0:1:charge-payment:payment-backup",
        clock.now() + timedelta(seconds=60),
        clock.now(),
    )
    clock.advance(timedelta(hours=1))  # the attempt died mid-step; the supervisor retried it
    retried = transitions.supervisor_retry(begun, "o0:1", clock.now(), 3, timedelta(0))
    stored = app_context.states.replace(dataclasses.replace(retried, version=record.version))
    claim = starter.try_claim(app_context, stored)
    assert claim is not None and claim.attempt == 2
    assert claim.plan.order == sample_order("o0")
    assert claim.plan.in_flight == {"charge-payment": "payment-backup"} and claim.plan.completed == {}
    assert claim.plan.step_timeout_seconds == app_context.settings.step_timeout.total_seconds()
    assert claim.plan.review.amount_threshold_cents == app_context.settings.review_amount_threshold_cents


def test_a_claimed_record_without_its_order_is_not_started_and_is_left_for_the_supervisor(app_context, clock, caplog):
    app_context.states.create(transitions.new_record("o-lost", None, clock.now()))
    # (within ORDER_VISIBLE_WITHIN of the record's write, a 404 for its order is a stale read: the claim waits,
    # tests/adapters/test_stale_reads.py)
    clock.advance(starter.ORDER_VISIBLE_WITHIN)
    [record] = app_context.states.claimable(clock.now(), 10)
    assert starter.try_claim(app_context, record) is None
    assert "no order document" in caplog.text and "supervisor will retry" in caplog.text
    claimed = app_context.states.get("o-lost")
    assert (claimed.process_state, claimed.locked_by) == (ProcessState.PROCESSING, "o-lost:1")
    assert transitions.is_expired(claimed, clock.now() + app_context.settings.start_grace)


def test_an_order_the_store_cannot_read_for_now_leaves_its_record_pending_for_the_next_sweep(
    app_context, clock, caplog
):
    """Not claimed, so not counted: a store blip at the claim costs the order nothing."""
    seed(app_context, clock, 1)
    ctx = dataclasses.replace(app_context, orders=UnavailableOrders())
    [record] = ctx.states.claimable(clock.now(), 10)
    assert starter.sweep(ctx) == []
    assert "could not be read" in caplog.text and "next sweep" in caplog.text
    pending = ctx.states.get(record.order_id)
    assert (pending.process_state, pending.locked_by, pending.attempt) == (ProcessState.PENDING, None, 0)
    [claim] = starter.sweep(app_context)  # the store is back
    assert (claim.order_id, claim.attempt) == (record.order_id, 1)


class UnavailableOrders:
    def get(self, order_id: str) -> None:
        raise StoreUnavailable(f"orders container unreachable reading {order_id}")


def test_start_failure_is_logged_and_left_for_the_supervisor(app_context, clock, caplog):
    seed(app_context, clock, 1)
    claims = starter.sweep(app_context)
    assert asyncio.run(starter.start_claimed(RecordingClient(fail_start=True), claims, GRACE)) == []
    assert "supervisor will retry" in caplog.text
    record = app_context.states.get("o0")
    assert record.process_state is ProcessState.PROCESSING
    assert transitions.is_expired(record, clock.now() + app_context.settings.start_grace)


def test_the_sweep_trigger_claims_and_starts(functions, app_context, clock):
    seed(app_context, clock, 2)
    client = RecordingClient()
    fn = functions["starter_sweep"].func.client_function
    asyncio.run(fn(timer=None, client=client))
    assert sorted(str(i) for _, i, _ in client.started) == ["o0:1", "o1:1"]
