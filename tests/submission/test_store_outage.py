"""An ``orders`` message that meets a Cosmos DB outage is sent again for later, not abandoned at once
(``submission.store_outage``): its copy, its rounds, what a client can and cannot do with the round
property, and when it falls back to abandoning."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.names import ORDERS_QUEUE
from contracts.store_retry import ORIGINAL_PROPERTY, ROUND_PROPERTY, retry_round
from domain.ids import MAX_MESSAGE_ID_LENGTH
from localrun.servicebus import InProcessBroker
from submission.store_outage import (
    STORE_RETRY_DELAYS,
    copy_digest,
    copy_id,
    original_id,
    original_sequence,
    retry_later,
)
from tests.fakes import FakeReceivedMessage, RecordingSender
from tests.submission.corpus import order


class FailingSender:
    def send(self, queue: str, message: OutgoingMessage) -> None:
        raise SendError("Service Bus is down too")


class Ctx:
    """What ``retry_later`` reads of the app's context."""

    def __init__(self, sender: Any) -> None:
        self.sender = sender
        self.clock = ManualClock()


def message(round_number: Any = None, message_id: str | None = "ord-1") -> FakeReceivedMessage:
    made = FakeReceivedMessage.of(order(), message_id)
    if round_number is not None:
        made.application_properties = {ROUND_PROPERTY: round_number}
    return made


def digest_of(copy: OutgoingMessage) -> str:
    """The digest of what ``copy`` carries, as ``copy_id`` puts it in its MessageId."""
    body = copy.body if isinstance(copy.body, bytes) else copy.body.encode("utf-8")
    return copy_digest(body, copy.application_properties)


def test_the_first_copy_is_the_same_body_due_after_the_first_delay_and_the_original_is_completed():
    ctx = Ctx(RecordingSender())
    original = message()
    result = retry_later(ctx, original, "OrderSubmitted", "503")  # type: ignore[arg-type]
    assert result.settlement.kind == "complete"
    [(queue, copy)] = ctx.sender.sent
    assert queue == ORDERS_QUEUE
    assert json.loads(copy.body) == order()
    assert copy.application_properties == {ROUND_PROPERTY: 1, ORIGINAL_PROPERTY: str(original.sequence_number)}
    digest = digest_of(copy)  # of what the copy carries
    assert copy.message_id == f"ord-1:store-retry:1:{original.sequence_number}:{digest}"
    assert copy.scheduled_enqueue_time == ctx.clock.now() + STORE_RETRY_DELAYS[0]


@pytest.mark.parametrize("third_id", ["ord-1:store-retry:3:41:0123456789abcdef", "ord-1:store-retry:3:41"])
def test_each_round_waits_longer_and_keeps_the_original_id(third_id: str):
    """A copy of a copy is named after the original, not after the copy: whether the copy has a digest or
    was made before copies had one (``ord-1:store-retry:3:41``, perhaps still scheduled when the digest
    was deployed)."""
    ctx = Ctx(RecordingSender())
    third = message(round_number=3, message_id=third_id)
    retry_later(ctx, third, "OrderSubmitted", "503")  # type: ignore[arg-type]
    [(_, copy)] = ctx.sender.sent
    digest = digest_of(copy)
    assert copy.message_id == f"ord-1:store-retry:4:{third.sequence_number}:{digest}"  # not ...:41:store-retry:4
    assert copy.scheduled_enqueue_time == ctx.clock.now() + STORE_RETRY_DELAYS[3]
    assert STORE_RETRY_DELAYS[3] > STORE_RETRY_DELAYS[0]


def test_no_round_waits_longer_than_a_minute_and_the_rounds_cover_about_an_hour():
    """A prepaid order waits for its notification only a few minutes: whatever met the outage is handled
    again within a minute of the store's return (fault red team on 3737d51: delays of up to 15 minutes
    failed prepaid orders after a 5-minute outage)."""
    assert max(STORE_RETRY_DELAYS) == timedelta(minutes=1)
    assert timedelta(minutes=55) <= sum(STORE_RETRY_DELAYS, timedelta()) <= timedelta(minutes=65)


