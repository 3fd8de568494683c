"""Red team (redteam-relay2): what a reply's ``deadline`` (``AgentReply.deadline``, its request's ``completeBy``, copied
by the agent) can make the reply relay do while the Durable backend takes nothing: the relay sizes its retry rounds by
it (``order_agents.reply_relay.round_before_deadline``), so a hostile or odd value must neither loop, flood
``agent-replies``, fail the trigger (five deliveries, then ``MaxDeliveryCountExceeded``) nor reach the orchestration.

Called through the registered functions (the payment agent's trigger over its simulated service, the relay's trigger
under its durable-client wrapper), as tests/agents/test_reply_relay.py does."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from contracts.names import AGENT_REPLIES_QUEUE
from contracts.store_retry import ROUND_PROPERTY
from dependencies import use_context
from order_agents.reply_relay import MAX_RELAY_ROUNDS, RAISE_MARGIN, round_delay
from tests.agents.support import START, make_context, make_request
from tests.agents.test_reply_relay import REPLY, FakeDurableClient, events, relay, rounds_until_left
from tests.fakes import FakeReceivedMessage, RecordingActions, RecordingSender


def _reply_body(deadline: Any) -> str:
    body = json.loads(REPLY.to_json())
    body["deadline"] = deadline
    return json.dumps(body)


def _received(body: str) -> FakeReceivedMessage:
    received = FakeReceivedMessage.of(body, message_id="forged")
    received.enqueued_time_utc = START
    return received


# A JSON number is read by pydantic's datetime rules as Unix seconds, or milliseconds past 2e10: a moment with no offset
# written, outside the years the app writes (1000 to 9998), that ``to_text`` writes back as a text ``parse`` refuses.
NUMBERS = {
    "year 9999 (ms)": 253402300799999,
    "year 1 (ms)": -62135596800000,
    "a plausible deadline (s)": 1772366460,  # 2026-03-01T12:01:00Z, a minute after START
}


@pytest.mark.parametrize("deadline", NUMBERS.values(), ids=NUMBERS.keys())
def test_a_reply_whose_deadline_is_a_json_number_is_dead_lettered_at_once(functions, deadline):
    """Before: taken as a UTC moment. Year 9999 bought the reply its 200 rounds (an hour and forty minutes of copies
    for one forged message); year 1 reached the orchestration as ``"deadline": "1-01-01T00:00:00.000000Z"``; the
    plausible one sized the rounds. Now a timestamp is a text with an offset or Z, as the contract says
    (``contracts.messages.UtcDateTime``): a number is ``InvalidFields``, nothing raised, no copy."""
    sender = RecordingSender()
    client = FakeDurableClient({"order-1:2": "Running"}, broken=True)
    ctx = make_context(ManualClock(START), sender=sender)
    actions = relay(functions, client, None, ctx=ctx, message=_received(_reply_body(deadline)))
    kind, settled = actions.only
    assert kind == "deadletter", actions.only
    assert settled["reason"] == "InvalidFields" and "'deadline'" in settled["description"], settled
    assert sender.sent == [] and client.raised == []


def test_a_request_whose_deadline_is_a_json_number_is_refused_not_done(functions):
    """Before: the agent did the request (its service charged), then could not build its reply: the reply carries the
    request's deadline (``AgentReply.deadline``), and the reply's own validation refused the 9999-12-31 the number was
    read as (past the years the app writes). The trigger raised, on every delivery (the service asked again under
    the same idempotency key), until the broker dead-lettered the request ``MaxDeliveryCountExceeded``. Now the
    request itself is refused (``InvalidFields``), before any call."""
    body = json.loads(make_request(attempt=2).to_json())
    body["deadline"] = NUMBERS["year 9999 (ms)"]
    sender = RecordingSender()
    use_context(make_context(ManualClock(START), sender=sender))
    try:
        actions = RecordingActions()
        functions["agent_payment"].func(message=FakeReceivedMessage.of(json.dumps(body)), message_actions=actions)
    finally:
        use_context(None)
    kind, settled = actions.only
    assert kind == "deadletter", (actions.only, sender.sent)
    assert settled["reason"] == "InvalidFields" and "'deadline'" in settled["description"], settled
    assert sender.sent == []


@pytest.mark.parametrize(
    "deadline",
    [
        "2026-03-01T12:10:00",  # no offset: naive, which the relay could not subtract from its aware now
        "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59Z",
        "9998-12-31T23:59:59-00:01",  # in range as written, past it in UTC
        "yesterday",
        True,
        [],
        {},
    ],
)
def test_a_reply_whose_deadline_is_no_utc_text_the_app_writes_is_dead_lettered_at_once(functions, deadline):
    """Not a failing trigger (a naive deadline minus the host's aware now raised TypeError: five deliveries, then the
    broker's ``MaxDeliveryCountExceeded``), not a copy: ``InvalidFields`` on its first delivery."""
    sender = RecordingSender()
    client = FakeDurableClient({"order-1:2": "Running"}, broken=True)
    ctx = make_context(ManualClock(START), sender=sender)
    actions = relay(functions, client, None, ctx=ctx, message=_received(_reply_body(deadline)))
    kind, settled = actions.only
    assert (kind, settled["reason"]) == ("deadletter", "InvalidFields"), actions.only
    assert sender.sent == [] and client.raised == []


def test_a_reply_claiming_a_deadline_centuries_away_has_at_most_max_relay_rounds(functions, caplog):
    """The strongest a sender on ``agent-replies`` can ask of the relay: a deadline at the last moment the app writes.
    Its rounds are ``MAX_RELAY_ROUNDS`` at most, 30 s apart once doubled up (about 100 minutes, each copy one message
    while the backend fails), then it is left (``ReplyLeftToDeadline``). That sender could send the 200 messages
    itself, and could answer any attempt outright: request ids are ``<instanceId>:<step>:<agent>``."""
    clock = ManualClock(START)
    sender = RecordingSender()
    received = _received(_reply_body("9998-12-31T23:59:59.999999Z"))
    with caplog.at_level(logging.INFO):
        dues, left_at = rounds_until_left(functions, make_context(clock, sender=sender), clock, sender, received)
    assert len(dues) == MAX_RELAY_ROUNDS
    gaps = [later - earlier for earlier, later in zip([START, *dues], dues, strict=False)]
    assert gaps == [round_delay(number) for number in range(1, MAX_RELAY_ROUNDS + 1)]
    assert left_at - START < timedelta(minutes=100)
    assert all(queue == AGENT_REPLIES_QUEUE for queue, _ in sender.sent)
    [left] = events(caplog, "ReplyLeftToDeadline")
    assert left.rounds == MAX_RELAY_ROUNDS  # type: ignore[attr-defined]


def test_an_older_relays_copy_goes_on_with_the_rounds_of_its_deadline(functions):
    """A mixed deploy: the reply (with its deadline, from a newer agent) met an older relay, which ignores the field and
    sent its copy for round 3 of the step timeout's rounds; the newer relay takes the copy on as round 4, due after
    round 4's delay from the broker's time of the copy, and ends the rounds at the deadline."""
    clock = ManualClock(START + timedelta(seconds=7))
    deadline = START + timedelta(seconds=40)
    copy = FakeReceivedMessage.of(_reply_body(deadline.isoformat()), message_id="r:store-retry:3:9")
    copy.application_properties = {ROUND_PROPERTY: 3, "storeRetryOriginal": "9"}
    copy.enqueued_time_utc = START + timedelta(seconds=7)
    sender = RecordingSender()
    dues, left_at = rounds_until_left(functions, make_context(clock, sender=sender), clock, sender, copy)
    rounds = [int(m.application_properties[ROUND_PROPERTY]) for _, m in sender.sent]
    assert rounds == [4, 5, 6]
    assert [(due - START).total_seconds() for due in dues] == [15, 31, 39]  # the last cut to the margin
    assert dues[-1] == deadline - RAISE_MARGIN and left_at == dues[-1]


def test_a_copy_is_never_due_before_its_message_came_due_on_the_brokers_clock_when_the_host_is_behind(functions):
    """A host clock 120 s behind Service Bus's: each copy is due its round's delay after the broker's time of the
    message handled, never in the broker's past (where it came back at once and the rounds went in milliseconds),
    and the rounds go on until the deadline as the host reads it (the app's clock, where the deadline was written)."""
    behind = timedelta(seconds=120)
    host = ManualClock(START - behind)
    deadline = START - behind + timedelta(seconds=60)  # written by the app, on its clock
    received = _received(_reply_body(deadline.astimezone(UTC).isoformat()))
    sender = RecordingSender()
    client = FakeDurableClient({"order-1:2": "Running"}, broken=True)
    broker_now: datetime = START
    dues = []
    for _ in range(MAX_RELAY_ROUNDS):
        sent = len(sender.sent)
        assert relay(functions, client, None, ctx=make_context(host, sender=sender), message=received).only == (
            "complete",
            {},
        )
        if len(sender.sent) == sent:
            break
        copy = sender.sent[-1][1]
        assert copy.scheduled_enqueue_time is not None
        assert copy.scheduled_enqueue_time > broker_now, "a copy due in the broker's past"
        dues.append(copy.scheduled_enqueue_time)
        broker_now = copy.scheduled_enqueue_time
        host.set(broker_now - behind)
        received = FakeReceivedMessage.from_sent(copy)
        received.enqueued_time_utc = broker_now
    assert [(due - START).total_seconds() for due in dues] == [1, 3, 7, 15, 31, 59]
    assert dues[-1] - behind == deadline - RAISE_MARGIN  # the last round a second before it, on the app's clock


@pytest.mark.parametrize("enqueued", ["naive", "missing"])
def test_a_message_without_an_aware_enqueued_time_has_its_copy_due_in_utc(functions, enqueued):
    """An enqueued time read naive (as UTC: the SDK's own are aware) or not there at all (the host's now stands in):
    the copy's due is an aware UTC moment its round's delay later, never a naive one the SDK would read in the host's
    local zone, nor a TypeError failing the trigger."""
    sender = RecordingSender()
    received = _received(_reply_body((START + timedelta(seconds=60)).isoformat()))
    if enqueued == "naive":
        received.enqueued_time_utc = START.replace(tzinfo=None)
    else:
        received.enqueued_time_utc = None  # type: ignore[assignment]  # ReceivedMessage's may be None; the fake's not
    client = FakeDurableClient({"order-1:2": "Running"}, broken=True)
    ctx = make_context(ManualClock(START + timedelta(seconds=5)), sender=sender)
    assert relay(functions, client, None, ctx=ctx, message=received).only == ("complete", {})
    [(_, copy)] = sender.sent
    assert copy.scheduled_enqueue_time is not None and copy.scheduled_enqueue_time.utcoffset() == timedelta(0)
    expected = START if enqueued == "naive" else START + timedelta(seconds=5)
    assert copy.scheduled_enqueue_time == expected + timedelta(seconds=1)
