"""Broker contract: sending (sequence numbers, unknown queues, duplicate detection, scheduled
messages, injected send failures)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from adapters.clock import ManualClock
from adapters.servicebus.sender import MessageSender, OutgoingMessage, QueueNotFound, SendError
from localrun.servicebus import InProcessBroker, MessageState, QueuePolicy, SendFaults

START = datetime(2026, 1, 1, tzinfo=UTC)


def make_broker(*queues: str, policy: QueuePolicy | None = None) -> tuple[InProcessBroker, ManualClock]:
    clock = ManualClock(START)
    broker = InProcessBroker(clock)
    for name in queues or ("q",):
        broker.declare_queue(name, policy)
    return broker, clock


def message(message_id: str, body: str = "{}", **kwargs: object) -> OutgoingMessage:
    return OutgoingMessage(body=body, message_id=message_id, **kwargs)  # type: ignore[arg-type]


def test_sequence_numbers_are_gap_free_and_increasing_per_queue() -> None:
    """Message sequencing and timestamps: the broker stamps each accepted message with a gap-free,
    increasing sequence number relative to its queue, and EnqueuedTimeUtc with the time it was stored."""
    broker, clock = make_broker("a", "b")
    sender: MessageSender = broker
    sender.send("a", message("a1"))
    sender.send("b", message("b1"))
    clock.advance(timedelta(seconds=5))
    sender.send("a", message("a2"))
    sender.send("a", message("a3"))

    peeked = broker.peek("a", 10)
    assert [m.sequence_number for m in peeked] == [1, 2, 3]
    assert [m.message_id for m in peeked] == ["a1", "a2", "a3"]
    assert [m.enqueued_time_utc for m in peeked] == [START, START + timedelta(seconds=5), START + timedelta(seconds=5)]
    assert [m.sequence_number for m in broker.peek("b", 10)] == [1]


def test_received_message_carries_what_was_sent() -> None:
    """Message sequencing and timestamps / Message transfers, locks, and settlement: a received message
    carries the sender's MessageId, subject, correlation id, properties and body; str() is the body."""
    broker, _ = make_broker()
    broker.send(
        "q",
        message(
            "m1",
            '{"type":"OrderSubmitted"}',
            subject="OrderSubmitted",
            correlation_id="c1",
            application_properties={"schemaVersion": 1},
        ),
    )
    got = broker.receive("q")
    assert got is not None
    assert got.body == b'{"type":"OrderSubmitted"}'
    assert str(got) == '{"type":"OrderSubmitted"}'
    assert (got.message_id, got.subject, got.correlation_id) == ("m1", "OrderSubmitted", "c1")
    assert got.application_properties == {"schemaVersion": 1}
    assert got.state == MessageState.ACTIVE
    assert got.sequence_number == 1
    assert got.delivery_count == 1


def test_sending_to_an_undeclared_queue_raises_queue_not_found() -> None:
    """Service Bus raises MessagingEntityNotFoundError for a queue that does not exist; the app's
    sender maps it to QueueNotFound."""
    broker, _ = make_broker("orders")
    with pytest.raises(QueueNotFound):
        broker.send("nope", message("m1"))
    with pytest.raises(QueueNotFound):
        broker.receive("nope")


def test_duplicate_within_window_is_accepted_and_dropped() -> None:
    """Duplicate detection: a message whose MessageId was already sent within the detection window is
    reported as accepted (the send succeeds) but is instantly ignored and dropped; only the MessageId
    is considered, not the body."""
    broker, clock = make_broker(policy=QueuePolicy(duplicate_detection_window=timedelta(minutes=10)))
    broker.send("q", message("order-1", "first"))
    clock.advance(timedelta(minutes=9, seconds=59))
    broker.send("q", message("order-1", "second, different body"))

    peeked = broker.peek("q", 10)
    assert [(m.message_id, str(m)) for m in peeked] == [("order-1", "first")]
    assert broker.counters("q").duplicates_dropped == 1
    assert broker.counters("q").sent == 1


def test_duplicate_detection_forgets_ids_after_the_window() -> None:
    """Duplicate detection: the broker keeps MessageIds only for the duplicate detection history
    time window; after it, the same MessageId is a new message."""
    broker, clock = make_broker(policy=QueuePolicy(duplicate_detection_window=timedelta(minutes=10)))
    broker.send("q", message("order-1"))
    clock.advance(timedelta(minutes=10))
    broker.send("q", message("order-1"))
    assert [m.sequence_number for m in broker.peek("q", 10)] == [1, 2]


def test_duplicate_of_a_completed_message_is_still_dropped_within_the_window() -> None:
    """Duplicate detection: the history is of MessageIds sent, independent of whether the first
    message was already consumed."""
    broker, _ = make_broker()
    broker.send("q", message("order-1"))
    got = broker.receive("q")
    assert got is not None
    broker.actions.complete(got)
    broker.send("q", message("order-1"))
    assert broker.receive("q") is None


