"""The invariants are not decoration: break the app on purpose and the runner reports it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from localrun.profile import Profile
from localrun.report import build_report
from localrun.simulation import SimulationConfig, run_simulation

pytestmark = pytest.mark.e2e
PROFILES = Path(__file__).resolve().parents[2] / "examples" / "profiles"


def run(profile: str, orders: int = 100, cosmos: dict[str, Any] | None = None) -> dict[str, Any]:
    """``cosmos``: fault keys laid over the profile's ``cosmos`` section (to make the fault a mutation
    needs common enough that the run cannot miss it by chance)."""
    data = json.loads((PROFILES / f"{profile}.json").read_text(encoding="utf-8"))
    if cosmos:
        data["cosmos"] = {**data.get("cosmos", {}), **cosmos}
    config = SimulationConfig(orders=orders, seed=11, profile=Profile.parse(data))
    return build_report(run_simulation(config))


def test_without_idempotency_keys_a_crashed_agent_charges_twice(monkeypatch):
    """Each retry of a call gets a new key: the agent-crash profile's redeliveries then repeat
    side effects, and the ledger check counts them."""
    import itertools

    from order_agents import runtime

    counter = itertools.count()
    real = runtime.RemoteCall  # type: ignore[attr-defined]

    def fresh_key(*args: Any, **kwargs: Any) -> Any:
        call = real(*args, **kwargs)
        return real(**{**call.__dict__, "idempotency_key": f"{call.idempotency_key}#{next(counter)}"})

    monkeypatch.setattr(runtime, "RemoteCall", fresh_key)
    report = run("agent-crash")
    assert report["invariants"]["duplicate_side_effects"] > 0


def test_without_the_forward_key_fence_a_slow_charge_is_kept_after_compensation(monkeypatch):
    """Undos no longer fence their forward key: a forward call still in flight when its undo ran
    takes effect after it (the undo found nothing, the order is Compensated, the money is kept)."""
    import dataclasses

    from order_agents import runtime

    real = runtime.RemoteCall  # type: ignore[attr-defined]
    monkeypatch.setattr(runtime, "RemoteCall", lambda *a, **k: dataclasses.replace(real(*a, **k), fences_key=None))
    report = run("slow-remote-calls")
    assert report["invariants"]["kept_after_compensation"] > 0
    assert report["recoveries"]["fenced_forward_calls"] == 0


def test_without_re_read_and_owed_notifications_a_lost_escalation_is_silent(monkeypatch):
    """The supervisor treats a write whose response was lost as not written, and nothing delivers
    what a failure write owes: orders end Error with no alert and no Failed status."""
    from adapters.cosmos.state_store import update_once
    from supervisor import compensation_rounds, recovery
    from supervisor import run as supervisor_run

    def plain(ctx: Any, record: Any, change: Any) -> Any:
        return update_once(ctx.states, record, change)

    monkeypatch.setattr(recovery, "write_or_reread", plain)
    monkeypatch.setattr(compensation_rounds, "write_or_reread", plain)
    monkeypatch.setattr(supervisor_run, "deliver_due", lambda ctx, cursors=None: 0)
    # At the profile's 3 % a run of ~100 escalations loses the response of ~3 of their writes, so
    # whether one is lost depends on the order of every Cosmos call before it; at 20 % some always are.
    report = run("cosmos-lost-responses", cosmos={"lost_response_rate": 0.2})
    assert report["invariants"]["silent_failures"] > 0


def test_with_re_read_and_owed_notifications_no_escalation_is_silent_at_that_loss_rate():
    """The control for the test above: the same run with the app as it is alerts every escalation."""
    report = run("cosmos-lost-responses", cosmos={"lost_response_rate": 0.2})
    assert report["injected_faults"]["cosmos_responses_lost"] > 0
    assert report["invariants"]["silent_failures"] == 0


def test_without_releasing_a_rejected_orders_notifications_they_are_stranded(monkeypatch):
    """Issue 11 finding 6: before the fix an order rejected by admission control left its deferred
    PaymentNotification waiting for an order that was never coming; stranded_messages counts them. Here the
    refusal is told (`Rejected`, `OrderRejected`) but never written on the order's deferral document, so neither
    the refusal, nor the notifications' looks again, nor the peek sweep dead-letters them: they wait, and after
    two hours the peek sweep alerts them as payments for orders never submitted (`PaymentWithoutOrder`), which
    is no excuse for the notifications of an order the app refused."""
    monkeypatch.setattr("deferral.recovery.rejected", lambda doc, now, sequence_number: doc)
    report = run("admission-rejections")
    assert report["final_states"]["Rejected"] > 0 and report["alerts"].get("PaymentWithoutOrder", 0) > 0
    assert report["invariants"]["stranded_messages"] > 0


def test_without_the_couriers_look_for_the_record_a_stale_rejected_follows_the_accepted_submission(monkeypatch):
    """The status courier tells a refusal's ``Rejected`` whatever happened since (the red team's finding): a refused
    order submitted again and accepted while its submitter's queue was full hears ``Rejected`` after its record was
    written; ``rejected_after_accepted`` counts them, and nothing is superseded."""
    monkeypatch.setattr("activities.scheduler_steps.refusal_superseded", lambda ctx, data: False)
    report = run("refused-then-accepted")
    assert report["invariants"]["rejected_after_accepted"] > 0
    assert report["statuses_superseded"] == 0


def test_without_saying_the_owed_received_first_a_full_queue_hears_completed_before_it(monkeypatch):
    """The ``publish_status`` activity no longer says a ``Received`` the record owes before the status it sends: with
    submitter 1's queue full for 15 minutes, ``Completed`` retried on the scheduler's timers reaches it first once
    the queue drains, and ``statuses_before_received`` counts those orders."""
    monkeypatch.setattr("activities.scheduler_steps.say_before_status", lambda *args: True)
    report = run("status-queue-refusing")
    assert report["invariants"]["statuses_before_received"] > 0
    assert report["invariants"]["missing_statuses"] == 0  # each heard Received in the end: the order is what broke
