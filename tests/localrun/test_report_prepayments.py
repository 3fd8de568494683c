"""The runner's ``unreleased_prepayments`` invariant: a ``Compensated`` order whose payment notification
was applied, that no provider charged or captured, must have a ``PrepaymentToRelease`` alert naming it
(else the customer's prepayment stays at the provider and nobody is told). Read from the state
documents, the simulators' ledger and the alert bodies, as ``build_report`` hands them over."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from adapters.remote.simulators.ledger import Effect, Ledger
from localrun.report import _unreleased_prepayments

AT = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
PAYMENT = {"notificationId": "pay-o1"}  # what the runner keeps of a state document's payment (report_fields)


def _doc(order_id: str, state: str = "Compensated", payment: dict[str, Any] | None = PAYMENT) -> dict[str, Any]:
    return {"orderId": order_id, "processState": state, "payment": payment}


def _captured_and_refunded(order_id: str) -> Ledger:
    ledger = Ledger()
    for action, reference in (("capture", "cap-1"), ("refund", "rf-1")):
        ledger.record(Effect("payment", action, order_id, f"{order_id}:charge-payment", 1000, reference, AT))
    return ledger


def _alert(order_id: str, kind: str = "PrepaymentToRelease") -> dict[str, Any]:
    return {"type": "OperatorAlert", "kind": kind, "orderId": order_id}


def test_a_compensated_prepaid_order_never_captured_needs_a_release_alert() -> None:
    by_order = {"o1": _doc("o1")}
    [found] = _unreleased_prepayments(by_order, {}, [_alert("o1", "CompensationFailed"), _alert("o2")])
    assert found.startswith("o1:") and "pay-o1" in found
    assert _unreleased_prepayments(by_order, {}, [_alert("o1")]) == []


def test_a_captured_payment_an_unpaid_order_or_another_state_needs_none() -> None:
    by_order = {
        "captured": _doc("captured"),
        "unpaid": _doc("unpaid", payment=None),
        "processed": _doc("processed", state="Processed"),
        "failed": _doc("failed", state="CompensationFailed"),
    }
    ledgers = {"captured": _captured_and_refunded("captured")}
    assert _unreleased_prepayments(by_order, ledgers, []) == []