def test_after_the_last_round_the_message_is_abandoned_to_service_bus_as_before():
    ctx = Ctx(RecordingSender())
    last = len(STORE_RETRY_DELAYS)
    result = retry_later(ctx, message(round_number=last), "OrderSubmitted", "503")  # type: ignore[arg-type]
    assert result.settlement.kind == "abandon"
    assert ctx.sender.sent == []


def test_a_copy_that_cannot_be_sent_abandons_the_message():
    result = retry_later(Ctx(FailingSender()), message(), "OrderSubmitted", "503")  # type: ignore[arg-type]
    assert result.settlement.kind == "abandon"


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        (None, 0),
        ({}, 0),
        ({ROUND_PROPERTY: 2}, 2),
        ({ROUND_PROPERTY.encode(): b"4"}, 4),  # the SDK's AMQP properties: bytes keys and values
        ({ROUND_PROPERTY: "7"}, 7),
        ({ROUND_PROPERTY: -5}, 0),  # a client cannot buy itself more rounds
        ({ROUND_PROPERTY: "many"}, 0),
        ({ROUND_PROPERTY: True}, 0),
        ({ROUND_PROPERTY: 2.5}, 2),
        ({"other": 9}, 0),
    ],
)
def test_the_round_property_is_read_as_a_whole_number_or_ignored(properties: Any, expected: int):
    assert retry_round(properties) == expected


def test_copy_ids_fit_service_bus_and_map_back_to_the_original():
    long_id = "o" * 128
    received = message(message_id=long_id)
    made = copy_id(received, 3)
    assert len(made) <= MAX_MESSAGE_ID_LENGTH
    assert copy_id(received, 3) == made  # deterministic: a repeat collapses
    assert original_id(copy_id(message(message_id="ord-1:cancel"), 1)) == "ord-1:cancel"
    # copies made before the digest (perhaps still on the queue) and after it, and copies of either
    assert original_id("ord-1:store-retry:1:7:store-retry:2:9") == "ord-1"
    assert original_id("ord-1:cancel:store-retry:4:12") == "ord-1:cancel"
    assert original_id("ord-1:store-retry:1:7:0123456789abcdef") == "ord-1"
    assert original_id("ord-1:store-retry:1:7:store-retry:2:9:0123456789abcdef") == "ord-1"
    assert original_id("ord-1:store-retry:1:7:0123456789abcdef:store-retry:2:9:fedcba9876543210") == "ord-1"
    assert original_id("ord-1:store-retry:x") == "ord-1:store-retry:x"
    assert original_id("ord-1:store-retry:1:7:xyz") == "ord-1:store-retry:1:7:xyz"  # no digest: an original
    assert copy_id(message(message_id=None), 1).startswith("seq-")


@pytest.mark.parametrize("round_number", [None, 2, "1"])
def test_a_copy_never_takes_the_messageid_of_the_message_it_is_made_from(round_number: Any):
    """Found by the red team on 3737d51: a client's MessageId ``batch-7:store-retry:1`` (round 0) was
    stripped to ``batch-7`` and its copy named ``batch-7:store-retry:1``: the original's own id, which
    duplicate detection (10 minutes) dropped, so the order was completed and never handled. Only this
    app's own copies (the round property matching the suffix) are traced back; a copy always carries
    the sequence number of the message it is made from."""
    for client_id in ("batch-7:store-retry:1", "batch-7:store-retry:1:5", "batch-7:store-retry:2"):
        made = message(round_number, message_id=client_id)
        copy = copy_id(made, retry_round(made.application_properties) + 1)
        assert copy != client_id and f":{made.sequence_number}:" in copy, (client_id, round_number, copy)


def test_the_same_message_handled_twice_sends_the_same_copy_and_another_message_with_its_id_another():
    first, again = message(message_id="ord-1"), message(message_id="ord-1")
    again.sequence_number = first.sequence_number  # a redelivery of the same message
    resent = message(message_id="ord-1")  # the client's same MessageId, sent again past the window
    assert copy_id(first, 1) == copy_id(again, 1) != copy_id(resent, 1)


