"""Red team 5: a reply the app's own agent builds from a real service's answer reaches the relay
(contracts/parsing.py ``parse`` now refuses integers past 64 bits and non-finite numbers)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from adapters.clock import ManualClock
from contracts.messages import AgentReply
from contracts.parsing import parse
from order_agents.circuit_gate import DependencyGate
from order_agents.runtime import run_agent_request
from tests.agents.support import START, ScriptedService, agent_settings, make_request
from tests.fakes import HealthStoreWithoutMemory

# What ``adapters/remote/http_service.py`` hands the agent: ``json.loads`` of the service's answer,
# which keeps any integer and takes NaN and Infinity.
SERVICE_ANSWERS = {
    "a float amount": '{"chargeId": "ch-1", "fxRate": 1.0842021724855044e-19}',
    "a NaN score": '{"chargeId": "ch-1", "riskScore": NaN}',
    "an Infinity limit": '{"chargeId": "ch-1", "limit": Infinity}',
}


@pytest.mark.parametrize("answer", list(SERVICE_ANSWERS.values()), ids=list(SERVICE_ANSWERS))
def test_a_succeeded_reply_built_from_a_service_answer_is_accepted_by_the_relay(answer: str) -> None:
    """FINDING for the uint64 case. The charge succeeded at the provider; the agent's reply carries the
    provider's answer as it came; the relay (order_agents/reply_relay.py ``relay_reply``) dead-letters
    it ``InvalidFields`` ("out of range") since b6c1252. The attempt never hears that the pivot step
    succeeded: its deadline passes, the retried charge (same idempotency key) gets the same answer
    and the same dead-letter, and the order ends failed or compensated after a successful payment.
    The agent should make its reply carriable (or the contract should bound ``result``), not the relay
    refuse the app's own message. (The uint64 and int64 cases moved below: the agent now says the record would
    round them, a failure the relay reads.)"""
    clock = ManualClock(START)
    result: dict[str, Any] = json.loads(answer)
    service = ScriptedService(clock, [result])
    values = agent_settings()
    gate = DependencyGate(HealthStoreWithoutMemory(), clock, values.circuit_policy)
    reply = run_agent_request(make_request(), service, clock, values, random.Random(3), gate)
    assert reply is not None and reply.outcome == "succeeded"
    relayed = parse(reply.to_json().encode("utf-8"), {"AgentReply": AgentReply})  # what the relay does
    assert relayed.outcome == "succeeded" and relayed.result is not None
    assert relayed.result["chargeId"] == "ch-1"


# Integers past 2**53: the state record would round them (Cosmos DB keeps doubles). ``adapters/remote/http_service.py``
# refuses such an answer where it enters; since red team s52 the agent refuses it from any service too (the relay
# dead-letters a succeeded reply holding one, ``ResultNotExact``): a failure saying why, which the relay reads.
INEXACT_ANSWERS = {
    "a uint64 authorisation id": '{"chargeId": "ch-1", "authorization": 18446744073709551615}',
    "an int64 id": '{"chargeId": "ch-1", "authorization": 9223372036854775807}',
}


@pytest.mark.parametrize("answer", list(INEXACT_ANSWERS.values()), ids=list(INEXACT_ANSWERS))
def test_a_service_answer_the_record_would_round_is_a_failure_the_relay_reads(answer: str) -> None:
    clock = ManualClock(START)
    service = ScriptedService(clock, [json.loads(answer)])
    values = agent_settings()
    gate = DependencyGate(HealthStoreWithoutMemory(), clock, values.circuit_policy)
    reply = run_agent_request(make_request(), service, clock, values, random.Random(3), gate)
    assert reply is not None and (reply.outcome, reply.transient) == ("failed", True)
    relayed = parse(reply.to_json().encode("utf-8"), {"AgentReply": AgentReply})  # what the relay does
    assert relayed.error is not None and "ResultNotExact" in relayed.error and "'authorization'" in relayed.error
