"""Broker contract: deferral, receive-deferred by sequence number, peek."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from adapters.clock import ManualClock
from adapters.servicebus.deferred import DeferredMessageStore
from adapters.servicebus.sender import OutgoingMessage, QueueNotFound
from localrun.servicebus import (
    MAX_DELIVERY_COUNT_EXCEEDED,
    TTL_EXPIRED,
    InProcessBroker,
    MessageLockLost,
    MessageState,
    QueuePolicy,
    ReceiverClosed,
)

START = datetime(2026, 1, 1, tzinfo=UTC)
LOCK = timedelta(seconds=30)


def make_broker(policy: QueuePolicy | None = None) -> tuple[InProcessBroker, ManualClock]:
    clock = ManualClock(START)
    broker = InProcessBroker(clock)
    broker.declare_queue("orders", policy or QueuePolicy(lock_duration=LOCK, max_delivery_count=3))
    return broker, clock


def defer_one(broker: InProcessBroker, message_id: str = "payment-1") -> int:
    """Send a message, receive it on the trigger and defer it; its sequence number."""
    broker.send("orders", OutgoingMessage(body='{"type":"PaymentNotification"}', message_id=message_id))
    got = broker.receive("orders")
    assert got is not None and got.message_id == message_id
    broker.actions.defer(got)
    return got.sequence_number


def test_deferred_message_is_never_delivered_to_a_trigger_again_but_is_visible_to_peek() -> None:
    """Message deferral: a deferred message stays in the main queue but can no longer be received with
    the regular receive operations; Message browsing: peek returns deferred messages."""
    broker, clock = make_broker()
    seq = defer_one(broker)
    clock.advance(LOCK * 10)
    assert broker.receive("orders") is None
    assert broker.ready_queues() == []
    [peeked] = broker.peek("orders", 10)
    assert (peeked.sequence_number, peeked.state) == (seq, MessageState.DEFERRED)
    assert broker.next_due_time() is None


def test_receive_deferred_by_sequence_number_locks_and_settles_on_that_receiver() -> None:
    """Message deferral: a deferred message is retrieved by its sequence number (receive_deferred_messages)
    and is then locked like any received message; it is settled on the receiver that fetched it."""
    broker, _ = make_broker()
    seq = defer_one(broker)
    store: DeferredMessageStore = broker.deferred_store
    with store.open("orders") as receiver:
        [got] = receiver.receive_deferred([seq])
        assert (got.sequence_number, got.state) == (seq, MessageState.DEFERRED)
        assert got.delivery_count == 1  # the Python SDK's count: the deliveries before this one
        assert got.lock_token and got.locked_until_utc == START + LOCK
        receiver.complete(got)
    assert broker.peek("orders", 10) == []
    assert broker.counters("orders").deferred_received == 1


def test_receive_deferred_leaves_out_numbers_that_are_not_deferred() -> None:
    """Message deferral: only deferred messages can be received by sequence number (the SDK raises for
    the others; the app's DeferredReceiver protocol leaves them out of the result)."""
    broker, _ = make_broker()
    seq = defer_one(broker, "p1")
    broker.send("orders", OutgoingMessage(body="{}", message_id="active"))
    with broker.deferred_store.open("orders") as receiver:
        got = receiver.receive_deferred([seq + 1, 999, seq])
        assert [m.sequence_number for m in got] == [seq]
        assert receiver.receive_deferred([seq]) == []  # already locked to this receiver


def test_deferred_message_cannot_be_settled_through_the_trigger_actions() -> None:
    """Message deferral / Message transfers, locks, and settlement: a message fetched on a receiver is
    settled on that receiver; another link (the host's settlement actions) does not hold its lock."""
    broker, _ = make_broker()
    seq = defer_one(broker)
    with broker.deferred_store.open("orders") as receiver:
        [got] = receiver.receive_deferred([seq])
        with pytest.raises(MessageLockLost):
            broker.actions.complete(got)
        receiver.dead_letter(got, "OrphanPayment", "no order after 1 day")
    [dead] = broker.dead_letters("orders")
    assert (dead.reason, dead.description) == ("OrphanPayment", "no order after 1 day")


def test_abandoned_or_expired_lock_on_a_deferred_message_leaves_it_deferred() -> None:
    """Message deferral: a deferred message fetched and then abandoned (or whose lock expires) is
    still deferred, never delivered to a trigger; each fetch is a delivery attempt, and at the
    max delivery count it is dead-lettered (Overview of Service Bus dead-letter queues)."""
    broker, clock = make_broker()
    seq = defer_one(broker)  # delivery 1
    with broker.deferred_store.open("orders") as receiver:
        [got] = receiver.receive_deferred([seq])  # delivery 2
        receiver.abandon(got)
        assert broker.receive("orders") is None
        [again] = receiver.receive_deferred([seq])  # delivery 3
        assert again.delivery_count == 2  # as the Python SDK reports it: the header's count of prior attempts
    clock.advance(LOCK)
    assert broker.receive("orders") is None
    [dead] = broker.dead_letters("orders")
    assert dead.reason == MAX_DELIVERY_COUNT_EXCEEDED


def test_a_fetched_deferred_message_counts_deliveries_as_the_python_sdk_reports_them() -> None:
    """The app's deferred receiver in Azure is the Python SDK's, whose ``delivery_count`` is the AMQP header's
    delivery-count, the attempts before this delivery (azure-servicebus ``_common/message.py``; the .NET
    SDK adds 1 for a received message, the service's own count): the broker's receiver reports the same,
    one less than the count that dead-letters it; a peek (no delivery) reports the deliveries so far."""
    broker, _ = make_broker(QueuePolicy(lock_duration=LOCK, max_delivery_count=3))
    seq = defer_one(broker)  # delivery 1, to the trigger
    with broker.deferred_store.open("orders") as receiver:
        assert receiver.peek(1, seq)[0].delivery_count == 1
        [second] = receiver.receive_deferred([seq])
        receiver.abandon(second)
        [third] = receiver.receive_deferred([seq])
        assert (second.delivery_count, third.delivery_count) == (1, 2)
        assert receiver.peek(1, seq)[0].delivery_count == 3
        receiver.abandon(third)  # the third delivery of 3 released: dead-lettered
    assert [(d.sequence_number, d.reason, d.delivery_count) for d in broker.dead_letters("orders")] == [
        (seq, MAX_DELIVERY_COUNT_EXCEEDED, 3)
    ]


def test_defer_again_on_the_receiver_keeps_it_for_later() -> None:
    """Message deferral: a fetched deferred message can be deferred again and fetched later."""
    broker, _ = make_broker()
    seq = defer_one(broker)
    with broker.deferred_store.open("orders") as receiver:
        [got] = receiver.receive_deferred([seq])
        receiver.defer(got)
        [again] = receiver.receive_deferred([seq])
        receiver.complete(again)
    assert broker.peek("orders", 10) == []


def test_expired_deferred_message_is_dead_lettered_when_fetched() -> None:
    """Message deferral: deferred messages are not expired and dead-lettered until a client tries to
    receive them by sequence number; then an expired one moves to the DLQ (when dead-lettering on
    expiration is enabled) and is not returned."""
    broker, clock = make_broker(QueuePolicy(lock_duration=LOCK, default_ttl=timedelta(hours=1)))
    seq = defer_one(broker)
    clock.advance(timedelta(hours=2))
    assert [m.sequence_number for m in broker.peek("orders", 10)] == [seq]  # still there, lazily
    assert broker.dead_letters("orders") == []
    with broker.deferred_store.open("orders") as receiver:
        assert receiver.receive_deferred([seq]) == []
    [dead] = broker.dead_letters("orders")
    assert (dead.sequence_number, dead.reason) == (seq, TTL_EXPIRED)
    assert broker.peek("orders", 10) == []


def test_expiry_takes_effect_when_the_lock_of_a_fetched_deferred_message_ends() -> None:
    """Message expiration (Time to Live): a message under lock is protected from expiry, and "if the flag
    is set on the entity, the message is moved to the dead-letter queue as the lock is abandoned or
    expires" (https://learn.microsoft.com/azure/service-bus-messaging/message-expiration). A deferred
    message fetched by sequence number before its TTL and released after it is no exception: it is
    dead-lettered then, not left deferred for a peek to show until someone fetches it again."""
    ttl = timedelta(hours=1)
    broker, clock = make_broker(QueuePolicy(lock_duration=LOCK, default_ttl=ttl))
    abandoned = defer_one(broker, "abandoned")
    lock_expired = defer_one(broker, "lock-expired")
    clock.advance(ttl - timedelta(seconds=10))
    with broker.deferred_store.open("orders") as receiver:
        first, second = receiver.receive_deferred([abandoned, lock_expired])
        clock.advance(timedelta(seconds=20))  # past ExpiresAtUtc, within the lock
        receiver.abandon(first)
    clock.advance(LOCK)
    assert broker.peek("orders", 10) == []
    assert [(d.sequence_number, d.reason) for d in broker.dead_letters("orders")] == [
        (abandoned, TTL_EXPIRED),
        (lock_expired, TTL_EXPIRED),
    ]
    assert second.sequence_number == lock_expired


def test_peek_from_a_sequence_number_and_up_to_a_count() -> None:
    """Message browsing: peek enumerates from the lowest available sequence number, or from a given
    one, returning at most the requested count; locked, deferred and scheduled messages included."""
    broker, _ = make_broker()
    seq_deferred = defer_one(broker, "d")
    for i in range(3):
        broker.send("orders", OutgoingMessage(body="{}", message_id=f"m{i}"))
    locked = broker.receive("orders")
    assert locked is not None
    broker.send("orders", OutgoingMessage(body="{}", message_id="s", scheduled_enqueue_time=START + LOCK))
    with broker.deferred_store.open("orders") as receiver:
        assert [m.message_id for m in receiver.peek(10)] == ["d", "m0", "m1", "m2", "s"]
        assert [m.sequence_number for m in receiver.peek(2, from_sequence_number=3)] == [3, 4]
    assert seq_deferred == 1


def test_a_peek_returns_at_most_250_messages_however_many_are_asked_for() -> None:
    """Message browsing (https://learn.microsoft.com/azure/service-bus-messaging/message-browsing): peek
    returns at most the requested number, with no minimum guaranteed; the service stops at 250
    (Azure/azure-sdk-for-python#26643). Only an empty answer says nothing is left: the next peek goes on
    after the last one returned."""
    broker, _ = make_broker()
    for i in range(300):
        broker.send("orders", OutgoingMessage(body="{}", message_id=f"m{i}"))
    with broker.deferred_store.open("orders") as receiver:
        first = receiver.peek(1000)
        assert [m.sequence_number for m in first] == list(range(1, 251))
        rest = receiver.peek(1000, first[-1].sequence_number + 1)
        assert [m.sequence_number for m in rest] == list(range(251, 301))


def test_peek_from_a_removed_or_future_sequence_number() -> None:
    """Message browsing, as the search for a queue's newest message uses it (adapters/servicebus/browse.py):
    from a number no message has (removed, or not used yet) peek starts at the next message on the queue,
    past the newest it finds nothing, and each call stands alone (0 is the oldest message again)."""
    broker, _ = make_broker()
    for i in range(1, 6):
        broker.send("orders", OutgoingMessage(body="{}", message_id=f"m{i}"))
    while (got := broker.receive("orders")) is not None:  # 2 and 5 completed (gone), the rest deferred
        (broker.actions.complete if got.sequence_number in (2, 5) else broker.actions.defer)(got)
    with broker.deferred_store.open("orders") as receiver:
        assert [m.sequence_number for m in receiver.peek(10, 2)] == [3, 4]
        assert [m.sequence_number for m in receiver.peek(1, 2)] == [3]
        assert receiver.peek(1, 5) == [] and receiver.peek(1, 6) == [] and receiver.peek(1, 2**63 - 1) == []
        assert [m.sequence_number for m in receiver.peek(10)] == [1, 3, 4]
        assert [m.sequence_number for m in receiver.peek(10, 0)] == [1, 3, 4]


def test_receiver_cannot_be_used_after_its_block() -> None:
    """A receiver is closed when its block ends (ServiceBusReceiver.close); using it fails."""
    broker, _ = make_broker()
    with broker.deferred_store.open("orders") as receiver:
        pass
    with pytest.raises(ReceiverClosed):
        receiver.receive_deferred([1])


def test_opening_a_receiver_on_an_undeclared_queue_fails() -> None:
    """MessagingEntityNotFoundError for an entity that does not exist."""
    broker, _ = make_broker()
    with pytest.raises(QueueNotFound), broker.deferred_store.open("missing"):
        pass


def test_a_defer_on_the_last_allowed_delivery_dead_letters_the_message() -> None:
    """Defer is the AMQP ``modified`` outcome with ``delivery-failed`` (the Python SDK's ``defer_message``,
    ``_pyamqp_transport``), which counts the delivery as abandon does: a message deferred on its last
    allowed delivery is dead-lettered ``MaxDeliveryCountExceeded``, not deferred (Azure/azure-service-bus#375:
    with MaxDeliveryCount 1, every defer dead-letters). Before, the broker deferred it all the same, and a
    deferral the service would have dead-lettered was fetched and applied in simulations."""
    broker, _ = make_broker(QueuePolicy(lock_duration=LOCK, max_delivery_count=3))
    broker.send("orders", OutgoingMessage(body="{}", message_id="worn"))
    for _ in range(2):  # deliveries 1 and 2 abandoned
        got = broker.receive("orders")
        assert got is not None
        broker.actions.abandon(got)
    last = broker.receive("orders")
    assert last is not None and last.delivery_count == 3
    broker.actions.defer(last)
    assert broker.peek("orders", 10) == []
    [dead] = broker.dead_letters("orders")
    assert (dead.sequence_number, dead.reason, dead.delivery_count) == (
        last.sequence_number,
        MAX_DELIVERY_COUNT_EXCEEDED,
        3,
    )
    with broker.deferred_store.open("orders") as receiver:
        assert receiver.receive_deferred([last.sequence_number]) == []

    seq = defer_one(broker, "fetched")  # delivery 1, deferred
    with broker.deferred_store.open("orders") as receiver:
        [second] = receiver.receive_deferred([seq])
        receiver.defer(second)  # delivery 2 of 3: deferred again
        [third] = receiver.receive_deferred([seq])
        receiver.defer(third)  # delivery 3 of 3: dead-lettered
        assert receiver.receive_deferred([seq]) == []
    assert [(d.message_id, d.reason) for d in broker.dead_letters("orders")] == [
        ("worn", MAX_DELIVERY_COUNT_EXCEEDED),
        ("fetched", MAX_DELIVERY_COUNT_EXCEEDED),
    ]
    assert broker.counters("orders").deferred == 2
