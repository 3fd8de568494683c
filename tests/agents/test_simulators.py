"""The simulated remote services: idempotency, fencing, ledger, outages, latency and seeded faults."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.remote.interface import RemoteCall, RemoteError
from adapters.remote.simulators.config import Outage, SimulatorConfig
from adapters.remote.simulators.fleet import simulated_services
from adapters.remote.simulators.ledger import Ledger, NetEffect
from adapters.remote.simulators.service import SimulatedService
from tests.agents.support import START


def charge(key: str = "o1:charge-payment", token: int = 1, order: str = "o1", cents: int = 500) -> RemoteCall:
    return RemoteCall("payment", "charge", order, key, token, {"amountCents": cents, "currency": "EUR"})


def call(service: str, action: str, order: str = "o1", key: str | None = None, token: int = 1, **payload):
    return RemoteCall(service, action, order, key or f"{order}:{action}", token, dict(payload))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


def test_same_key_and_action_give_the_same_result_and_one_side_effect(clock):
    payment = SimulatedService("payment", clock)
    first = payment.call(charge())
    second = payment.call(charge())
    assert first == second
    assert first["chargeId"].startswith("ch-")
    assert first["amountCents"] == 500
    assert [e.reference for e in payment.ledger.effects("o1")] == [first["chargeId"]]
    assert payment.ledger.net("o1") == NetEffect(charged_cents=500)


def test_a_different_key_is_a_different_side_effect(clock):
    payment = SimulatedService("payment", clock)
    a = payment.call(charge(key="k1"))
    b = payment.call(charge(key="k2"))
    assert a["chargeId"] != b["chargeId"]
    assert payment.ledger.net("o1").charged_cents == 1000


def test_the_replayed_result_is_a_copy_callers_cannot_corrupt(clock):
    payment = SimulatedService("payment", clock)
    first = payment.call(charge())
    first["chargeId"] = "tampered"
    assert payment.call(charge())["chargeId"] != "tampered"


def test_a_lower_fencing_token_than_seen_for_the_key_is_refused_permanently(clock):
    payment = SimulatedService("payment", clock)
    newer = payment.call(charge(token=2))
    with pytest.raises(RemoteError) as refused:
        payment.call(charge(token=1))
    assert refused.value.transient is False
    assert "stale fencing token" in str(refused.value)
    assert payment.call(charge(token=2)) == newer  # the owner's retry still works
    assert payment.call(charge(token=3)) == newer  # a newer attempt gets the recorded result
    with pytest.raises(RemoteError, match="stale fencing token"):
        payment.call(charge(token=2))
    assert len(payment.ledger.effects("o1")) == 1


def test_fencing_is_per_idempotency_key(clock):
    payment = SimulatedService("payment", clock)
    payment.call(charge(key="k1", token=5))
    payment.call(charge(key="k2", token=1))  # another key: its own highest token
    assert len(payment.ledger.effects("o1")) == 2


def test_a_lost_response_is_retried_without_a_second_charge(clock):
    payment = SimulatedService("payment", clock, SimulatorConfig(response_loss_rate=1.0))
    with pytest.raises(RemoteError) as lost:
        payment.call(charge())
    assert lost.value.transient is True
    assert lost.value.timed_out is True  # to the caller, a lost answer is a timeout
    assert len(payment.ledger.effects("o1", "charge")) == 1  # it did take effect
    retried = payment.call(charge())
    assert retried["chargeId"] == payment.ledger.effects("o1")[0].reference
    assert len(payment.ledger.effects("o1", "charge")) == 1


def test_a_permanent_failure_is_remembered_for_the_key_and_has_no_side_effect(clock):
    payment = SimulatedService("payment", clock, SimulatorConfig(permanent_error_rate=1.0))
    for _ in range(2):
        with pytest.raises(RemoteError) as refused:
            payment.call(charge())
        assert refused.value.transient is False
    assert payment.ledger.effects() == []


def test_a_transient_failure_has_no_side_effect(clock):
    payment = SimulatedService("payment", clock, SimulatorConfig(transient_error_rate=1.0))
    with pytest.raises(RemoteError) as failed:
        payment.call(charge())
    assert failed.value.transient is True
    assert payment.ledger.effects() == []


def test_net_effect_nets_reserve_against_release_and_charge_against_refund(clock):
    ledger = Ledger()
    services = simulated_services(clock, ledger=ledger)
    reservation = services["inventory"].call(
        call("inventory", "reserve", lines=[{"sku": "A", "quantity": 2}, {"sku": "B", "quantity": 3}])
    )
    assert reservation["units"] == 5
    services["payment"].call(call("payment", "charge", amountCents=900))
    services["shipping"].call(call("shipping", "ship", shipTo="x"))
    assert ledger.net("o1") == NetEffect(reserved_units=5, charged_cents=900, shipments=1)

    released = services["inventory"].call(call("inventory", "release"))
    refunded = services["payment"].call(call("payment", "refund"))
    assert released["units"] == 5
    assert refunded["amountCents"] == 900
    assert refunded["refundId"].startswith("rf-")
    assert ledger.net("o1") == NetEffect(shipments=1)
    assert [e.action for e in ledger.effects("o1")] == ["reserve", "charge", "ship", "release", "refund"]
    assert all(e.at == START for e in ledger.effects("o1"))


def test_undoing_what_was_never_done_succeeds_without_a_side_effect(clock):
    payment = SimulatedService("payment", clock)
    result = payment.call(call("payment", "refund"))
    assert result == {"refundId": None, "amountCents": 0}
    assert payment.ledger.effects() == []
    assert payment.ledger.net("o1") == NetEffect()


def test_an_unknown_action_or_a_bad_payload_is_a_permanent_error(clock):
    payment = SimulatedService("payment", clock)
    with pytest.raises(RemoteError) as unknown:
        payment.call(call("payment", "ship"))
    assert unknown.value.transient is False
    with pytest.raises(RemoteError, match="amountCents") as bad:
        payment.call(call("payment", "charge", amountCents="lots"))
    assert bad.value.transient is False
    assert payment.ledger.effects() == []


def test_outage_windows_fail_every_call_transiently_relative_to_the_origin(clock):
    config = SimulatorConfig(outages=(Outage(timedelta(seconds=10), timedelta(seconds=5)),), origin=START)
    inventory = SimulatedService("inventory", clock, config)

    def attempt_at(seconds: float, key: str) -> bool:
        clock.set(START + timedelta(seconds=seconds))
        try:
            inventory.call(call("inventory", "reserve", key=key))
        except RemoteError as exc:
            assert exc.transient is True
            assert "outage" in str(exc)
            return False
        return True

    assert attempt_at(9.999, "a") is True
    assert attempt_at(10, "b") is False
    assert attempt_at(14.9, "c") is False
    assert attempt_at(15, "d") is True
    assert [e.idempotency_key for e in inventory.ledger.effects()] == ["a", "d"]


def test_without_an_origin_outages_count_from_the_first_call(clock):
    clock.set(START + timedelta(hours=1))
    config = SimulatorConfig(outages=(Outage(timedelta(seconds=1), timedelta(seconds=1)),))
    shipping = SimulatedService("shipping", clock, config)
    shipping.call(call("shipping", "ship", key="first"))
    clock.advance(timedelta(seconds=1.5))
    with pytest.raises(RemoteError, match="outage"):
        shipping.call(call("shipping", "ship", key="second"))


def test_latency_is_spent_on_the_clock_within_the_range(clock):
    shipping = SimulatedService("shipping", clock, SimulatorConfig(latency_ms=(200, 400)))
    for n in range(20):
        before = clock.now()
        shipping.call(call("shipping", "ship", key=f"k{n}"))
        spent = (clock.now() - before).total_seconds()
        assert 0.2 <= spent <= 0.4


def outcomes(seed: int, n: int = 2000) -> list[str]:
    service = SimulatedService(
        "payment",
        ManualClock(START),
        SimulatorConfig(transient_error_rate=0.2, permanent_error_rate=0.1),
        seed=seed,
    )
    result = []
    for i in range(n):
        try:
            service.call(charge(key=f"k{i}"))
            result.append("ok")
        except RemoteError as exc:
            result.append("transient" if exc.transient else "permanent")
    return result


def test_error_rates_follow_the_config_and_the_seed_makes_them_reproducible():
    run = outcomes(seed=11)
    assert 0.17 < run.count("transient") / len(run) < 0.23
    assert 0.08 < run.count("permanent") / len(run) < 0.12
    assert outcomes(seed=11) == run
    assert outcomes(seed=12) != run


def test_concurrent_calls_with_one_key_charge_once(clock):
    payment = SimulatedService("payment", clock)
    results: list[dict[str, Any]] = []
    lock = threading.Lock()

    def worker() -> None:
        answer = payment.call(charge())
        with lock:
            results.append(answer)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 16
    assert len({r["chargeId"] for r in results}) == 1
    assert len(payment.ledger.effects("o1")) == 1


def test_concurrent_calls_with_distinct_keys_get_distinct_references(clock):
    payment = SimulatedService("payment", clock)
    threads = [threading.Thread(target=payment.call, args=(charge(key=f"k{i}"),)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    references = [e.reference for e in payment.ledger.effects("o1")]
    assert len(references) == 32
    assert len(set(references)) == 32


def test_a_fleet_shares_one_ledger_and_gives_each_service_its_own_config(clock):
    ledger = Ledger()
    fleet = simulated_services(clock, {"payment": SimulatorConfig(transient_error_rate=1.0)}, ledger)
    assert sorted(fleet) == ["inventory", "payment", "payment_backup", "shipping"]
    assert all(s.ledger is ledger for s in fleet.values())
    fleet["shipping"].call(call("shipping", "ship"))
    with pytest.raises(RemoteError):
        fleet["payment"].call(call("payment", "charge", amountCents=1))
    assert [e.service for e in ledger.effects()] == ["shipping"]
    with pytest.raises(ValueError, match="no simulator"):
        simulated_services(clock, {"billing": SimulatorConfig()})


def test_an_undo_fences_the_forward_key_so_a_call_still_in_flight_never_takes_effect(clock):
    """The slow forward call's client gave up; its undo reaches the service while the service still works on
    it: the forward call, landing after its undo, is refused instead of charging an order whose undo already
    found nothing to refund."""
    payment = SimulatedService("payment", clock, SimulatorConfig(latency_ms=(90_000, 90_000)))
    with pytest.raises(RemoteError, match="timed out"):
        payment.call(charge())
    payment.config = SimulatorConfig(latency_ms=(1_000, 1_000))
    refund = RemoteCall("payment", "refund", "o1", "o1:charge-payment:undo", 1, {}, fences_key="o1:charge-payment")
    assert payment.call(refund) == {"refundId": None, "amountCents": 0}
    payment.finish()
    assert payment.ledger.effects("o1", "charge") == []
    assert payment.fenced_refusals == 1
    with pytest.raises(RemoteError, match="fenced") as refused:
        payment.call(charge())  # the agent's retry, or a redelivery: refused for good
    assert refused.value.transient is False


def test_a_forward_call_done_before_its_undo_is_refunded_and_never_repeated(clock):
    payment = SimulatedService("payment", clock)
    payment.call(charge())
    undo = RemoteCall("payment", "refund", "o1", "o1:charge-payment:undo", 1, {}, fences_key="o1:charge-payment")
    assert payment.call(undo)["amountCents"] == 500
    with pytest.raises(RemoteError, match="fenced"):
        payment.call(charge(token=2))
    assert payment.ledger.net("o1") == NetEffect()


def test_the_fence_is_per_key_and_per_service(clock):
    services = simulated_services(clock)
    undo = RemoteCall("payment", "refund", "o1", "o1:charge-payment:undo", 1, {}, fences_key="o1:charge-payment")
    services["payment"].call(undo)
    assert services["payment"].call(charge(key="o2:charge-payment", order="o2"))["amountCents"] == 500
    assert services["payment_backup"].call(charge())["amountCents"] == 500  # another provider: its own fences


def test_the_slow_tail_takes_its_own_latency_range(clock):
    config = SimulatorConfig(latency_ms=(10, 10), slow_call_rate=1.0, slow_latency_ms=(120_000, 120_000))
    payment = SimulatedService("payment", clock, config)
    with pytest.raises(RemoteError, match="timed out"):
        payment.call(charge())
    payment.finish()
    assert [e.at - START for e in payment.ledger.effects("o1")] == [timedelta(seconds=120)]
    assert payment.slow_calls == 1
    assert payment.abandoned == [120.0]
    with pytest.raises(ValueError, match="slow_latency_ms"):
        SimulatorConfig(slow_latency_ms=(5, 1))
    parsed = SimulatorConfig.from_profile({"slow_call_rate": 0.2, "slow_latency_ms": [60_000, 240_000]})
    assert (parsed.slow_call_rate, parsed.slow_latency_ms) == (0.2, (60_000.0, 240_000.0))
