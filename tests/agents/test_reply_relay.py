"""The reply relay, called through its registered function ``agent_reply_relay`` (the original
function under the durable-client wrapper) with a client that fails the way the SDK fails."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus

from contracts.messages import AgentReply
from contracts.names import AGENT_REPLIES_QUEUE, AGENT_REPLY_EVENT, SERVICE_BUS_CONNECTION
from tests.fakes import FakeReceivedMessage, RecordingActions


class FakeDurableClient:
    """``DurableOrchestrationClient.raise_event`` / ``get_status`` over a table of instances.
    Like the SDK: ``raise_event`` raises a plain ``Exception`` for an unknown (404) or finished
    (410) instance; ``get_status`` of an unknown instance returns a status without runtimeStatus."""

    def __init__(self, instances: dict[str, str], *, broken: bool = False, status_broken: bool = False) -> None:
        self.instances = instances  # instance id -> runtime status
        self.broken = broken  # raise_event fails for every instance (the host is unreachable)
        self.status_broken = status_broken
        self.raised: list[tuple[str, str, Any]] = []

    async def raise_event(self, instance_id: str, event_name: str, event_data: Any = None) -> None:
        status = self.instances.get(instance_id)
        if self.broken:
            raise Exception("Webhook returned unrecognized status code 503")
        if status is None:
            raise Exception(f"No instance with ID {instance_id} found.")
        if status in ("Completed", "Failed", "Terminated"):
            raise Exception(f"Instance with ID {instance_id} is gone: either completed or failed")
        self.raised.append((instance_id, event_name, event_data))

    async def get_status(self, instance_id: str) -> DurableOrchestrationStatus:
        if self.status_broken:
            raise Exception("The operation failed with an unexpected status code 503")
        status = self.instances.get(instance_id)
        if status is None:  # 404: the SDK builds a status from the error text
            return DurableOrchestrationStatus.from_json(f"No instance with ID {instance_id} found.")
        return DurableOrchestrationStatus(
            instanceId=instance_id, runtimeStatus=status, createdTime="2026-01-01T00:00:00Z"
        )


REPLY = AgentReply(
    request_id="order-1:2:charge-payment:payment",
    instance_id="order-1:2",
    order_id="order-1",
    step="charge-payment",
    outcome="succeeded",
    result={"chargeId": "ch-1", "amountCents": 4200},
)


def relay(functions, client: FakeDurableClient, body: Any) -> RecordingActions:
    wrapper = functions["agent_reply_relay"].func
    original = getattr(wrapper, "client_function", None) or wrapper.__wrapped__
    actions = RecordingActions()
    asyncio.run(original(message=FakeReceivedMessage.of(body), message_actions=actions, client=client))
    return actions


def test_it_is_a_manually_settled_trigger_on_agent_replies_with_a_durable_client(functions):
    bindings = {b["type"]: b for b in functions["agent_reply_relay"].bindings}
    assert bindings["serviceBusTrigger"]["queueName"] == AGENT_REPLIES_QUEUE
    assert bindings["serviceBusTrigger"]["connection"] == SERVICE_BUS_CONNECTION
    assert bindings["serviceBusTrigger"]["autoCompleteMessages"] is False
    assert bindings["durableClient"]["name"] == "client"


def test_a_reply_is_raised_as_the_event_of_its_instance_and_completed(functions):
    client = FakeDurableClient({"order-1:2": "Running"})
    actions = relay(functions, client, REPLY.to_json())
    assert actions.only == ("complete", {})
    [(instance, event, data)] = client.raised
    assert (instance, event) == ("order-1:2", AGENT_REPLY_EVENT)
    assert data == REPLY.model_dump(mode="json", by_alias=True)
    assert data["requestId"] == REPLY.request_id  # camelCase, as the orchestrator matches it


@pytest.mark.parametrize("status", ["Completed", "Failed", "Terminated"])
def test_a_late_reply_to_a_finished_instance_is_completed_not_retried(functions, status, caplog):
    caplog.set_level(logging.INFO, logger="order_agents.reply_relay")
    client = FakeDurableClient({"order-1:2": status})
    actions = relay(functions, client, REPLY.to_json())
    assert actions.only == ("complete", {})
    assert client.raised == []
    assert any("late reply" in r.getMessage() for r in caplog.records)


def test_a_late_reply_to_an_unknown_instance_is_completed_not_retried(functions):
    client = FakeDurableClient({})
    assert relay(functions, client, REPLY.to_json()).only == ("complete", {})


def test_a_failure_to_raise_on_a_live_instance_is_abandoned_for_redelivery(functions):
    client = FakeDurableClient({"order-1:2": "Running"}, broken=True)
    assert relay(functions, client, REPLY.to_json()).only[0] == "abandon"


def test_when_the_status_cannot_be_read_either_the_reply_is_abandoned(functions):
    client = FakeDurableClient({}, status_broken=True)
    assert relay(functions, client, REPLY.to_json()).only[0] == "abandon"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"\xff\xfe", "NotJson"),
        ("[]", "NotAnObject"),
        ({**REPLY.model_dump(mode="json", by_alias=True), "outcome": "maybe"}, "InvalidFields"),
        ({**REPLY.model_dump(mode="json", by_alias=True), "type": "AgentRequest"}, "UnknownType"),
    ],
)
def test_a_bad_reply_is_dead_lettered_and_raises_nothing(functions, body, reason):
    client = FakeDurableClient({"order-1:2": "Running"})
    kind, details = relay(functions, client, body).only
    assert (kind, details["reason"]) == ("deadletter", reason)
    assert client.raised == []


@pytest.mark.parametrize(
    "instance",
    ["order-1:2/terminate?reason=x&x=", "order-1:2#", ".", "%2F", "order-2:2", "order-1:compensate:0", "order-1"],
)
def test_a_reply_whose_instance_id_the_app_did_not_build_for_its_order_is_dead_lettered(functions, instance):
    """The instance id reaches the Durable client's URLs unescaped: only ``<orderId>:<attempt>`` and
    ``<orderId>:compensate:<round>`` of the reply's own order get that far."""
    client = FakeDurableClient({"order-1:2": "Running", instance: "Running"})
    body = {**REPLY.model_dump(mode="json", by_alias=True), "instanceId": instance}
    kind, details = relay(functions, client, body).only
    assert (kind, details["reason"]) == ("deadletter", "InvalidFields")
    assert "instanceId" in details["description"]
    assert client.raised == []


def test_a_reply_to_a_compensation_round_is_raised(functions):
    client = FakeDurableClient({"order-1:compensate:3": "Running"})
    body = {**REPLY.model_dump(mode="json", by_alias=True), "instanceId": "order-1:compensate:3"}
    assert relay(functions, client, body).only == ("complete", {})
    assert [raised[0] for raised in client.raised] == ["order-1:compensate:3"]
