"""The reply relay while the Durable extension's HTTP API fails (``durable.outages``: every client call answered 500,
its storage failing; the orchestrations, activities and timers go on).

Before, a reply whose raise and status read both failed was abandoned: Service Bus redelivered it at once, its five
deliveries were spent inside a blip of a few seconds and the broker dead-lettered it ``MaxDeliveryCountExceeded``,
which pages an operator (``deadLettersFound``), though the order recovered without it. The runner, blips of 3 to 8 s
every 40 s (``examples/profiles/durable-client-outages.json``), 40 orders: 5 replies dead-lettered with seed 1, 3 with
seed 2; one outage of 90 s: 7. Now the relay sends a copy for a later round (``order_agents.reply_relay``) and, its
rounds used up, leaves the attempt to its deadline (``ReplyLeftToDeadline``): the attempt's timer ends it, the
supervisor retries the order, and the agent answers the retried request under the same idempotency key with what its
service did (one charge)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from localrun.profile import Profile
from localrun.report import build_report
from localrun.simulation import SimulationConfig, run_simulation

pytestmark = pytest.mark.cosmos

BLIPS = Path(__file__).resolve().parents[2] / "examples" / "profiles" / "durable-client-outages.json"
REPLIES_SPREAD = {"payment": {"latency_ms": [200, 3000]}, "shipping": {"latency_ms": [200, 3000]}}


def _broker_dead_letters(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for d in report["dead_letters"] if d["reason"] == "MaxDeliveryCountExceeded"]


@pytest.mark.parametrize("seed", [1, 2])
def test_replies_met_by_durable_blips_are_relayed_later_not_dead_lettered(seed: int) -> None:
    result = run_simulation(SimulationConfig(orders=40, seed=seed, profile=Profile.load(BLIPS)))
    report = build_report(result)
    assert report["injected_faults"]["durable_calls_failed"] > 0
    assert _broker_dead_letters(report) == []
    assert result.events.count("ReplyRetryScheduled") > 0  # replies did meet the blips
    assert report["final_states"]["Processed"] == 40, report["final_states"]
    assert {k: v for k, v in report["invariants"].items() if v} == {}, report["invariant_examples"]


def test_a_reply_whose_rounds_are_used_up_is_left_to_its_deadline_and_the_order_recovers_charged_once() -> None:
    profile = {"durable": {"outages": [{"start_s": 30, "duration_s": 90}]}, "remote": REPLIES_SPREAD}
    result = run_simulation(SimulationConfig(orders=40, seed=1, profile=Profile.parse(json.loads(json.dumps(profile)))))
    report = build_report(result)
    assert _broker_dead_letters(report) == []
    left = {event["orderId"] for event in result.events.named("ReplyLeftToDeadline")}
    assert left, "no reply outlasted its rounds: the outage is too short for this test"
    for order_id in left:
        moves = [t for t in result.audit.transitions if t.order_id == order_id]
        assert moves[-1].after.value == "Processed", (order_id, moves[-1])
        # the attempt that heard nothing ended at its deadline and the supervisor retried the order: no page
        assert any(t.event == "RetryScheduled" and "missed its deadline" in t.detail for t in moves), order_id
        # the retried step was answered under the same idempotency key: one charge, one shipment
        charges = result.ledger.effects(order_id, "charge")
        assert len(charges) == 1, charges
        assert result.ledger.net(order_id).shipments == 1
    assert {k: v for k, v in report["invariants"].items() if v} == {}, report["invariant_examples"]


def test_the_rounds_carry_a_reply_through_a_blip_when_the_relays_host_clock_is_behind() -> None:
    """Red team (redteam-relay): a copy was due at the host's clock plus its delay; with the app's clock 45 s behind
    Service Bus's, every copy was due in the past, the broker gave each back at once, the six rounds went in
    milliseconds and replies met by blips of 3 to 8 s were left to their deadlines (5 of 40 orders, each a supervisor
    retry; none without the skew). Now a round is due after its delay on the broker's clock (``send_copy``)."""
    profile = json.loads(BLIPS.read_text())
    profile["host"] = {"clock_skew_s": {"app": -45}}
    result = run_simulation(SimulationConfig(orders=40, seed=1, profile=Profile.parse(profile)))
    report = build_report(result)
    assert report["injected_faults"]["clock_skewed_invocations"] > 0
    assert result.events.count("ReplyRetryScheduled") > 0  # replies did meet the blips
    assert list(result.events.named("ReplyLeftToDeadline")) == []
    assert _broker_dead_letters(report) == []
    assert {k: v for k, v in report["invariants"].items() if v} == {}, report["invariant_examples"]


def test_the_rounds_carry_a_reply_through_a_blip_when_the_relays_host_clock_is_ahead() -> None:
    """Red team (redteam-relay2), the merge's claim kept: a copy was due at the later of the host's clock and the
    broker's time, plus its delay; with the app's clock 120 s ahead of Service Bus's every round was stretched by
    the lead, the second copy of a reply met by a blip came after its step's deadline, and 4 of 40 orders were
    retried by the supervisor for a missed deadline (seed 1). Now a reply carrying its deadline has each round due
    after its delay from the broker's time of the message handled (``round_before_deadline``)."""
    profile = json.loads(BLIPS.read_text())
    profile["host"] = {"clock_skew_s": {"app": 120}}
    result = run_simulation(SimulationConfig(orders=40, seed=1, profile=Profile.parse(profile)))
    report = build_report(result)
    assert report["injected_faults"]["clock_skewed_invocations"] > 0
    assert result.events.count("ReplyRetryScheduled") > 0  # replies did meet the blips
    missed = [t.order_id for t in result.audit.transitions if t.event == "RetryScheduled" and "missed" in t.detail]
    assert missed == []
    assert list(result.events.named("ReplyLeftToDeadline")) == []
    assert _broker_dead_letters(report) == []
    assert {k: v for k, v in report["invariants"].items() if v} == {}, report["invariant_examples"]
