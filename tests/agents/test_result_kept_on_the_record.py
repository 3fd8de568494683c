"""A forward step's result goes on the state record, one Cosmos DB item: the app's agent answers one that
would take more than ``domain.records.RESULT_LIMIT`` bytes as the store sends it (characters past ASCII
escaped: DEL, 1 byte in a reply, is 6 in the record) as it answers one no reply can carry: a transient failure,
the outcome unknown (the call acted; the supervisor retries under the same key, compensation undoes it by its
key). Before, a reply of 64 KB put up to 390 KB into the record, twice with its undo data
(tests/adapters/test_record_fits_an_item.py)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from adapters.clock import ManualClock
from contracts.messages import AgentReply
from contracts.parsing import parse
from domain.records import RESULT_LIMIT, stored_size
from order_agents.circuit_gate import DependencyGate
from order_agents.runtime import run_agent_request
from tests.agents.support import START, ScriptedService, agent_settings, make_request
from tests.fakes import HealthStoreWithoutMemory

ENVELOPE = stored_size({"reservationId": ""})
AT_THE_LIMIT = {"reservationId": "\x7f" * ((RESULT_LIMIT - ENVELOPE) // 6)}
PAST_THE_LIMIT = {"reservationId": "\x7f" * ((RESULT_LIMIT - ENVELOPE) // 6 + 1)}


def _reply(result: dict[str, Any], action: str = "do") -> AgentReply:
    clock = ManualClock(START)
    settings = agent_settings()
    gate = DependencyGate(HealthStoreWithoutMemory(), clock, settings.circuit_policy)
    request = make_request("reserve-inventory", action=action)
    reply = run_agent_request(request, ScriptedService(clock, [result]), clock, settings, random.Random(1), gate)
    assert reply is not None
    parse(reply.to_json().encode(), {"AgentReply": AgentReply})  # the relay takes it, either way
    return reply


def test_the_limit_is_measured_as_the_store_sends_it() -> None:
    assert stored_size(AT_THE_LIMIT) <= RESULT_LIMIT < stored_size(PAST_THE_LIMIT)
    assert len(json.dumps(PAST_THE_LIMIT, ensure_ascii=False).encode()) < RESULT_LIMIT // 5  # a reply carries it


def test_a_result_the_record_can_keep_is_answered() -> None:
    reply = _reply(AT_THE_LIMIT)
    assert reply.outcome == "succeeded" and reply.result == AT_THE_LIMIT


def test_a_result_past_the_limit_is_an_unknown_outcome_not_a_refusal() -> None:
    reply = _reply(PAST_THE_LIMIT)
    assert reply.outcome == "failed" and reply.transient and reply.result is None
    assert reply.error is not None and "ResultTooLarge" in reply.error and f"{RESULT_LIMIT:,}" in reply.error


@pytest.mark.parametrize("result", [AT_THE_LIMIT, PAST_THE_LIMIT], ids=["at", "past"])
def test_an_undo_answer_is_not_refused_for_its_size(result: dict[str, Any]) -> None:
    """An undo's answer is kept only in part, each field bounded (``domain.compensation.undo_result``)."""
    assert _reply(result, action="undo").outcome == "succeeded"
