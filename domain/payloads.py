"""What each step asks its agent for, built from the order and earlier steps' results
(references only: never card data). Pure and deterministic: the orchestrator calls it."""

from __future__ import annotations

from typing import Any


def step_payload(step: str, order: dict[str, Any], results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if step == "reserve-inventory":
        return {"lines": [{"sku": line["sku"], "quantity": line["quantity"]} for line in order["lines"]]}
    if step == "charge-payment":
        return {
            "amountCents": order["totalCents"],
            "currency": order["currency"],
            "customerId": order["customerId"],
            "prepaid": bool(order.get("prepaid", False)),
        }
    if step == "arrange-shipment":
        reservation = results.get("reserve-inventory", {}).get("reservationId")
        return {"shipTo": order["shipTo"], "reservationId": reservation}
    raise ValueError(f"no payload rule for step {step!r}")
