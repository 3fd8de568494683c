"""The operator's way out of ``CompensationFailed`` ("fix the service or undo the named entry by hand,
then run the operator's compensate again": the ``CompensationFailed`` alert) against providers that keep
the app's idempotency contract (docs/compensation.md: the same key and action give the recorded result,
a permanent error too). Ported from the red team's finding (ops, on 0c3d5d8): the undo key was
``<order>:<step>:undo`` in every round, so a refund refused for good was refused again in every later
round whatever the operator fixed, and the order could never leave ``CompensationFailed``.

Now the operator's compensate gives each undo refused for good a fresh undo key (``...:undo:1``), still
fencing the same forward key; an undo whose outcome is unknown (its tries used up on transient
failures) keeps its key: an undo is never done twice. Real activities and agents over the Cosmos protocol
server and the simulators (``tests.compensation.support``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from activities import compensation_steps
from domain.compensation import FAILED
from domain.states import ProcessState
from supervisor.compensation_rounds import claim_due_compensations
from supervisor.operator import compensate_order
from tests.activity_calls import run
from tests.compensation.support import forward_step, stored_record, submitted_and_claimed, undo_round


def _refused_at_the_pivot(ctx: Any) -> None:
    """Reserved and charged, then the carrier refuses the shipment for good: compensation requested."""
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    forward_step(ctx, "o1:1", 1, "reserve-inventory", "inventory", results)
    forward_step(ctx, "o1:1", 1, "charge-payment", "payment", results)
    shipping = ctx.remote["shipping"]
    shipping.config = replace(shipping.config, permanent_error_rate=1.0)  # the carrier refuses the address
    reply = forward_step(ctx, "o1:1", 1, "arrange-shipment", "shipping", results)
    assert reply is not None and reply["outcome"] == "failed"
    handed = {"orderId": "o1", "instanceId": "o1:1", "step": "arrange-shipment", "attempt": 1}
    handed |= {"error": reply.get("error"), "reason": None}
    assert run(compensation_steps.request_compensation, ctx, handed)["owned"]


def test_compensate_again_after_the_provider_is_fixed_refunds_the_charge(ctx: Any, ledger: Any) -> None:
    payment = ctx.remote["payment"]
    _refused_at_the_pivot(ctx)

    # The payment provider refuses the refund for now (say, a dispute is open on the charge).
    payment.config = replace(payment.config, permanent_error_rate=1.0)
    [start] = claim_due_compensations(ctx).starts
    first = undo_round(ctx, start.instance_id, start.round)
    assert first[-1]["outcome"] == "failed" and "o1:charge-payment:undo " in first[-1]["error"]
    failed = stored_record(ctx)
    assert failed.process_state is ProcessState.COMPENSATION_FAILED
    [charge] = [e for e in failed.compensation if e.step == "charge-payment"]
    assert (charge.outcome, charge.refused, charge.undo_generation) == (FAILED, True, 0)
    assert charge.forward_key == "o1:charge-payment"

    # The operator gets the alert, has the provider fixed, and runs compensate again, as the alert says.
    payment.config = replace(payment.config, permanent_error_rate=0.0)
    compensate_order(ctx, "o1", "ops@contoso", "dispute closed, provider fixed")
    [renewed] = [e for e in stored_record(ctx).compensation if e.step == "charge-payment"]
    assert (renewed.outcome, renewed.error, renewed.undo_generation) == (None, None, 1)
    [again] = claim_due_compensations(ctx).starts
    second = undo_round(ctx, again.instance_id, again.round)
    final = stored_record(ctx)
    assert final.process_state is ProcessState.COMPENSATED, (
        f"after the fix the order is {final.process_state.value} again: {final.last_error}; the refund was "
        f"answered {second[-1]}; the customer still has {ledger.net('o1').charged_cents} cents charged"
    )
    assert ledger.net("o1").charged_cents == 0 and ledger.net("o1").reserved_units == 0
    # the refund under its next undo key, fencing the charge's own key
    [refund] = ledger.effects("o1", "refund")
    assert refund.idempotency_key == "o1:charge-payment:undo:1"


def test_an_undo_whose_tries_were_used_up_keeps_its_key_when_compensated_again(ctx: Any) -> None:
    """Transient failures to the end: the refund may have been done (a lost answer), so the operator's
    compensate again sends the same undo key (the provider answers what it did, never refunds twice)."""
    _refused_at_the_pivot(ctx)
    [start] = claim_due_compensations(ctx).starts
    fenced = {"orderId": "o1", "instanceId": start.instance_id}
    plan = run(compensation_steps.load_compensation, ctx, fenced)
    seq = max(e["seq"] for e in plan["entries"])
    used_up = {**fenced, "seq": seq, "error": "503 (transient; 5 tries used up)", "transient": True}
    assert run(compensation_steps.fail_compensation, ctx, used_up)["owned"]
    assert stored_record(ctx).process_state is ProcessState.COMPENSATION_FAILED

    compensate_order(ctx, "o1", "ops@contoso", "outage over")
    [entry] = [e for e in stored_record(ctx).compensation if e.seq == seq]
    assert (entry.outcome, entry.refused, entry.undo_generation) == (FAILED, False, 0)
