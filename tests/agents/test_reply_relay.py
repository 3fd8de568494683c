"""The reply relay, called through its registered function ``agent_reply_relay`` (the original
function under the durable-client wrapper) with a client that fails the way the SDK fails, the app's context
installed (a manual clock and a recording sender: where a reply the backend could not take is sent again)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest
from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus

from adapters.clock import ManualClock
from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.messages import AgentReply
from contracts.names import AGENT_REPLIES_QUEUE, AGENT_REPLY_EVENT, SERVICE_BUS_CONNECTION
from contracts.store_retry import ROUND_PROPERTY
from dependencies import AppContext, use_context
from order_agents.reply_relay import relay_retry_delays
from tests.agents.support import START, make_context
from tests.fakes import FakeReceivedMessage, RecordingActions, RecordingSender


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


def relay(
    functions, client: FakeDurableClient, body: Any, *, ctx: AppContext | None = None, message: Any = None
) -> RecordingActions:
    """Relays ``body`` (or ``message``, as received) through the registered function, ``ctx`` (or a fresh context
    over a manual clock and a recording sender) installed."""
    wrapper = functions["agent_reply_relay"].func
    original = getattr(wrapper, "client_function", None) or wrapper.__wrapped__
    actions = RecordingActions()
    use_context(ctx or make_context(ManualClock(START)))
    try:
        received = message if message is not None else FakeReceivedMessage.of(body)
        asyncio.run(original(message=received, message_actions=actions, client=client))
    finally:
        use_context(None)
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


class FailingSender(RecordingSender):
    """Service Bus failing too: every send raises ``SendError`` (after the SDK's retries)."""

    def send(self, queue: str, message: OutgoingMessage) -> None:
        raise SendError("amqp:connection:forced")


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


@pytest.mark.parametrize(
    "client",
    [
        FakeDurableClient({"order-1:2": "Running"}, broken=True),  # the raise fails, the instance runs
        FakeDurableClient({}, status_broken=True),  # the raise fails and so does the status read
    ],
    ids=["running", "status unreadable"],
)
def test_a_reply_the_backend_cannot_take_is_sent_again_for_later_and_completed(functions, client, caplog):
    """Before, it was abandoned: redelivered at once, its five deliveries burnt in a blip of the backend, then
    dead-lettered ``MaxDeliveryCountExceeded``, which pages an operator though the order recovers without it."""
    sender = RecordingSender()
    clock = ManualClock(START)
    with caplog.at_level(logging.INFO):
        actions = relay(functions, client, REPLY.to_json(), ctx=make_context(clock, sender=sender))
    assert actions.only == ("complete", {})
    [(queue, copy)] = sender.sent
    assert queue == AGENT_REPLIES_QUEUE
    assert copy.body == REPLY.to_json().encode("utf-8")  # the reply as its agent sent it
    assert copy.application_properties[ROUND_PROPERTY] == 1
    assert copy.scheduled_enqueue_time == START + timedelta(seconds=1)
    [scheduled] = events(caplog, "ReplyRetryScheduled")
    assert (scheduled.orderId, scheduled.instanceId, scheduled.round) == ("order-1", "order-1:2", 1)  # type: ignore[attr-defined]


def test_each_round_sends_the_next_copy_later_and_the_copy_is_raised_once_the_backend_is_back(functions):
    client = FakeDurableClient({"order-1:2": "Running"}, broken=True)
    sender = RecordingSender()
    clock = ManualClock(START)
    ctx = make_context(clock, sender=sender)
    received = FakeReceivedMessage.of(REPLY.to_json(), message_id="order-1:2:charge-payment:payment:reply")
    for expected in (1, 2, 4):
        assert relay(functions, client, None, ctx=ctx, message=received).only == ("complete", {})
        copy = sender.sent[-1][1]
        due = copy.scheduled_enqueue_time
        assert due is not None and due - clock.now() == timedelta(seconds=expected)
        clock.set(due)
        received = FakeReceivedMessage.from_sent(copy)
    assert len({m.message_id for _, m in sender.sent}) == 3
    client.broken = False
    assert relay(functions, client, None, ctx=ctx, message=received).only == ("complete", {})
    assert [(i, e) for i, e, _ in client.raised] == [("order-1:2", AGENT_REPLY_EVENT)]
    assert len(sender.sent) == 3  # nothing more sent


def test_a_copy_is_due_after_its_delay_on_the_brokers_clock_when_the_hosts_clock_is_behind(functions):
    """Red team (redteam-relay): the copy was due at the host's clock plus the round's delay. A host whose clock is
    behind Service Bus's by more than the delay scheduled it in the past: the broker gave it back at once, and every
    round after it, so the six rounds meant for a backend blip of a few seconds were spent in a few milliseconds and the
    reply left to its deadline (the runner, app clock 45 s behind, blips of 3 to 8 s: 5 and 3 of 40 orders retried,
    none without the skew). The broker's own time of the message being handled (its enqueued time, at or before the
    broker's now) is the earliest base of the next round's due time."""
    sender = RecordingSender()
    behind = ManualClock(START - timedelta(seconds=45))
    client = FakeDurableClient({"order-1:2": "Running"}, broken=True)
    received = FakeReceivedMessage.of(REPLY.to_json(), message_id="r")
    received.enqueued_time_utc = START  # the broker's time when the agent's reply was enqueued
    for expected in (1, 2, 4):
        assert relay(functions, client, None, ctx=make_context(behind, sender=sender), message=received).only == (
            "complete",
            {},
        )
        copy = sender.sent[-1][1]
        assert copy.scheduled_enqueue_time == received.enqueued_time_utc + timedelta(seconds=expected)
        received = FakeReceivedMessage.from_sent(copy)
        received.enqueued_time_utc = copy.scheduled_enqueue_time  # a scheduled message is enqueued when it is due


def test_a_copy_that_comes_after_its_attempt_ended_is_a_late_reply(functions):
    sender = RecordingSender()
    ctx = make_context(ManualClock(START), sender=sender)
    first = relay(functions, FakeDurableClient({"order-1:2": "Running"}, broken=True), REPLY.to_json(), ctx=ctx)
    assert first.only == ("complete", {})
    copy = FakeReceivedMessage.from_sent(sender.sent[0][1])
    client = FakeDurableClient({"order-1:2": "Completed"})  # its timer won, the attempt ended DeadlineExpired
    assert relay(functions, client, None, ctx=ctx, message=copy).only == ("complete", {})
    assert client.raised == []
    assert len(sender.sent) == 1


def test_the_copy_of_the_last_round_is_completed_and_left_to_the_deadline_not_dead_lettered(functions, caplog):
    rounds = len(relay_retry_delays(timedelta(seconds=60)))
    sender = RecordingSender()
    last = FakeReceivedMessage.of(REPLY.to_json(), message_id="m")
    last.application_properties = {ROUND_PROPERTY: rounds}
    client = FakeDurableClient({"order-1:2": "Running"}, broken=True)
    with caplog.at_level(logging.INFO):
        actions = relay(functions, client, None, ctx=make_context(ManualClock(START), sender=sender), message=last)
    assert actions.only == ("complete", {})
    assert sender.sent == []
    [left] = events(caplog, "ReplyLeftToDeadline")
    assert (left.orderId, left.instanceId, left.step, left.requestId) == (  # type: ignore[attr-defined]
        "order-1",
        "order-1:2",
        "charge-payment",
        REPLY.request_id,
    )
    assert "deadline" in left.getMessage() and "supervisor" in left.getMessage()


def test_a_reply_whose_copy_cannot_be_sent_is_abandoned_as_before(functions):
    client = FakeDurableClient({"order-1:2": "Running"}, broken=True)
    ctx = make_context(ManualClock(START), sender=FailingSender())
    assert relay(functions, client, REPLY.to_json(), ctx=ctx).only[0] == "abandon"


def test_the_rounds_span_the_step_timeout_short_first() -> None:
    seconds = [d.total_seconds() for d in relay_retry_delays(timedelta(seconds=60))]
    assert seconds == [1, 2, 4, 8, 16, 30]
    assert sum(d.total_seconds() for d in relay_retry_delays(timedelta(seconds=600))) >= 600
    assert max(relay_retry_delays(timedelta(seconds=600))) == timedelta(seconds=30)
    assert relay_retry_delays(timedelta(seconds=1)) == (timedelta(seconds=1),)


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
