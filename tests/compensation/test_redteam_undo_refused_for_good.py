"""Red team (compensation): an undo its provider refuses for good, then the operator's documented way out.

The refund of the charge is refused for good: the round ends ``CompensationFailed`` naming that entry (the newest)
and never reaches the older one (the inventory reservation). The ``CompensationFailed`` alert said: "fix the service or
undo the named entry by hand, then run the operator's compensate again". The provider records the refusal against
the undo's key (``<order>:charge-payment:undo``, the same in every round: the documented contract, and the
simulators'), so that compensate sent the refund again, was refused again, and the order went back to
``CompensationFailed`` at the same entry, round after round: the reservation was never released by the app, the
order never ``Compensated``, and nothing told the operator that the reservation was still held.

Now the operator's compensate names the entries undone by hand (``undoneByHand``, ``supervisor.operator``): each
must be an entry not undone of a ``CompensationFailed`` order; it is marked ``Undone`` by that operator
(``undoneBy``) in the same write that hands the order to compensation, and the next round skips it and undoes the
rest. The alert names the entries still not undone. Through the real activities, agents and simulators over the
Cosmos protocol server."""

from __future__ import annotations

from typing import Any

import pytest

from activities import compensation_steps
from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.fleet import simulated_services
from adapters.remote.simulators.ledger import Ledger, NetEffect
from adapters.remote.simulators.service import SimulatedService
from contracts.names import OPERATOR_ALERTS_QUEUE
from dependencies import AppContext
from domain.compensation import UNDONE, undo_idempotency_key, undo_request_id
from domain.errors import IllegalTransition
from domain.states import ProcessState
from domain.timefmt import to_text
from supervisor.compensation_rounds import claim_due_compensations
from supervisor.operator import compensate_action
from tests.activity_calls import run
from tests.compensation.support import call_agent, forward_step, stored_record, submitted_and_claimed
from tests.contexts import context_with

FORWARD = "o1:1"


def _fleet(app_context: AppContext) -> tuple[AppContext, Ledger]:
    """The simulators, sharing one ledger; shipping refuses every shipment (the order fails at the pivot)."""
    ledger = Ledger()
    refuses = SimulatorConfig(permanent_error_rate=1.0)
    services = simulated_services(app_context.clock, {"shipping": refuses}, ledger)
    return context_with(app_context, remote=dict(services)), ledger


def _round(ctx: AppContext) -> str:
    """The supervisor claims the next round; the round runs as ``compensate_order`` does (one try per undo): its
    end, ``Compensated`` or ``CompensationFailed`` (an undo refused for good)."""
    [start] = claim_due_compensations(ctx).starts
    fenced = {"orderId": "o1", "instanceId": start.instance_id}
    plan = run(compensation_steps.load_compensation, ctx, fenced)
    assert plan["owned"]
    for entry in sorted(plan["entries"], key=lambda e: e["seq"], reverse=True):
        if entry["outcome"] == UNDONE:
            continue
        deadline = ctx.clock.now() + ctx.settings.step_timeout
        request = {
            "requestId": undo_request_id(start.instance_id, entry["step"], entry["agent"], 1),
            "instanceId": start.instance_id,
            "orderId": "o1",
            "step": entry["step"],
            "action": "undo",
            "attempt": start.round,
            "deadline": to_text(deadline),
            "idempotencyKey": undo_idempotency_key("o1", entry["step"]),
            "payload": {**entry["data"], "seq": entry["seq"]},
        }
        began = {"request": request, "agent": entry["agent"], "seq": entry["seq"]}
        assert run(compensation_steps.begin_undo, ctx, began)["owned"]
        reply = call_agent(ctx, entry["agent"], request)
        assert reply is not None
        if reply["outcome"] != "succeeded":
            assert not reply["transient"], reply
            failed = {**fenced, "seq": entry["seq"], "error": reply["error"], "usedUpTries": False}
            assert run(compensation_steps.fail_compensation, ctx, failed)["owned"]
            return "CompensationFailed"
        recorded = {**fenced, "seq": entry["seq"], "result": reply.get("result")}
        assert run(compensation_steps.record_undo, ctx, recorded)["owned"]
    assert run(compensation_steps.finish_compensation, ctx, fenced)["owned"]
    return "Compensated"


