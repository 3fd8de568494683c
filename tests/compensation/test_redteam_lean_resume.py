"""Red team of the lean scheduler (commit 800363c), checks that hold: an attempt that dies after a
step's reply and before its next fenced write leaves the step in flight on the record; the next
attempt resumes it at the agent it last went to (the fallback), under the same idempotency key, and
the remote service acts once. Real activities, agents and simulators over the Cosmos protocol server."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from adapters.clock import ManualClock
from adapters.cosmos.state_store import update_once
from adapters.remote.simulators.ledger import Ledger, NetEffect
from dependencies import AppContext
from domain import transitions
from domain.states import ProcessState, StepStatus
from orchestrators import starter
from orchestrators.starter import Claim
from tests.compensation.support import finish_forward, forward_step, stored_record, submitted_and_claimed


def _retry_after_death(ctx: AppContext, owner: str) -> Claim:
    """The supervisor's retry of ``owner``'s expired attempt, then the starter's claim: the next attempt,
    with the plan its orchestration gets as input."""
    record = stored_record(ctx)
    clock = ctx.clock
    assert isinstance(clock, ManualClock) and record.complete_by is not None
    clock.set(record.complete_by + ctx.settings.start_grace)
    retried = update_once(
        ctx.states,
        record,
        lambda r: transitions.supervisor_retry(r, owner, clock.now(), ctx.settings.max_failures, timedelta(0)),
    )
    assert retried.process_state is ProcessState.PENDING
    claim = starter.try_claim(ctx, retried)
    assert claim is not None
    return claim


def test_a_fallback_charge_whose_result_died_with_its_attempt_is_resumed_at_the_fallback_and_charged_once(
    ctx: AppContext, ledger: Ledger
) -> None:
    submitted_and_claimed(ctx)
    first: dict[str, Any] = {}
    forward_step(ctx, "o1:1", 1, "reserve-inventory", "inventory", first)
    # the primary failed for good earlier in the attempt; the scheduler's second try goes to the fallback
    reply = forward_step(ctx, "o1:1", 1, "charge-payment", "payment-backup", first, tries=2)
    assert reply is not None and reply["outcome"] == "succeeded"
    # ... and the attempt dies before its next write (the shipment's start): the charge is in flight
    died = stored_record(ctx)
    assert died.steps["charge-payment"].status is StepStatus.IN_PROGRESS
    assert died.steps["charge-payment"].agent == "payment-backup"
    assert [e.step for e in died.compensation] == ["reserve-inventory"]

    claim = _retry_after_death(ctx, "o1:1")
    owner, plan = claim.instance_id, claim.plan
    assert plan.in_flight == {"charge-payment": "payment-backup"}
    assert set(plan.completed) == {"reserve-inventory"}

    second: dict[str, Any] = dict(plan.completed)
    again = forward_step(ctx, owner, 2, "charge-payment", plan.in_flight["charge-payment"], second)
    assert again is not None and again["outcome"] == "succeeded"
    assert second["charge-payment"] == first["charge-payment"]  # the service answered its recorded result
    forward_step(ctx, owner, 2, "arrange-shipment", "shipping", second)
    assert finish_forward(ctx, owner, 2, second)["owned"] is True

    done = stored_record(ctx)
    assert done.process_state is ProcessState.PROCESSED
    assert [(e.step, e.agent) for e in done.compensation] == [
        ("reserve-inventory", "inventory"),
        ("charge-payment", "payment-backup"),
    ]
    by_service = ledger.net_by_service("o1")
    assert "payment" not in by_service, by_service  # the primary never charged
    [backup] = [s for s in by_service if s.startswith("payment")]
    assert by_service[backup].charged_cents == ledger.net("o1").charged_cents > 0
    assert [e.action for e in ledger.effects("o1")].count("charge") == 1
    assert ledger.net("o1") == NetEffect(reserved_units=2, charged_cents=1000, shipments=1)
