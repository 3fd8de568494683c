"""Red team (s52): a forward step's result is carried on, in requests other agents read: its undo data in the undo's
request (``orchestrators/compensation.py``: the compensation entry's ``data`` and its ``seq``), the reservation in the
shipment's (``domain.payloads``). Every agent reads its request with ``parse``, which refuses a body over
``MAX_BODY_BYTES`` (64 KiB).

Before, the agent (``order_agents.runtime``) checked that its reply could be carried and the record could keep the
result, not that the requests carrying it on could be read: a payment service answering a ``chargeId`` of 65,071
characters (a reply of 65,5xx bytes, under the limit) was a charge taken; then each refund request, its envelope
larger than the reply's, was dead-lettered ``BodyTooLarge`` by the payment agent, every round, and the order ended
``CompensationFailed`` (the customer charged, not refunded). A ``reservationId`` of 65,058 characters did the same to
every shipment request (three dead letters, the order in ``Error``). Now such an answer is refused as the agent
refuses one the record cannot keep (``ResultTooLarge``: an unknown outcome, never a refusal): a forward result may
take at most ``CARRIED_LIMIT`` bytes in a message, the body's limit less room for the largest rest of a request."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.remote.interface import RemoteCall, RemoteService
from adapters.remote.services import remote_services
from adapters.remote.simulators.config import SimulatorConfig
from contracts.messages import AgentRequest
from contracts.names import ORDERS_QUEUE
from domain.compensation import compensation_instance_id, undo_idempotency_key, undo_request_id
from domain.ids import MAX_ATTEMPT, idempotency_key, instance_id, request_id
from domain.payloads import step_payload
from domain.states import ProcessState
from domain.workflow import step as workflow_step
from orchestrators.agent_call import agent_request
from order_agents.circuit_gate import DependencyGate
from order_agents.runtime import run_agent_request
from order_agents.service_bus_agent import parse_request
from tests.agents.support import START, ScriptedService, agent_settings, make_request
from tests.fakes import FakeReceivedMessage, HealthStoreWithoutMemory
from tests.operations.harness import OPERATOR, OpsHarness
from tests.submission.corpus import order

ORDER_ID = "o" + "9" * 63  # the longest order id: it is in every id of a request, four times
SHIP_TO = "\U0001f600" * 200  # the longest client text, 4 bytes each in a message
LONGEST_SEQ = 1000


def _answered(step: str, result: dict[str, Any]) -> bool:
    clock = ManualClock(START)
    values = agent_settings()
    gate = DependencyGate(HealthStoreWithoutMemory(), clock, values.circuit_policy)
    reply = run_agent_request(
        make_request(step, order_id=ORDER_ID), ScriptedService(clock, [result]), clock, values, random.Random(3), gate
    )
    return reply is not None and reply.outcome == "succeeded"


def _largest(step: str, field: str) -> dict[str, Any]:
    """The largest ``{field: "x" * n}`` result (1 byte a character in a message and in the record) the agent answers
    with, beside the step's other undo data."""
    extra = {"amountCents": 4200} if step == "charge-payment" else {}
    low, high = 0, 70_000
    while low < high:
        middle = (low + high + 1) // 2
        if _answered(step, {field: "x" * middle, **extra}):
            low = middle
        else:
            high = middle - 1
    return {field: "x" * low, **extra}


def _undo_request(step: str, result: dict[str, Any]) -> AgentRequest:
    """The undo's request as the compensation orchestration builds it, with the longest ids it can hold."""
    me = compensation_instance_id(ORDER_ID, MAX_ATTEMPT)
    the_step = workflow_step(step)
    data = {k: result[k] for k in the_step.undo_data if k in result}  # domain.compensation.log_entry
    return agent_request(
        request_id=undo_request_id(me, step, the_step.agent, LONGEST_SEQ),
        instance_id=me,
        order_id=ORDER_ID,
        step=step,
        action="undo",
        attempt=MAX_ATTEMPT,
        deadline=START + timedelta(seconds=60),
        idempotency_key=undo_idempotency_key(ORDER_ID, step),
        payload={**data, "seq": LONGEST_SEQ},
    )


