"""End to end through the real activities, agents and simulators: for an order that fails before
the pivot, every side effect is undone exactly once, at the service that did it."""

from __future__ import annotations

from typing import Any

from activities import compensation_steps
from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.fleet import simulated_services
from adapters.remote.simulators.ledger import Ledger, NetEffect
from dependencies import AppContext
from domain.states import ProcessState
from supervisor.compensation_rounds import claim_due_compensations
from tests.activity_calls import run
from tests.compensation.support import (
    call_agent,
    compensation_round,
    forward_step,
    stored_record,
    submitted_and_claimed,
)
from tests.contexts import context_with
from tests.deadlines import just_past

FORWARD = "o1:1"
ZERO = NetEffect()


def fleet(ctx: AppContext, **broken: SimulatorConfig) -> tuple[AppContext, Ledger]:
    """``ctx`` whose remote services are the simulators (``broken`` ones configured so), sharing one ledger,
    installed in its place; and that ledger."""
    ledger = Ledger()
    return context_with(ctx, remote=dict(simulated_services(ctx.clock, broken, ledger))), ledger


def test_a_failed_order_is_left_with_no_side_effect_at_any_service(app_context, sender):
    refuses = SimulatorConfig(permanent_error_rate=1.0)
    ctx, ledger = fleet(app_context, payment=refuses, shipping=refuses)
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}

    reserved = forward_step(ctx, FORWARD, 1, "reserve-inventory", "inventory", results)
    assert reserved is not None and reserved["outcome"] == "succeeded"
    primary = forward_step(ctx, FORWARD, 1, "charge-payment", "payment", results)
    assert primary is not None and primary["outcome"] == "failed" and not primary["transient"]
    backup = forward_step(ctx, FORWARD, 1, "charge-payment", "payment-backup", results, tries=2)
    assert backup is not None and backup["outcome"] == "succeeded"  # the fallback agent took the charge
    shipped = forward_step(ctx, FORWARD, 1, "arrange-shipment", "shipping", results)
    assert shipped is not None and shipped["outcome"] == "failed"
    assert ledger.net("o1") == NetEffect(reserved_units=2, charged_cents=1000)
    fenced = {"orderId": "o1", "instanceId": FORWARD, "step": "arrange-shipment", "attempt": 1}
    run(compensation_steps.request_compensation, ctx, {**fenced, "error": shipped["error"]})

    [start] = claim_due_compensations(ctx).starts
    replies = compensation_round(ctx, start.instance_id, start.round)

    assert [r["step"] for r in replies] == ["charge-payment", "reserve-inventory"]  # newest first
    assert ledger.net_by_service("o1") == {"inventory": ZERO, "payment_backup": ZERO}
    assert ledger.net("o1") == ZERO
    assert len(ledger.effects("o1", "refund")) == 1 and len(ledger.effects("o1", "release")) == 1
    assert ledger.effects("o1", "refund")[0].service == "payment_backup"  # undone where it was done
    record = ctx.states.get("o1")
    assert record is not None and record.process_state is ProcessState.COMPENSATED
    assert [e.outcome for e in record.compensation] == ["Undone", "Undone"]
    assert [e.agent for e in record.compensation] == ["inventory", "payment-backup"]
    statuses = [s["status"] for s in sender.bodies("client-statuses")]
    assert statuses[-1] == "Compensated"


