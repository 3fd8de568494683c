"""The starter's sweep when Cosmos DB fails in the middle of a batch, or loses a claim's response."""

from __future__ import annotations

import pytest

from domain import transitions
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