def test_a_copys_id_cannot_be_made_without_the_body_it_carries():
    """docs/deferral.md, "What a sender to ``orders`` can still do": the MessageId and the sequence number
    of a message are all another sender needs to guess; the copy's id also depends on its body, so two
    messages alike in both but for the body have copies of different ids, and neither is the id without a
    digest."""
    mine, forged = message(message_id="ord-1"), FakeReceivedMessage.of(order(customerId="someone-else"), "ord-1")
    forged.sequence_number = mine.sequence_number
    ids = {copy_id(mine, 1), copy_id(forged, 1)}
    assert len(ids) == 2 and f"ord-1:store-retry:1:{mine.sequence_number}" not in ids


@pytest.mark.parametrize(
    ("properties", "body"),
    [
        ({ROUND_PROPERTY: 2, ORIGINAL_PROPERTY: "7"}, b"{}"),  # another round
        ({ROUND_PROPERTY: 1, ORIGINAL_PROPERTY: "8"}, b"{}"),  # another message as its sender sent it
        ({ROUND_PROPERTY: 1}, b"{}"),
        ({ROUND_PROPERTY: 1, ORIGINAL_PROPERTY: "7"}, b"{ }"),  # another body, byte for byte
    ],
)
def test_the_digest_covers_the_body_and_the_properties_the_copy_carries(properties: Any, body: bytes):
    """What its handler reads of a copy: its body, its round and the sequence number of its original (a
    refused order is known again by it: submission/intake.py). Two copies with one id are the same copy."""
    same = copy_digest(b"{}", {ORIGINAL_PROPERTY: "7", ROUND_PROPERTY: 1})  # the order of the keys is not read
    assert copy_digest(b"{}", {ROUND_PROPERTY: 1, ORIGINAL_PROPERTY: "7"}) == same
    assert copy_digest(body, properties) != same
    assert len(same) == 16 and int(same, 16) >= 0


def cancellation(round_number: int | None) -> FakeReceivedMessage:
    body = {"type": "CancelOrder", "schemaVersion": 1, "orderId": "o-late", "reason": "changed my mind"}
    made = FakeReceivedMessage.of(body, "o-late:cancel" if round_number is None else "o-late:cancel:store-retry:1")
    if round_number is not None:
        made.application_properties = {ROUND_PROPERTY: round_number}
    return made


@pytest.mark.cosmos
def test_a_cancellation_whose_order_is_not_there_looks_again_until_the_orders_own_retries_are_over(
    app_context: Any, sender: RecordingSender
) -> None:
    """Its order may have met a Cosmos DB blip or outage and be handled again later, after it: the
    cancellation looks again on the same schedule (round 0 from the client included), and is dead-lettered
    ``UnknownOrder`` only after its last round."""
    from submission.intake import handle_orders_message

    for round_number, expected_id in ((None, "o-late:cancel:store-retry:1"), (1, "o-late:cancel:store-retry:2")):
        sender.sent.clear()
        received = cancellation(round_number)
        later = handle_orders_message(app_context, received)
        assert later.settlement.kind == "complete"
        [(queue, copy)] = sender.sent
        digest = digest_of(copy)
        assert (queue, copy.message_id) == (ORDERS_QUEUE, f"{expected_id}:{received.sequence_number}:{digest}")
    sender.sent.clear()
    result = handle_orders_message(app_context, cancellation(len(STORE_RETRY_DELAYS)))
    assert (result.settlement.kind, result.settlement.reason) == ("deadletter", "UnknownOrder")
    assert sender.sent == []


@pytest.mark.cosmos
def test_a_cancellation_of_an_order_admission_control_refused_is_completed_after_its_last_round(
    app_context: Any, sender: RecordingSender
) -> None:
    """Its order came and was refused (``MAX_PENDING``: the refusal stands in the order's deferral document, its
    submitter told ``Rejected``): after the same rounds (a resubmission accepted meanwhile would be cancelled),
    there is nothing to cancel, so it is completed (``CancelIgnored``), not dead-lettered ``UnknownOrder`` for an
    operator. Found by ``localrun fuzz`` (seed 5004): a cancel of one of 124 orders refused at a cap of 6."""
    from domain.deferral import DeferralDocument, rejected
    from submission.intake import handle_orders_message

    now = app_context.clock.now()
    app_context.deferrals.save(rejected(DeferralDocument.empty("o-late", now), now, 17))
    early = handle_orders_message(app_context, cancellation(1))
    assert early.settlement.kind == "complete" and len(sender.sent) == 1  # looked at again later, as any
    sender.sent.clear()
    result = handle_orders_message(app_context, cancellation(len(STORE_RETRY_DELAYS)))
    assert (result.settlement.kind, result.settlement.reason) == ("complete", None)
    assert sender.sent == []
    assert app_context.states.get("o-late") is None  # nothing written