def _handed_to_compensation(app_context: AppContext) -> tuple[AppContext, Ledger]:
    """Reserved, charged, the shipment refused: handed to compensation (``request_compensation``)."""
    ctx, ledger = _fleet(app_context)
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    for step_name, agent_name in [
        ("reserve-inventory", "inventory"),
        ("charge-payment", "payment"),
        ("arrange-shipment", "shipping"),
    ]:
        forward_step(ctx, FORWARD, 1, step_name, agent_name, results)
    fenced = {"orderId": "o1", "instanceId": FORWARD, "step": "arrange-shipment", "attempt": 1}
    run(compensation_steps.request_compensation, ctx, {**fenced, "error": "no carrier"})
    return ctx, ledger


def _refund_refused_for_good(app_context: AppContext) -> tuple[AppContext, Ledger]:
    """Reserved, charged, the shipment refused: compensation; the provider refuses the refund for good."""
    ctx, ledger = _handed_to_compensation(app_context)
    payment = ctx.remote["payment"]
    assert isinstance(payment, SimulatedService)
    payment.config = SimulatorConfig(permanent_error_rate=1.0)  # the provider refuses the refund
    assert _round(ctx) == "CompensationFailed"
    payment.config = SimulatorConfig()  # fixed: it would take a new refund (the refused key stays refused)
    return ctx, ledger


def test_an_undo_refused_for_good_is_settled_by_hand_and_the_rest_is_undone(app_context, sender):
    ctx, ledger = _refund_refused_for_good(app_context)
    record = stored_record(ctx)
    assert record.process_state is ProcessState.COMPENSATION_FAILED
    assert [(e.step, e.outcome) for e in record.compensation] == [
        ("reserve-inventory", None),
        ("charge-payment", "Failed"),
    ]
    assert ledger.net("o1") == NetEffect(reserved_units=2, charged_cents=1000)
    [alert] = [a for a in sender.bodies(OPERATOR_ALERTS_QUEUE) if a["kind"] == "CompensationFailed"]
    # the operator is told what is still held, not only the entry that failed
    assert alert["details"]["notUndone"] == [1, 2]

    # The operator refunds the charge at the provider by hand, and says so with the compensate.
    taken = compensate_action(ctx, "o1", "ana", "refunded by hand at the provider", undone_by_hand=(2,))
    assert taken.record.process_state is ProcessState.COMPENSATING
    settled = stored_record(ctx).compensation[1]
    assert (settled.outcome, settled.undone_by) == ("Undone", "ana")
    assert _round(ctx) == "Compensated"  # the refund is not sent again; the reservation is released

    record = stored_record(ctx)
    assert record.process_state is ProcessState.COMPENSATED
    assert [e.outcome for e in record.compensation] == ["Undone", "Undone"]
    assert ledger.net("o1").reserved_units == 0  # the reservation no longer held
    assert len(ledger.effects("o1", "refund")) == 0  # the app sent no second refund (the operator made it)


def test_only_an_entry_not_undone_of_a_compensation_failed_order_can_be_settled_by_hand(app_context):
    ctx, ledger = _handed_to_compensation(app_context)
    with pytest.raises(IllegalTransition, match="only an Error or CompensationFailed order"):
        compensate_action(ctx, "o1", "ana", "by hand", undone_by_hand=(1,))  # Compensating: a round undoes them
    inventory = ctx.remote["inventory"]
    assert isinstance(inventory, SimulatedService)
    inventory.config = SimulatorConfig(permanent_error_rate=1.0)  # the release refused: the refund went through
    assert _round(ctx) == "CompensationFailed"
    assert [e.outcome for e in stored_record(ctx).compensation] == ["Failed", "Undone"]
    for seq, why in [(2, "entry 2 .* is already undone"), (7, "no compensation entry 7")]:
        with pytest.raises(IllegalTransition, match=why):
            compensate_action(ctx, "o1", "ana", "by hand", undone_by_hand=(seq,))
    assert stored_record(ctx).process_state is ProcessState.COMPENSATION_FAILED  # nothing written
    assert ledger.net("o1") == NetEffect(reserved_units=2)


def test_compensate_again_without_it_still_stops_at_the_refused_entry(app_context):
    """What the operator had before: compensate again sends the refused refund again, refused again."""
    ctx, ledger = _refund_refused_for_good(app_context)
    compensate_action(ctx, "o1", "ana", "service fixed")
    assert _round(ctx) == "CompensationFailed"
    assert ledger.net("o1").reserved_units == 2
