"""The agent core: deadline, retries inside the deadline with one idempotency key, outcomes."""

from __future__ import annotations

import itertools
import json
import logging
import random
from datetime import timedelta

import pytest

from adapters.clock import ManualClock
from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.service import SimulatedService
from order_agents.circuit_gate import DependencyGate
from order_agents.runtime import run_agent_request
from tests.agents.support import START, ScriptedService, agent_settings, make_request, permanent, transient
from tests.fakes import HealthStoreWithoutMemory


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


def run(request, service, clock, **settings):
    """The agent core with circuits that never open (these tests are about one request's retries)."""
    values = agent_settings(**settings)
    gate = DependencyGate(HealthStoreWithoutMemory(), clock, values.circuit_policy)
    return run_agent_request(request, service, clock, values, random.Random(3), gate)


def test_a_request_already_past_its_deadline_is_dropped_without_a_call(clock):
    service = ScriptedService(clock, [{"chargeId": "x"}])
    request = make_request(deadline=START)
    assert run(request, service, clock) is None
    assert service.calls == []


def test_success_is_a_succeeded_reply_carrying_the_result(clock):
    service = ScriptedService(clock, [{"chargeId": "ch-1", "amountCents": 4200}])
    request = make_request(attempt=3)
    reply = run(request, service, clock)
    assert reply is not None
    assert (reply.outcome, reply.transient, reply.error) == ("succeeded", False, None)
    assert reply.result == {"chargeId": "ch-1", "amountCents": 4200}
    assert (reply.request_id, reply.instance_id, reply.order_id, reply.step) == (
        request.request_id,
        request.instance_id,
        request.order_id,
        request.step,
    )
    [(_, remote_call)] = service.calls
    assert remote_call.service == "payment"
    assert remote_call.action == "charge"
    assert remote_call.order_id == "order-1"
    assert remote_call.idempotency_key == request.idempotency_key
    assert remote_call.fencing_token == 3
    assert remote_call.payload == request.payload


def test_transient_failures_are_retried_with_backoff_and_the_same_key(clock):
    service = ScriptedService(clock, [transient(), transient(), {"chargeId": "ch-1"}])
    reply = run(make_request(), service, clock)
    assert reply is not None and reply.outcome == "succeeded"
    starts = [at for at, _ in service.calls]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    # base 1 s doubling, equal jitter: [0.5, 1] x 1 s, then [0.5, 1] x 2 s
    assert 0.5 <= gaps[0] <= 1.0
    assert 1.0 <= gaps[1] <= 2.0
    assert {c.idempotency_key for _, c in service.calls} == {"order-1:charge-payment"}
    assert {c.fencing_token for _, c in service.calls} == {1}


def test_a_permanent_failure_is_a_failed_reply_without_retry(clock):
    service = ScriptedService(clock, [permanent("card declined")])
    reply = run(make_request(), service, clock)
    assert reply is not None
    assert (reply.outcome, reply.transient) == ("failed", False)
    assert reply.error == "card declined"
    assert len(service.calls) == 1


def test_transient_failures_that_use_up_the_attempts_are_a_transient_failed_reply(clock):
    service = ScriptedService(clock, [transient("still busy")])
    reply = run(make_request(deadline=START + timedelta(hours=1)), service, clock, AGENT_MAX_ATTEMPTS="3")
    assert reply is not None
    assert (reply.outcome, reply.transient, reply.error) == ("failed", True, "still busy")
    assert len(service.calls) == 3


def test_no_retry_starts_unless_it_can_start_before_the_deadline(clock):
    deadline = START + timedelta(seconds=2.5)
    service = ScriptedService(clock, [transient()], latency_s=0.2)
    reply = run(make_request(deadline=deadline), service, clock, AGENT_MAX_ATTEMPTS="10")
    assert reply is not None
    assert (reply.outcome, reply.transient) == ("failed", True)
    assert 2 <= len(service.calls) < 10
    assert all(at < deadline for at, _ in service.calls)
    assert clock.now() < deadline  # it gave up early instead of sleeping past the deadline


def test_work_that_succeeds_after_the_deadline_sends_no_reply_but_did_happen(clock):
    deadline = START + timedelta(seconds=1)
    payment = SimulatedService("payment", clock, SimulatorConfig(latency_ms=(1500, 1500)))
    assert run(make_request(deadline=deadline), payment, clock) is None
    assert len(payment.ledger.effects("order-1", "charge")) == 1  # in-flight work finished


def test_a_failure_that_arrives_after_the_deadline_sends_no_reply(clock):
    service = ScriptedService(clock, [permanent()], latency_s=5)
    assert run(make_request(deadline=START + timedelta(seconds=1)), service, clock) is None


def test_retries_through_a_simulated_flaky_service_charge_exactly_once(clock):
    payment = SimulatedService("payment", clock, SimulatorConfig(response_loss_rate=1.0))
    reply = run(make_request(), payment, clock)
    assert reply is not None and reply.outcome == "succeeded"
    assert payment.calls == 2
    [effect] = payment.ledger.effects("order-1")
    assert reply.result == {"chargeId": effect.reference, "amountCents": 4200}


