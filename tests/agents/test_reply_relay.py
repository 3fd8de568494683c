"""The reply relay, called through its registered function ``agent_reply_relay`` (the original
function under the durable-client wrapper) with a client that fails the way the SDK fails, the app's context
installed (a manual clock and a recording sender: where a reply the backend could not take is sent again)."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime, timedelta
from typing import Any

import pytest
from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus

from adapters.clock import ManualClock
from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.messages import AgentReply
from contracts.names import AGENT_REPLIES_QUEUE, AGENT_REPLY_EVENT, SERVICE_BUS_CONNECTION
from contracts.store_retry import ROUND_PROPERTY
from dependencies import AppContext, use_context
from domain.timefmt import to_text
from order_agents.reply_relay import MAX_RELAY_ROUNDS, RAISE_MARGIN, relay_retry_delays
from tests.agents.support import START, agent_settings, make_context, make_request
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
    body = {
        **REPLY.model_dump(mode="json", by_alias=True),
        "instanceId": "order-1:compensate:3",
        "requestId": "order-1:compensate:3:charge-payment:payment:undo:1",
    }
    assert relay(functions, client, body).only == ("complete", {})
    assert [raised[0] for raised in client.raised] == ["order-1:compensate:3"]


def rounds_until_left(
    functions, ctx: AppContext, clock: ManualClock, sender: RecordingSender, received: FakeReceivedMessage
) -> tuple[list[datetime], datetime]:
    """Relays ``received`` against a backend that takes nothing, each copy when it comes due (the broker's clock and
    the host's agreeing, a copy enqueued when due), until a delivery sends no copy: the copies' due times, and the
    time that delivery was handled (the reply left to its deadline)."""
    client = FakeDurableClient({"order-1:2": "Running"}, broken=True)
    dues: list[datetime] = []
    for _ in range(MAX_RELAY_ROUNDS + 1):
        sent = len(sender.sent)
        assert relay(functions, client, None, ctx=ctx, message=received).only == ("complete", {})
        if len(sender.sent) == sent:
            return dues, clock.now()
        copy = sender.sent[-1][1]
        assert copy.scheduled_enqueue_time is not None
        dues.append(copy.scheduled_enqueue_time)
        clock.set(copy.scheduled_enqueue_time)
        received = FakeReceivedMessage.from_sent(copy)
        received.enqueued_time_utc = copy.scheduled_enqueue_time
    raise AssertionError("the rounds never ended")


def agents_reply(functions, deadline: datetime, clock: ManualClock) -> FakeReceivedMessage:
    """The reply the payment agent (its registered trigger, a simulated service) sends to a request of attempt 2
    whose step's deadline is ``deadline``, as the relay receives it (enqueued at the host's now)."""
    sender = RecordingSender()
    use_context(make_context(clock, sender=sender))
    try:
        request = make_request(attempt=2, deadline=deadline)
        actions = RecordingActions()
        functions["agent_payment"].func(message=FakeReceivedMessage.of(request.to_json()), message_actions=actions)
    finally:
        use_context(None)
    assert actions.only == ("complete", {})
    [(queue, sent)] = sender.sent
    assert queue == AGENT_REPLIES_QUEUE
    received = FakeReceivedMessage.from_sent(sent)
    received.enqueued_time_utc = clock.now()
    return received


def test_the_agents_reply_carries_its_steps_deadline(functions):
    clock = ManualClock(START)
    received = agents_reply(functions, START + timedelta(seconds=600), clock)
    reply = AgentReply.model_validate_json(received.body)
    assert reply.deadline == START + timedelta(seconds=600)
    assert json.loads(received.body)["deadline"] == "2026-03-01T12:10:00.000000Z"


def test_the_rounds_last_until_the_steps_own_deadline_after_the_step_timeout_was_lowered(functions, caplog):
    """Before: the rounds spanned the current ``STEP_TIMEOUT_SECONDS``. An attempt that began with 600 s, its reply
    relayed after a deploy set 60 s, had six rounds over 61 s and was left to its deadline 539 s before it, through
    a backend outage of a minute and a half that it would have outlasted. Now the rounds last until the step's own
    deadline, which the reply carries: the last copy due just before it, none after it."""
    clock = ManualClock(START)
    deadline = START + timedelta(seconds=600)
    received = agents_reply(functions, deadline, clock)
    sender = RecordingSender()
    ctx = make_context(clock, sender=sender, settings=agent_settings(STEP_TIMEOUT_SECONDS="60"))
    with caplog.at_level(logging.INFO):
        dues, left_at = rounds_until_left(functions, ctx, clock, sender, received)
    assert max(dues) <= deadline - RAISE_MARGIN
    assert max(dues) > deadline - timedelta(seconds=31)  # a round every 30 s at most, until the deadline
    assert [(due - START).total_seconds() for due in dues[:6]] == [1, 3, 7, 15, 31, 61]
    assert left_at >= deadline - RAISE_MARGIN
    [left] = events(caplog, "ReplyLeftToDeadline")
    assert left.rounds == len(dues)  # type: ignore[attr-defined]
    assert f"before its step's deadline {to_text(deadline)} after" in left.getMessage()


def test_the_rounds_end_at_the_steps_own_deadline_after_the_step_timeout_was_raised(functions):
    """Before: with ``STEP_TIMEOUT_SECONDS`` raised to 600 s, a reply to an attempt that began with 60 s was sent
    again every 30 s for ten minutes, every copy after its step's deadline a late reply. Now its rounds end at its
    deadline."""
    clock = ManualClock(START)
    deadline = START + timedelta(seconds=60)
    received = agents_reply(functions, deadline, clock)
    sender = RecordingSender()
    ctx = make_context(clock, sender=sender, settings=agent_settings(STEP_TIMEOUT_SECONDS="600"))
    dues, left_at = rounds_until_left(functions, ctx, clock, sender, received)
    assert [(due - START).total_seconds() for due in dues] == [1, 3, 7, 15, 31, 59]  # the last cut to the margin
    assert deadline - RAISE_MARGIN <= left_at < deadline


def test_a_copy_is_due_after_its_delay_on_the_brokers_clock_when_the_hosts_clock_is_ahead(functions):
    """Before: a host whose clock ran 20 s ahead of Service Bus's scheduled each copy 20 s past its delay on the
    broker's clock (1 s became 21 s, the first rounds meant for a blip of a second or two spent after it). Now a
    reply carrying its deadline has each round's delay counted from the broker's time of the message handled."""
    ahead = ManualClock(START + timedelta(seconds=20))
    sender = RecordingSender()
    body = REPLY.model_copy(update={"deadline": START + timedelta(seconds=80)}).to_json()
    received = FakeReceivedMessage.of(body, message_id="r")
    received.enqueued_time_utc = START  # the broker's time when the agent's reply was enqueued
    client = FakeDurableClient({"order-1:2": "Running"}, broken=True)
    for expected in (1, 3, 7):
        ctx = make_context(ahead, sender=sender)
        assert relay(functions, client, None, ctx=ctx, message=received).only == ("complete", {})
        copy = sender.sent[-1][1]
        assert copy.scheduled_enqueue_time == START + timedelta(seconds=expected)
        ahead.set(copy.scheduled_enqueue_time + timedelta(seconds=20))
        received = FakeReceivedMessage.from_sent(copy)
        received.enqueued_time_utc = copy.scheduled_enqueue_time


def test_a_reply_at_its_deadline_is_left_to_it_at_once(functions, caplog):
    sender = RecordingSender()
    body = REPLY.model_copy(update={"deadline": START + RAISE_MARGIN / 2}).to_json()
    client = FakeDurableClient({"order-1:2": "Running"}, broken=True)
    with caplog.at_level(logging.INFO):
        actions = relay(functions, client, body, ctx=make_context(ManualClock(START), sender=sender))
    assert actions.only == ("complete", {})
    assert sender.sent == []
    [left] = events(caplog, "ReplyLeftToDeadline")
    assert left.rounds == 0  # type: ignore[attr-defined]


def test_a_copy_claiming_a_huge_round_is_left_to_its_deadline(functions):
    sender = RecordingSender()
    body = REPLY.model_copy(update={"deadline": START + timedelta(seconds=60)}).to_json()
    copy = FakeReceivedMessage.of(body, message_id="m")
    copy.application_properties = {ROUND_PROPERTY: 10**18}
    client = FakeDurableClient({"order-1:2": "Running"}, broken=True)
    assert relay(functions, client, None, ctx=make_context(ManualClock(START), sender=sender), message=copy).only == (
        "complete",
        {},
    )
    assert sender.sent == []


def test_a_reply_without_its_deadline_keeps_the_rounds_of_the_step_timeout(functions):
    """A reply of an agent older than ``AgentReply.deadline`` (in flight across the deploy): the rounds that span the
    current ``STEP_TIMEOUT_SECONDS``, from the later of the host's now and the broker's time, as before."""
    body = json.loads(REPLY.to_json())
    body.pop("deadline", None)  # what an older agent sends
    clock = ManualClock(START)
    sender = RecordingSender()
    received = FakeReceivedMessage.of(body, message_id="old")
    received.enqueued_time_utc = START
    dues, left_at = rounds_until_left(functions, make_context(clock, sender=sender), clock, sender, received)
    assert [(due - START).total_seconds() for due in dues] == [1, 3, 7, 15, 31, 61]
    assert left_at == START + timedelta(seconds=61)