def _shipment_request(reservation: dict[str, Any]) -> AgentRequest:
    me = instance_id(ORDER_ID, MAX_ATTEMPT)
    the_order = {"shipTo": SHIP_TO, "lines": [], "totalCents": 0, "currency": "EUR", "customerId": "c"}
    return agent_request(
        request_id=request_id(me, "arrange-shipment", "shipping"),
        instance_id=me,
        order_id=ORDER_ID,
        step="arrange-shipment",
        action="do",
        attempt=MAX_ATTEMPT,
        deadline=START + timedelta(seconds=60),
        idempotency_key=idempotency_key(ORDER_ID, "arrange-shipment"),
        payload=step_payload("arrange-shipment", the_order, {"reserve-inventory": reservation}),
    )


def _read_by(agent_name: str, request: AgentRequest) -> None:
    parse_request(FakeReceivedMessage.of(request.to_json().encode("utf-8")), agent_name)  # InvalidMessage if not


def test_the_largest_charge_the_agent_accepts_can_still_be_refunded() -> None:
    result = _largest("charge-payment", "chargeId")
    _read_by("payment", _undo_request("charge-payment", result))


def test_the_largest_reservation_the_agent_accepts_can_still_be_shipped_and_released() -> None:
    result = _largest("reserve-inventory", "reservationId")
    _read_by("shipping", _shipment_request(result))
    _read_by("inventory", _undo_request("reserve-inventory", result))  # in-process, but the same request


class _Padded:
    """The simulated service, its answer's ``field`` replaced by ``size`` characters: a provider's odd answer."""

    def __init__(self, inner: RemoteService, action: str, field: str, size: int) -> None:
        self._inner, self._action, self._field, self._size = inner, action, field, size

    def call(self, request: RemoteCall) -> dict[str, Any]:
        answer = dict(self._inner.call(request))
        if request.action == self._action:
            answer[self._field] = "x" * self._size
        return answer


@pytest.fixture
def harness(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR)
    yield made
    made.close()


# The largest the agent accepted before (its reply carriable): the refund's and the shipment's requests could not be.
CASES = {
    "a charge id of 65,071 characters, the shipment refused": ("payment", "charge", "chargeId", 65_071, True),
    "a reservation id of 65,058 characters": ("inventory", "reserve", "reservationId", 65_058, False),
}


@pytest.mark.cosmos
@pytest.mark.parametrize("case", sorted(CASES))
def test_no_request_carrying_a_service_answer_is_dead_lettered_too_large(harness: OpsHarness, case: str) -> None:
    service, action, field, size, ship_fails = CASES[case]
    assert harness.ctx is not None
    configs = {"shipping": SimulatorConfig(permanent_error_rate=1.0)} if ship_fails else {}
    remote = remote_services(harness.ctx.settings, harness.clock, configs, seed=3)
    remote[service] = _Padded(remote[service], action, field, size)
    harness.change_context(remote=remote)

    harness.send(ORDERS_QUEUE, json.dumps(order(orderId=ORDER_ID)), ORDER_ID)
    harness.host.run_until(harness.clock.now() + timedelta(hours=2))

    too_large = [(d.message_id, d.description) for d in harness.broker.dead_letters() if d.reason == "BodyTooLarge"]
    assert too_large == []
    record = harness.ctx.states.get(ORDER_ID)
    assert record is not None and record.process_state is not ProcessState.COMPENSATION_FAILED, record


@pytest.mark.parametrize("number", [2**53, -(2**53), 2**64 - 1, 10**4000])
def test_a_result_holding_an_integer_the_record_would_round_is_an_unknown_outcome(number: int) -> None:
    """As ``adapters/remote/http_service.py`` refuses such an answer where it enters (``read_outside_json``), the
    agent refuses it from any service (the reply relay dead-letters a reply holding one, ``ResultNotExact``): the
    record would keep another number, or null."""
    clock = ManualClock(START)
    values = agent_settings()
    gate = DependencyGate(HealthStoreWithoutMemory(), clock, values.circuit_policy)
    answer = {"chargeId": "ch-1", "legs": [{"authorization": number}]}
    reply = run_agent_request(make_request(), ScriptedService(clock, [answer]), clock, values, random.Random(3), gate)
    assert reply is not None and (reply.outcome, reply.transient) == ("failed", True)
    assert reply.error is not None and "ResultNotExact" in reply.error and "'legs.0.authorization'" in reply.error