def test_a_rerun_of_the_same_request_returns_the_same_result_and_charges_once(clock):
    payment = SimulatedService("payment", clock)
    first = run(make_request(), payment, clock)
    second = run(make_request(), payment, clock)
    assert first is not None and second is not None
    assert first.result == second.result
    assert payment.ledger.net("order-1").charged_cents == 4200


def test_a_stale_attempt_is_refused_by_the_service_and_fails_permanently(clock):
    payment = SimulatedService("payment", clock)
    newer = run(make_request(attempt=2), payment, clock)
    stale = run(make_request(attempt=1), payment, clock)
    assert newer is not None and newer.outcome == "succeeded"
    assert stale is not None and (stale.outcome, stale.transient) == ("failed", False)
    assert "stale fencing token" in (stale.error or "")


def test_undo_runs_the_steps_compensating_action(clock):
    payment = SimulatedService("payment", clock)
    run(make_request(), payment, clock)
    reply = run(make_request(action="undo", payload={}), payment, clock)
    assert reply is not None and reply.outcome == "succeeded"
    assert reply.result is not None and reply.result["amountCents"] == 4200
    assert payment.ledger.net("order-1").charged_cents == 0


def test_an_undo_names_the_forward_key_it_fences_and_a_later_forward_call_does_nothing(clock):
    """An undo of an unknown outcome runs while the forward call may still be on its way: after the
    undo, the forward request (a redelivery, a slow agent) is refused by the service."""
    payment = SimulatedService("payment", clock)
    undo = make_request(action="undo", payload={}).model_copy(update={"idempotency_key": "order-1:charge-payment:undo"})
    undone = run(undo, payment, clock)
    assert undone is not None and undone.outcome == "succeeded"
    late = run(make_request(), payment, clock)
    assert late is not None and (late.outcome, late.transient) == ("failed", False)
    assert "fenced" in (late.error or "")
    assert payment.ledger.effects("order-1", "charge") == []


@pytest.mark.parametrize(
    ("step", "action", "message"),
    [("arrange-shipment", "undo", "no undo action"), ("charge-payment", "redo", "neither")],
)
def test_an_action_the_step_does_not_have_is_a_permanent_failure_without_a_call(clock, step, action, message):
    service = ScriptedService(clock, [{"ok": True}])
    reply = run(make_request(step, action=action), service, clock)
    assert reply is not None and (reply.outcome, reply.transient) == ("failed", False)
    assert message in (reply.error or "")
    assert service.calls == []


def test_calls_retries_and_outcome_are_logged_with_the_request_identity(clock, caplog):
    caplog.set_level(logging.INFO, logger="order_agents.runtime")
    service = ScriptedService(clock, [transient(), {"chargeId": "c"}])
    request = make_request(attempt=2)
    run(request, service, clock)
    records = [r for r in caplog.records if r.name == "order_agents.runtime"]
    messages = [r.getMessage() for r in records]
    assert any(m.startswith("calling payment.charge") for m in messages)
    assert any("retrying in" in m for m in messages)
    assert messages[-1] == "succeeded"
    for record in records:
        assert record.__dict__["orderId"] == "order-1"
        assert record.__dict__["step"] == "charge-payment"
        assert record.__dict__["requestId"] == request.request_id
        assert record.__dict__["attempt"] == 2


@pytest.mark.parametrize(
    ("result", "reason"),
    [({"blob": "x" * 70_000}, "BodyTooLarge"), ({"deep": json.loads("[" * 40 + "]" * 40)}, "NestingTooDeep")],
    ids=["too large", "too deep"],
)
def test_a_succeeded_answer_no_reply_can_carry_is_an_unknown_outcome_that_says_why(clock, result, reason):
    """The relay would dead-letter the succeeded reply (the attempt would never hear of it): the agent
    replies a failure naming the reason instead, in a reply the relay takes. Transient: the call acted,
    so it must never read as a refusal (the fallback provider would be charged under the same key)."""
    reply = run(make_request(), ScriptedService(clock, [result]), clock)
    assert reply is not None and (reply.outcome, reply.transient) == ("failed", True), reply
    assert reply.error is not None and reason in reply.error and "cannot be carried" in reply.error
    assert len(reply.to_json()) < 2000


def test_a_retry_budget_past_a_thousand_calls_ends_in_a_reply_not_an_overflow(clock):
    """Found by the red team on ed08fef: ``AGENT_MAX_ATTEMPTS`` takes any count and ``AGENT_RETRY_BASE_MS`` 0 or
    more, and the backoff (``domain.retry.exponential_backoff``) computed ``base * 2**(failures - 1)`` as a float:
    the 1,026th transient failure raised ``OverflowError`` (int too large to convert to float), which escaped the
    agent's trigger on every delivery until ``MaxDeliveryCountExceeded``, no reply sent. The supervisor's backoff
    (``MAX_FAILURES``, a count too) is the same arithmetic. Past the cap, every backoff is the cap."""
    service = ScriptedService(clock, [transient()])
    request = make_request(deadline=START + timedelta(hours=1))
    reply = run(request, service, clock, AGENT_MAX_ATTEMPTS="1100", AGENT_RETRY_BASE_MS="1", AGENT_RETRY_MAX_MS="1")
    assert reply is not None and reply.outcome == "failed" and reply.transient
    assert len(service.calls) == 1100
