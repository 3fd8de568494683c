"""The starter's sweep when Cosmos DB fails in the middle of a batch, or loses a claim's response."""

from __future__ import annotations

from functools import partial

import pytest

from adapters.cosmos.errors import StoreUnavailable
from domain import transitions
from domain.compensation import enter_compensation
from domain.states import ProcessState
from orchestrators import starter
from tests.contexts import context_with
from tests.lost_writes import FlakyStates
from tests.orchestrators.support import sample_order

pytestmark = pytest.mark.cosmos


def test_a_store_failure_mid_batch_keeps_the_claims_already_made(app_context, clock):
    for i in range(3):
        app_context.orders.create_or_verify(sample_order(f"o{i}"))
        app_context.states.create(transitions.new_record(f"o{i}", None, clock.now()))
    flaky = FlakyStates(app_context.states)
    flaky.refuse["o1"] = 1

    claims = starter.sweep(context_with(app_context, states=flaky))

    assert sorted(c.order_id for c in claims) == ["o0", "o2"]
    still = flaky.get("o1")
    assert still is not None and still.process_state is ProcessState.PENDING  # the next sweep claims it


def test_a_claim_whose_response_was_lost_is_still_this_claim(app_context, clock):
    app_context.orders.create_or_verify(sample_order("o0"))
    app_context.states.create(transitions.new_record("o0", None, clock.now()))
    flaky = FlakyStates(app_context.states)
    flaky.lose["o0"] = 1

    [claim] = starter.sweep(context_with(app_context, states=flaky))

    stored = flaky.get("o0")
    assert stored is not None and stored.locked_by == claim.instance_id == "o0:1"


class MovedOnAfterTheClaim(FlakyStates):
    """The claim of ``order`` commits and its response is lost; before the starter reads the record
    again, another writer makes ``then`` of the stored record."""

    def __init__(self, inner, order, then):
        super().__init__(inner)
        self.lose[order] = 1
        self._then = then

    def replace(self, record):
        try:
            return super().replace(record)
        except StoreUnavailable:
            stored = self._inner.get(record.order_id)
            self._inner.replace(self._then(stored))
            raise


def test_a_lost_claim_response_then_a_cancellation_starts_nothing_and_counts_nothing(app_context, clock):
    app_context.orders.create_or_verify(sample_order("o0"))
    app_context.states.create(transitions.new_record("o0", None, clock.now()))
    cancel = partial(enter_compensation, by="operator:ana", reason="cancelled by operator", now=clock.now())
    states = MovedOnAfterTheClaim(app_context.states, "o0", cancel)
    ctx = context_with(app_context, states=states)
    in_flight = ctx.counts.get(ProcessState.PROCESSING)

    assert starter.sweep(ctx) == []

    assert ctx.counts.get(ProcessState.PROCESSING) == in_flight
    stored = states.get("o0")
    assert stored is not None and stored.process_state is ProcessState.COMPENSATING


def test_a_lost_claim_response_then_a_write_that_keeps_the_claim_still_starts_it(app_context, clock):
    app_context.orders.create_or_verify(sample_order("o0"))
    app_context.states.create(transitions.new_record("o0", None, clock.now()))
    noted = partial(lambda r, now: r.with_changes(now, "Noted", "ops", "an unrelated write"), now=clock.now())
    states = MovedOnAfterTheClaim(app_context.states, "o0", noted)

    [claim] = starter.sweep(context_with(app_context, states=states))

    stored = states.get("o0")
    assert stored is not None and stored.locked_by == claim.instance_id == "o0:1"
    assert stored.history[-1].event == "Noted"