def test_an_undo_delivered_twice_is_done_once(app_context):
    ctx, ledger = fleet(app_context, shipping=SimulatorConfig(permanent_error_rate=1.0))
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    forward_step(ctx, FORWARD, 1, "reserve-inventory", "inventory", results)
    forward_step(ctx, FORWARD, 1, "charge-payment", "payment", results)
    shipped = forward_step(ctx, FORWARD, 1, "arrange-shipment", "shipping", results)  # records the charge; refused
    assert shipped is not None and shipped["outcome"] == "failed"
    fenced = {"orderId": "o1", "instanceId": FORWARD, "step": "arrange-shipment", "attempt": 1}
    run(compensation_steps.request_compensation, ctx, {**fenced, "error": "no"})
    [start] = claim_due_compensations(ctx).starts
    first = compensation_round(ctx, start.instance_id, start.round)
    # The same undo requests again (a redelivery, or a later round re-sending): same keys, no effect.
    for reply in first:
        entry_agent = "payment" if reply["step"] == "charge-payment" else "inventory"
        again = call_agent(
            ctx,
            entry_agent,
            {
                "requestId": reply["requestId"] + ":again",
                "instanceId": start.instance_id,
                "orderId": "o1",
                "step": reply["step"],
                "action": "undo",
                "attempt": start.round,
                "deadline": "2099-01-01T00:00:00.000000Z",
                "idempotencyKey": f"o1:{reply['step']}:undo",
                "payload": {},
            },
        )
        assert again is not None and again["result"] == reply["result"]  # the recorded answer
    assert len(ledger.effects("o1", "refund")) == 1 and len(ledger.effects("o1", "release")) == 1
    assert ledger.net_by_service("o1") == {"inventory": ZERO, "payment": ZERO}


class DeclinesCharges:
    """The primary payment provider: declines every charge for good, refunds as usual."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def call(self, request: Any) -> dict[str, Any]:
        from adapters.remote.interface import RemoteError

        if request.action == "charge":
            raise RemoteError("card declined", transient=False)
        result: dict[str, Any] = self._inner.call(request)
        return result


def test_a_fallback_charge_whose_reply_was_lost_is_refunded_where_it_was_taken(app_context, clock):
    """Attempt 1: the primary declines, the fallback provider charges and its reply never comes
    back; the step is tried at the primary once more. Retries run out before the pivot. The
    compensation does not know which provider took the money, so it refunds at both by the
    forward key: the ledger nets to zero."""

    from domain.compensation import undo_pending
    from domain.ids import idempotency_key, request_id
    from domain.payloads import step_payload
    from domain.timefmt import to_text
    from supervisor.recovery import recover
    from tests.compensation.support import ORDER

    ctx, ledger = fleet(app_context)
    ctx = context_with(
        ctx,
        remote={**ctx.remote, "payment": DeclinesCharges(ctx.remote["payment"])},
        settings=ctx.settings.from_env({}, MAX_FAILURES="1"),
    )
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    reserved = forward_step(ctx, FORWARD, 1, "reserve-inventory", "inventory", results)
    assert reserved is not None and reserved["outcome"] == "succeeded"
    declined = forward_step(ctx, FORWARD, 1, "charge-payment", "payment", results)
    assert declined is not None and declined["outcome"] == "failed" and not declined["transient"]
    # the fallback takes the charge; its reply is lost, so nothing records it
    request = {
        "requestId": request_id(FORWARD, "charge-payment", "payment-backup") + ":2",
        "instanceId": FORWARD,
        "orderId": "o1",
        "step": "charge-payment",
        "action": "do",
        "attempt": 1,
        "deadline": to_text(clock.now() + ctx.settings.step_timeout),
        "idempotencyKey": idempotency_key("o1", "charge-payment"),
        "payload": step_payload("charge-payment", ORDER, results),
    }
    from activities import scheduler_steps

    assert run(scheduler_steps.begin_step, ctx, {"request": request, "agent": "payment-backup"})["owned"]
    taken = call_agent(ctx, "payment-backup", request)
    assert taken is not None and taken["outcome"] == "succeeded"
    assert ledger.net("o1").charged_cents > 0
    # then the step goes back to the primary (an operator's review chose "retry"), which declines
    again = {**request, "requestId": request_id(FORWARD, "charge-payment", "payment") + ":3"}
    assert run(scheduler_steps.begin_step, ctx, {"request": again, "agent": "payment"})["owned"]
    refused = call_agent(ctx, "payment", again)
    assert refused is not None and refused["outcome"] == "failed"

    clock.advance(just_past(ctx.settings.step_timeout))
    recover(ctx, stored_record(ctx))  # the attempt expired; retries are exhausted
    record = stored_record(ctx)
    assert record.process_state is ProcessState.COMPENSATING and undo_pending(record)
    [start] = claim_due_compensations(ctx).starts
    compensation_round(ctx, start.instance_id, start.round)

    assert ledger.net("o1") == ZERO
    assert [e.service for e in ledger.effects("o1", "refund")] == ["payment_backup"]