def test_without_duplicate_detection_every_send_is_stored() -> None:
    """Duplicate detection is an entity option (RequiresDuplicateDetection); off, every send is stored."""
    broker, _ = make_broker(policy=QueuePolicy(duplicate_detection_window=None))
    broker.send("q", message("same"))
    broker.send("q", message("same"))
    assert len(broker.peek("q", 10)) == 2


def test_scheduled_message_is_invisible_until_its_enqueue_time_but_visible_to_peek() -> None:
    """Message sequencing and timestamps (Scheduled messages) and Message browsing: a scheduled
    message does not materialize in the queue until its ScheduledEnqueueTimeUtc; peek on a queue
    returns it (state Scheduled) under the sequence number it was given when it was sent."""
    broker, clock = make_broker()
    due = START + timedelta(minutes=5)
    broker.send("q", message("later", scheduled_enqueue_time=due))
    broker.send("q", message("now"))

    peeked = broker.peek("q", 10)
    assert [(m.message_id, m.state) for m in peeked] == [
        ("later", MessageState.SCHEDULED),
        ("now", MessageState.ACTIVE),
    ]
    assert peeked[0].scheduled_enqueue_time_utc == due

    first = broker.receive("q")
    assert first is not None and first.message_id == "now"
    broker.actions.complete(first)
    assert broker.receive("q") is None
    assert broker.next_due_time() == due

    clock.set(due)
    later = broker.receive("q")
    assert later is not None
    assert (later.message_id, later.sequence_number, later.state) == ("later", 3, MessageState.ACTIVE)
    assert later.enqueued_time_utc == due


def test_a_scheduled_message_is_renumbered_and_queued_behind_earlier_messages_when_it_becomes_active() -> None:
    """Message sequencing and timestamps (https://learn.microsoft.com/azure/service-bus-messaging/message-sequencing):
    "The SequenceNumber for a scheduled message is only valid while the message is in this state. As the
    message transitions to the active state, the message is appended to the queue as if it had been enqueued
    at the current instant, which includes assigning a new SequenceNumber." A message sent before it became
    due is delivered first, and its scheduled number is gone (a peek or a fetch by it finds nothing)."""
    broker, clock = make_broker()
    due = START + timedelta(minutes=5)
    broker.send("q", message("later", scheduled_enqueue_time=due))  # 1 while scheduled
    broker.send("q", message("waiting"))  # 2, not received before the scheduled one is due
    clock.set(due + timedelta(seconds=1))
    broker.send("q", message("after"))  # sent after it became active

    first, second, third = broker.receive("q"), broker.receive("q"), broker.receive("q")
    assert first is not None and second is not None and third is not None
    assert [(m.message_id, m.sequence_number) for m in (first, second, third)] == [
        ("waiting", 2),
        ("later", 3),
        ("after", 4),
    ]
    assert [m.sequence_number for m in broker.peek("q", 10)] == [2, 3, 4]
    assert broker.peek("q", 1, 1)[0].sequence_number == 2


def test_scheduled_time_in_the_past_is_immediately_available() -> None:
    """Scheduled messages: a scheduled enqueue time that has already passed enqueues at once."""
    broker, _ = make_broker()
    broker.send("q", message("m", scheduled_enqueue_time=START - timedelta(seconds=1)))
    got = broker.receive("q")
    assert got is not None and got.message_id == "m"


def test_injected_send_failure_raises_and_stores_nothing() -> None:
    """Fault injection (not a Service Bus behaviour): a failed send raises SendError, like the SDK's
    ServiceBusError after its retries; the message is not stored."""
    broker, _ = make_broker()
    broker.set_send_faults(SendFaults(failure_rate=1.0, rng=random.Random(1)))
    with pytest.raises(SendError):
        broker.send("q", message("m"))
    assert broker.peek("q", 10) == []
    assert broker.counters("q").send_failures == 1


def test_injected_lost_ack_stores_the_message_and_a_retry_is_deduplicated() -> None:
    """Duplicate detection: a send whose acknowledgement was lost leaves the sender in doubt; resending
    the same MessageId is safe because the broker drops the duplicate."""
    broker, _ = make_broker()
    broker.set_send_faults(SendFaults(failure_rate=1.0, rng=random.Random(1), stored_anyway_rate=1.0))
    with pytest.raises(SendError):
        broker.send("q", message("m"))
    broker.set_send_faults(None)
    broker.send("q", message("m"))
    assert [m.message_id for m in broker.peek("q", 10)] == ["m"]


def test_injected_send_failures_are_deterministic_for_a_seed() -> None:
    """Fault injection draws from the seeded generator only, so a run repeats exactly."""

    def failures(seed: int) -> list[int]:
        broker, _ = make_broker()
        broker.set_send_faults(SendFaults(failure_rate=0.3, rng=random.Random(seed)))
        failed: list[int] = []
        for i in range(200):
            try:
                broker.send("q", message(f"m{i}"))
            except SendError:
                failed.append(i)
        return failed

    assert failures(7) == failures(7)
    assert 30 < len(failures(7)) < 90
    assert failures(7) != failures(8)
