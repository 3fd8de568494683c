"""Fixtures of the supervisor tests: a real Cosmos state store, contexts with their own settings over
the shared manual clock (``clock``) and recording sender (``sender``) of ``tests/conftest.py``."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.alert_mark_store import CosmosAlertMarks
from adapters.cosmos.deferral_store import CosmosDeferralLog
from adapters.cosmos.health_store import CosmosHealthStore, HealthStore
from adapters.cosmos.ops_queries import CosmosOpsQueries
from adapters.cosmos.order_store import CosmosOrderStore
from adapters.cosmos.state_store import CosmosStateStore, StateStore, update_once
from adapters.servicebus.sender import MessageSender
from contracts.names import ORDERS_CONTAINER, STATE_CONTAINER
from dependencies import AppContext
from domain import review, transitions
from domain.records import StateRecord
from settings import Settings
from tests.fakes import QueuesWithNothingDeferred, RecordingSender

MakeContext = Callable[..., AppContext]


@pytest.fixture
def states(cosmos_db: Any) -> CosmosStateStore:
    return CosmosStateStore(cosmos_db.get_container_client(STATE_CONTAINER))


@pytest.fixture
def make_ctx(cosmos_db: Any, states: CosmosStateStore, clock: ManualClock, sender: RecordingSender) -> MakeContext:
    """``make_ctx(MAX_FAILURES="3", ...)``: an AppContext over the shared store, clock and sender (not installed).
    A test that needs another collaborator passes it: ``make_ctx(states=flaky, MAX_FAILURES="3")`` (a fault-injecting
    store over the shared one), ``sender=``, ``health=``."""

    def build(
        seed: int = 7,
        *,
        states: StateStore = states,
        sender: MessageSender = sender,
        health: HealthStore | None = None,
        **overrides: str,
    ) -> AppContext:
        return AppContext(
            settings=Settings.from_env({}, **overrides),
            clock=clock,
            states=states,
            orders=CosmosOrderStore(cosmos_db.get_container_client(ORDERS_CONTAINER)),
            sender=sender,
            remote={},
            deferred=QueuesWithNothingDeferred(),
            deferrals=CosmosDeferralLog(cosmos_db.get_container_client(STATE_CONTAINER)),
            ops=CosmosOpsQueries(cosmos_db.get_container_client(STATE_CONTAINER)),
            health=health or CosmosHealthStore(cosmos_db.get_container_client(STATE_CONTAINER)),
            rng=random.Random(seed),
            alert_marks=CosmosAlertMarks(cosmos_db.get_container_client(STATE_CONTAINER)),
        )

    return build


def claimed(states: CosmosStateStore, order_id: str, claimed_at: datetime, deadline: datetime) -> StateRecord:
    """A record as a starter leaves it: submitted, then claimed at ``claimed_at`` by attempt 1
    with ``completeBy = deadline``."""
    record = states.create(transitions.new_record(order_id, None, claimed_at))
    return update_once(states, record, lambda r: transitions.claim(r, claimed_at, deadline - claimed_at))


def reclaim(states: CosmosStateStore, order_id: str, now: datetime, grace: timedelta) -> StateRecord:
    record = states.get(order_id)
    assert record is not None
    return update_once(states, record, lambda r: transitions.claim(r, now, grace))


def expired(states: CosmosStateStore, order_id: str, clock: ManualClock, ago: timedelta) -> StateRecord:
    """A Processing record whose deadline passed ``ago`` before the clock's now."""
    deadline = clock.now() - ago
    return claimed(states, order_id, deadline - timedelta(seconds=60), deadline)


def expired_in_a_step(states: CosmosStateStore, order_id: str, clock: ManualClock, ago: timedelta) -> StateRecord:
    """Attempt 1 of ``order_id`` began its first step, whose deadline passed ``ago`` before the clock's now: an
    attempt that ran (one that never began, whose status cannot be read, is left: ``supervisor/backend_wait.py``)."""
    deadline = clock.now() - ago
    began = deadline - timedelta(seconds=60)
    record = claimed(states, order_id, began, began + timedelta(seconds=60))
    owner = f"{order_id}:1"
    return update_once(
        states, record, lambda r: transitions.begin_step(r, owner, "reserve", "inventory", "req-1", deadline, began)
    )


def note_answer(
    states: CosmosStateStore, record: StateRecord, action: str, clock: ManualClock, operator: str
) -> StateRecord:
    """``operator``'s answer ``action`` noted on ``record``'s pending review, as the ops API writes it."""
    pending = review.pending_review(record)
    assert pending is not None
    now = clock.now()
    return update_once(
        states, record, lambda r: review.note_review_answer(r, pending.review_id, operator, action, "checked", now)
    )
