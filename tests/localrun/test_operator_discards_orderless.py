"""The runner's operator discards a payment for an order never submitted (profile ``operator.discard_orderless``):
after the peek sweep's ``PaymentWithoutOrder`` alert it refunds it and posts the discard to the app's ops API, and
the report's ``discarded_payments_applied`` checks that no order took a discarded payment. The run injects the
orphan payment (``--inject-raw``) and, an hour later, a prepaid order under its id: discarded, the payment stays in
the dead-letter queue and the order gets none of it; not discarded (an operator without the flag, as before the
action existed), the order takes the refunded payment."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from adapters.servicebus.sender import OutgoingMessage
from contracts.names import ORDERS_QUEUE
from domain.deferral import DISCARDED
from localrun.profile import OperatorPlan, Profile
from localrun.report import _discarded_payments_applied, build_report
from localrun.servicebus import InProcessBroker
from localrun.simulation import SimulationConfig, run_simulation
from tests.localrun.test_orderless_payments import ORPHAN
from tests.submission.corpus import order

BOUND = {"ORDERLESS_PAYMENT_ALERT_MINUTES": "30"}
GHOST_ORDER = order(
    orderId="ord-ghost", lines=[{"sku": "SKU-1", "quantity": 1, "unitPriceCents": 1234}], currency="EUR", prepaid=True
)


def ghost_run(profile: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The orphan payment, its alert after 30 minutes, and an hour in, a prepaid order under its id, with ``profile``
    (its operator discarding the payment or not)."""
    config = SimulationConfig(
        orders=3,
        seed=1,
        profile=Profile.parse(profile),
        raw_lines=[
            {"body": json.dumps(ORPHAN), "message_id": "pay-ghost"},
            {"body": json.dumps(GHOST_ORDER), "message_id": "ord-ghost", "at_s": 3600},
        ],
        settings=BOUND,
    )
    result = run_simulation(config)
    return build_report(result), result


def run(discard: bool) -> tuple[dict[str, Any], Any]:
    plan = {"after_s": [60, 120], "discard_orderless": True} if discard else {"after_s": [60, 120]}
    return ghost_run({"operator": plan})


def ghost_payment(result: Any) -> Any:
    [doc] = [d for d in result.states if d.get("orderId") == "ord-ghost" and "processState" in d]
    return doc.get("payment")


def test_the_operator_discards_a_payment_without_order_and_the_order_submitted_later_does_not_take_it() -> None:
    report, result = run(discard=True)

    assert report["operator_actions"] == {"discard": {"done": 1}}
    assert {k: v for k, v in report["invariants"].items() if v} == {}
    [dead] = [d for d in result.broker.dead_letters(ORDERS_QUEUE) if d.reason == DISCARDED]
    assert json.loads(dead.body)["notificationId"] == "pay-ghost"
    assert "operator@localrun" in str(dead.description)
    assert ghost_payment(result) is None
    assert result.ledger.effects("ord-ghost", "capture") == []
    assert report["alerts"].get("PaymentWithoutOrder") == 1  # told once; never reported expired
    assert "DeferredMessageExpired" not in report["alerts"]


def test_without_the_discard_the_order_submitted_later_takes_the_refunded_payment() -> None:
    report, result = run(discard=False)

    assert "discard" not in (report["operator_actions"] or {})
    assert ghost_payment(result) == {"notificationId": "pay-ghost"}
    assert [c.amount for c in result.ledger.effects("ord-ghost", "capture")] == [1234]


def test_the_invariant_catches_a_discarded_payment_an_order_took() -> None:
    broker = InProcessBroker(SimpleNamespace(now=lambda: datetime(2026, 1, 1, tzinfo=UTC)))
    broker.declare_queue(ORDERS_QUEUE)
    broker.send(ORDERS_QUEUE, OutgoingMessage(body=json.dumps(ORPHAN), message_id="pay-ghost"))
    message = broker.receive(ORDERS_QUEUE)
    assert message is not None
    broker.actions.deadletter(message, DISCARDED, "discarded by operator x: refunded")
    result: Any = SimpleNamespace(broker=broker)

    taken = {"ord-ghost": {"orderId": "ord-ghost", "payment": {"notificationId": "pay-ghost"}}}
    assert _discarded_payments_applied(result, taken) == [f"#{message.sequence_number} for ord-ghost"]
    other = {"ord-ghost": {"orderId": "ord-ghost", "payment": {"notificationId": "pay-other"}}}
    assert _discarded_payments_applied(result, other) == []
    assert _discarded_payments_applied(result, {}) == []


def test_the_flag_is_parsed_and_off_by_default() -> None:
    assert Profile.parse({"operator": {}}).operator == OperatorPlan()
    assert OperatorPlan().discard_orderless is False
    plan = Profile.parse({"operator": {"discard_orderless": True}}).operator
    assert plan is not None and plan.discard_orderless
