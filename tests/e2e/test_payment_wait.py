"""End to end through the local runner: a prepaid order whose payment notification is held up on its way
waits for it (``PAYMENT_WAIT_MINUTES``) instead of spending its retries on the payment step's deadlines,
and is given up, saying so, once the wait is over (docs/supervisor.md, "Waiting for a payment").

Before, each of the three attempts waited its 60 s deadline for the notification and was counted as a
failure: the order ended in ``Error`` (or compensated) about five minutes after it began although the
customer had paid, as a red team found (m03 seed 1, ``ord-00182``: its notification had met a Cosmos DB
outage and waited in store-retry copies behind the ``orders`` backlog)."""

from __future__ import annotations

from typing import Any

import pytest

from localrun.profile import Profile
from localrun.report import build_report
from localrun.simulation import SimulationConfig, SimulationResult, run_simulation

pytestmark = pytest.mark.e2e
ORDERS = 20


def run(late_s: tuple[int, int], wait_minutes: int) -> tuple[SimulationResult, dict[str, Any]]:
    """Every order prepaid, its notification sent ``late_s`` after it."""
    profile = Profile.parse(
        {
            "orders": {"prepaid_rate": 1.0, "late_notification_rate": 1.0, "late_notification_s": list(late_s)},
            "settings": {"PAYMENT_WAIT_MINUTES": str(wait_minutes)},
        }
    )
    result = run_simulation(SimulationConfig(orders=ORDERS, seed=5, profile=profile))
    return result, build_report(result)


def order_states(result: SimulationResult) -> dict[str, dict[str, Any]]:
    return {s["orderId"]: s for s in result.states if "processState" in s}


def test_a_notification_later_than_three_deadlines_but_within_the_wait_completes_its_order() -> None:
    result, report = run((420, 480), wait_minutes=15)  # 7-8 min: past the ~5 min three deadlines took
    assert report["invariants"] == dict.fromkeys(report["invariants"], 0)
    assert report["final_states"]["Processed"] == ORDERS, report["final_states"]
    assert report["recoveries"]["supervisor_retries"] == 0  # nothing counted against the orders
    assert report["recoveries"]["escalations"] == 0 and not report["alerts"]
    assert report["recoveries"]["payment_waits"] >= ORDERS and report["recoveries"]["payment_waits_given_up"] == 0
    waits = [t for t in result.audit.transitions if t.event == "PaymentWait"]
    assert {t.order_id for t in waits} == set(order_states(result))  # every order waited, uncounted


def test_a_notification_later_than_the_wait_gives_its_order_up_saying_why() -> None:
    result, report = run((900, 960), wait_minutes=5)  # 15-16 min: after the 5-minute wait is over
    assert report["invariants"] == dict.fromkeys(report["invariants"], 0)
    final = report["final_states"]
    assert final.get("Processed", 0) == 0
    # compensated (the reservation released) below the review threshold, Error and an alert above it
    assert final.get("Compensated", 0) + final.get("Error", 0) == ORDERS, final
    assert final.get("Compensated", 0) > 0 and final.get("Error", 0) > 0
    for order, state in order_states(result).items():
        assert str(state.get("lastError", "")).startswith("payment not received: no payment notification within "), (
            order,
            state.get("lastError"),
        )
        assert "PAYMENT_WAIT_MINUTES=5" in state["lastError"]
    assert report["alerts"].get("RetriesExhausted", 0) == final["Error"]
    assert report["recoveries"]["payment_waits_given_up"] == ORDERS
    # the notification that came after its order was given up is dead-lettered for a refund (compensated
    # orders) or applied to the Error record, for the operator to resubmit
    closed = [d for d in report["dead_letters"] if d["reason"] == "OrderClosed"]
    assert len(closed) == final["Compensated"]
    waited = max(
        (t.at - first.at).total_seconds()
        for first in result.audit.transitions
        if first.event == "PaymentWait"
        for t in result.audit.transitions
        if t.order_id == first.order_id and t.event in ("Escalated", "CompensationRequested")
    )
    assert 5 * 60 <= waited <= 5 * 60 + 180  # given up about one step deadline after the bound, not later
