"""What happens to an order after the supervisor reset it: the stale attempt is fenced out, and
the starter claims the order again only once its backoff (not-before time) has passed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from adapters.cosmos.state_store import update_fenced
from domain import transitions
from domain.errors import FencingLost
from domain.states import ProcessState
from orchestrators.starter import sweep
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.orchestrators.support import sample_order
from tests.supervisor.conftest import expired

pytestmark = pytest.mark.cosmos


def _begin_shipment(owner, clock):
    now = clock.now()

    def change(record):
        request = f"{owner}:arrange-shipment:shipping"
        return transitions.begin_step(
            record, owner, "arrange-shipment", "shipping", request, now + timedelta(seconds=60), now
        )

    return change


def test_a_stale_attempt_cannot_write_after_the_reset(make_ctx, states, clock):
    ctx = make_ctx()
    expired(states, "o1", clock, timedelta(seconds=5))
    run_supervisor(ctx, ScanState())
    reset = states.get("o1")
    assert reset is not None

    with pytest.raises(FencingLost):
        update_fenced(states, "o1", "o1:1", _begin_shipment("o1:1", clock))
    unchanged = states.get("o1")
    assert unchanged is not None and unchanged.version == reset.version


def test_the_starter_reclaims_only_after_the_not_before_time_as_the_next_attempt(make_ctx, states, clock):
    ctx = make_ctx(RETRY_BACKOFF_BASE_SECONDS="10")
    expired(states, "o1", clock, timedelta(seconds=5))
    run_supervisor(ctx, ScanState())
    reset = states.get("o1")
    assert reset is not None and reset.complete_by is not None

    assert sweep(ctx) == []  # right after the reset
    clock.set(reset.complete_by - timedelta(milliseconds=1))
    ctx.counts.clear()
    assert sweep(ctx) == []  # still inside the backoff
    clock.set(reset.complete_by)
    ctx.counts.clear()
    ctx.orders.create_or_verify(sample_order("o1"))  # the claim reads it into the attempt's plan
    [claim] = sweep(ctx)

    assert (claim.order_id, claim.attempt, claim.instance_id) == ("o1", 2, "o1:2")
    record = states.get("o1")
    assert record is not None
    assert (record.process_state, record.locked_by, record.attempt) == (ProcessState.PROCESSING, "o1:2", 2)
    assert record.failure_count == 1  # the failure is remembered across attempts
    with pytest.raises(FencingLost):  # the old attempt stays fenced out of the new one
        update_fenced(states, "o1", "o1:1", _begin_shipment("o1:1", clock))
    update_fenced(states, "o1", "o1:2", _begin_shipment("o1:2", clock))
