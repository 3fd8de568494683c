"""A payment notification for an order that never comes, injected into a run (``--inject-raw``): the app keeps it
deferred and the peek sweep tells an operator once it has waited ``ORDERLESS_PAYMENT_ALERT_MINUTES``
(``PaymentWithoutOrder``). The run goes on until that alert is sent, and the report counts the message stranded
only while no alert names it. Before, one such message made every run report ``stranded_messages 1``."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from localrun.profile import Profile
from localrun.report import build_report
from localrun.simulation import SimulationConfig, run_simulation

ORPHAN = {
    "type": "PaymentNotification",
    "schemaVersion": 1,
    "notificationId": "pay-ghost",
    "orderId": "ord-ghost",
    "amountCents": 1234,
    "currency": "EUR",
    "providerReference": "psp-ghost",
}
BOUND = {"ORDERLESS_PAYMENT_ALERT_MINUTES": "30"}


def run(horizon: timedelta = timedelta(hours=8)) -> dict[str, Any]:
    config = SimulationConfig(
        orders=3,
        seed=1,
        raw_lines=[{"body": json.dumps(ORPHAN), "message_id": "pay-ghost"}],
        settings=BOUND,
        horizon=horizon,
    )
    return build_report(run_simulation(config))


def test_a_payment_for_an_order_never_submitted_is_told_to_an_operator_and_is_not_stranded() -> None:
    report = run()
    assert report["invariants"]["stranded_messages"] == 0
    assert report["alerts"].get("PaymentWithoutOrder") == 1
    assert report["horizon_reached"] is False
    # the run went on until the peek sweep (every 5 minutes) was past the 30-minute bound, and no longer
    assert 30 * 60 <= report["simulated_s"] <= 40 * 60


def test_a_run_cut_before_the_alert_counts_the_message_stranded() -> None:
    report = run(horizon=timedelta(minutes=20))
    assert report["horizon_reached"] is True
    assert report["invariants"]["stranded_messages"] == 1


def test_an_app_that_never_tells_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("deferral.sweep._alert_orderless", lambda *args: None)
    report = run(horizon=timedelta(hours=1))
    assert report["invariants"]["stranded_messages"] == 1
    assert "PaymentWithoutOrder" not in report["alerts"]


def test_the_payment_of_an_order_dead_lettered_at_submission_waits_told_and_is_not_unmatched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The workload's own notification, for an order whose submission was dead-lettered (here: a field it
    breaks; under 45 % throttling: an hour of store failures): deferred, an operator told, not unmatched."""
    import localrun.simulation as simulation
    from localrun.workload import make_workload as drawn

    def broken_first_order(*args: Any, **kwargs: Any) -> Any:
        workload = drawn(*args, **kwargs)
        for n, arrival in enumerate(workload.arrivals):
            if arrival.kind == "order" and arrival.order_id == "ord-00001":
                body = {**json.loads(arrival.message.body), "lines": []}  # dead-lettered InvalidFields
                workload.arrivals[n] = replace(arrival, message=replace(arrival.message, body=json.dumps(body)))
        return workload

    monkeypatch.setattr(simulation, "make_workload", broken_first_order)
    profile = Profile.parse({"orders": {"prepaid_rate": 1.0, "payment_notification_first_rate": 1.0}})
    report = build_report(run_simulation(SimulationConfig(orders=2, seed=1, profile=profile, settings=BOUND)))
    assert report["invariants"]["unmatched_notifications"] == 0
    assert report["invariants"]["stranded_messages"] == 0
    assert report["alerts"].get("PaymentWithoutOrder") == 1
    assert report["final_states"]["Processed"] == 1
