"""The in-process inventory agent, called through its registered activity ``agent_inventory``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.remote.simulators.ledger import Ledger, NetEffect
from contracts.messages import AgentReply
from dependencies import use_context
from order_agents.activity_agent import InvalidAgentInput
from tests.agents.support import START, make_context, make_request


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def ledger(clock) -> Iterator[Ledger]:
    shared = Ledger()
    use_context(make_context(clock, ledger=shared))
    yield shared
    use_context(None)


@pytest.fixture
def agent_inventory(functions) -> Callable[[Any], Any]:
    """The registered activity, called as the host calls it (input bound to ``request``)."""
    activity = functions["agent_inventory"].func
    return lambda data: activity(request=data)


def test_it_is_an_activity_named_for_the_orchestrator(functions):
    [trigger] = list(functions["agent_inventory"].bindings)
    assert trigger["type"] == "activityTrigger"
    assert trigger["name"] == "request"


def test_a_reservation_request_returns_the_camel_case_reply(ledger, agent_inventory):
    request = make_request("reserve-inventory")
    output = agent_inventory(request.model_dump(mode="json", by_alias=True))
    assert output["requestId"] == request.request_id
    assert output["instanceId"] == request.instance_id
    assert output["outcome"] == "succeeded"
    assert output["result"]["units"] == 3
    assert output["result"]["reservationId"] == ledger.effects("order-1", "reserve")[0].reference
    assert AgentReply.model_validate(output).outcome == "succeeded"
    json.dumps(output)  # the host serialises it


def test_a_json_text_input_works_and_a_repeat_reserves_once(ledger, agent_inventory):
    request = make_request("reserve-inventory")
    first = agent_inventory(request.to_json())
    second = agent_inventory(request.model_dump(mode="json", by_alias=True))
    assert first == second
    assert ledger.net("order-1") == NetEffect(reserved_units=3)


def test_undo_releases_the_reservation(ledger, agent_inventory):
    agent_inventory(make_request("reserve-inventory").to_json())
    output = agent_inventory(make_request("reserve-inventory", action="undo", payload={}).to_json())
    assert output["outcome"] == "succeeded"
    assert ledger.net("order-1") == NetEffect()


def test_past_its_deadline_it_returns_none_and_reserves_nothing(ledger, clock, agent_inventory):
    clock.advance(timedelta(minutes=2))
    assert agent_inventory(make_request("reserve-inventory").to_json()) is None
    assert ledger.effects() == []


@pytest.mark.parametrize(
    "data",
    [
        "not json",
        {"requestId": "r"},
        make_request("charge-payment").model_dump(mode="json", by_alias=True),
    ],
)
def test_input_that_is_not_an_inventory_request_fails_the_activity(ledger, data, agent_inventory):
    with pytest.raises(InvalidAgentInput):
        agent_inventory(data)
    assert ledger.effects() == []