def test_every_copy_carries_the_sequence_number_of_the_message_as_its_sender_sent_it():
    """An OrderSubmitted the pending cap refused is known again by it (``submission.intake``): on a
    redelivery (the same number), on its copy, and on a copy of that copy (each with a number of its own)."""
    ctx = Ctx(RecordingSender())
    original = message()
    assert original_sequence(original) == original.sequence_number
    retry_later(ctx, original, "OrderSubmitted", "503")  # type: ignore[arg-type]
    first = FakeReceivedMessage.from_sent(ctx.sender.sent[-1][1])
    assert first.sequence_number != original.sequence_number
    assert original_sequence(first) == original.sequence_number
    retry_later(ctx, first, "OrderSubmitted", "503")  # type: ignore[arg-type]
    second = FakeReceivedMessage.from_sent(ctx.sender.sent[-1][1])
    assert second.application_properties == {ROUND_PROPERTY: 2, ORIGINAL_PROPERTY: str(original.sequence_number)}
    assert original_sequence(second) == original.sequence_number


@pytest.mark.parametrize(
    ("properties", "own"),
    [
        ({ORIGINAL_PROPERTY: 7}, True),  # round 0: the message as sent, whatever it says
        ({ROUND_PROPERTY: 1}, True),  # a copy made before copies carried it
        ({ROUND_PROPERTY: 1, ORIGINAL_PROPERTY: "x"}, True),
        ({ROUND_PROPERTY: 1, ORIGINAL_PROPERTY: True}, True),
        ({ROUND_PROPERTY: 1, ORIGINAL_PROPERTY: 7}, False),
        ({ROUND_PROPERTY.encode(): b"2", ORIGINAL_PROPERTY.encode(): b"7"}, False),  # the SDK's AMQP properties
        # no original can have these: its copy is sent after it, under a higher number (a client's own values)
        ({ROUND_PROPERTY: 1, ORIGINAL_PROPERTY: 100}, True),
        ({ROUND_PROPERTY: 1, ORIGINAL_PROPERTY: 2**60 + 1}, True),
        ({ROUND_PROPERTY: 1, ORIGINAL_PROPERTY: -1}, True),
    ],
)
def test_the_original_sequence_number_is_read_only_from_a_copy_and_only_as_a_whole_number(properties: Any, own: bool):
    made = message()
    made.sequence_number = 100
    made.application_properties = properties
    assert original_sequence(made) == (made.sequence_number if own else 7)


def test_a_copy_of_a_message_numbered_past_32_bits_is_sent_with_its_number_as_text():
    """A sequence number has 64 bits; azure-servicebus sends an integer application property as 32 and fails
    the send past 2**31 - 1 (the broker refuses it as the SDK does: localrun/servicebus/limits.py). Once the
    ``orders`` queue had taken that many messages, every copy would fail and its message be abandoned into
    ``MaxDeliveryCountExceeded``: the original's number is carried as text, and read back the same."""
    ctx = Ctx(None)
    broker = ctx.sender = InProcessBroker(ctx.clock)
    broker.declare_queue(ORDERS_QUEUE)
    original = message()
    original.sequence_number = 2**31 + 5
    result = retry_later(ctx, original, "OrderSubmitted", "503")  # type: ignore[arg-type]
    assert result.settlement.kind == "complete"
    [copy] = broker.peek(ORDERS_QUEUE, 10)
    assert copy.application_properties == {ROUND_PROPERTY: 1, ORIGINAL_PROPERTY: "2147483653"}
    received = FakeReceivedMessage(
        body=b"{}", sequence_number=2**31 + 6, application_properties=copy.application_properties
    )
    assert original_sequence(received) == 2**31 + 5
