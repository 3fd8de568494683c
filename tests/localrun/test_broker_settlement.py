"""Broker contract: peek-lock delivery to a trigger, locks, settlement, max delivery count."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime, timedelta

import pytest

from adapters.clock import ManualClock
from adapters.servicebus.sender import OutgoingMessage
from adapters.servicebus.settlement import MessageActions, ReceivedMessage, Settlement, apply_settlement, body_bytes
from localrun.servicebus import (
    MAX_DELIVERY_COUNT_EXCEEDED,
    DeadLetterTextTooLong,
    HostMessageActions,
    InProcessBroker,
    MessageLockLost,
    QueuePolicy,
)

START = datetime(2026, 1, 1, tzinfo=UTC)
LOCK = timedelta(seconds=30)


def make_broker(policy: QueuePolicy | None = None) -> tuple[InProcessBroker, ManualClock]:
    clock = ManualClock(START)
    broker = InProcessBroker(clock)
    broker.declare_queue("q", policy or QueuePolicy(lock_duration=LOCK, max_delivery_count=3))
    return broker, clock


def send(broker: InProcessBroker, message_id: str, body: str = "{}") -> None:
    broker.send("q", OutgoingMessage(body=body, message_id=message_id))


def test_peek_lock_hides_a_locked_message_from_other_receives() -> None:
    """Message transfers, locks, and settlement (PeekLock): receiving locks the message for the lock
    duration; other receivers do not get it meanwhile; the next message is delivered instead."""
    broker, _ = make_broker()
    send(broker, "m1")
    send(broker, "m2")
    first = broker.receive("q")
    second = broker.receive("q")
    assert first is not None and second is not None
    assert (first.message_id, second.message_id) == ("m1", "m2")
    assert first.lock_token and second.lock_token and first.lock_token != second.lock_token
    assert first.locked_until_utc == START + LOCK
    assert broker.receive("q") is None


def test_complete_removes_the_message() -> None:
    """Message transfers, locks, and settlement: Complete tells the broker the message was processed;
    it is removed from the queue."""
    broker, clock = make_broker()
    send(broker, "m1")
    got = broker.receive("q")
    assert got is not None
    broker.actions.complete(got)
    clock.advance(LOCK * 10)
    assert broker.receive("q") is None
    assert broker.peek("q", 10) == []
    assert broker.dead_letters("q") == []


def test_lock_expiry_redelivers_with_delivery_count_plus_one() -> None:
    """Message transfers, locks, and settlement / ServiceBusReceivedMessage.LockedUntil: when the lock
    expires without settlement, the delivery count is incremented and the message is available again."""
    broker, clock = make_broker()
    send(broker, "m1")
    first = broker.receive("q")
    assert first is not None and first.delivery_count == 1
    clock.advance(LOCK - timedelta(seconds=1))
    assert broker.receive("q") is None
    clock.advance(timedelta(seconds=1))
    again = broker.receive("q")
    assert again is not None
    assert (again.message_id, again.sequence_number, again.delivery_count) == ("m1", 1, 2)
    assert again.lock_token != first.lock_token
    assert broker.counters("q").lock_expirations == 1


def test_settling_after_the_lock_expired_raises_lock_lost() -> None:
    """Message transfers, locks, and settlement: settling with an expired lock fails
    (MessageLockLostError in the SDK); the message has to be processed again."""
    broker, clock = make_broker()
    send(broker, "m1")
    got = broker.receive("q")
    assert got is not None
    clock.advance(LOCK)
    with pytest.raises(MessageLockLost):
        broker.actions.complete(got)
    redelivered = broker.receive("q")
    assert redelivered is not None and redelivered.message_id == "m1"


def test_settling_twice_raises_lock_lost() -> None:
    """Message transfers, locks, and settlement: a settled message's lock no longer exists."""
    broker, _ = make_broker()
    send(broker, "m1")
    got = broker.receive("q")
    assert got is not None
    broker.actions.complete(got)
    with pytest.raises(MessageLockLost):
        broker.actions.abandon(got)


def test_abandon_makes_the_message_available_at_once_with_delivery_count_plus_one() -> None:
    """Message transfers, locks, and settlement (Abandon) / DeliveryCount: abandon releases the lock
    immediately; the count is incremented when the message is explicitly abandoned."""
    broker, _ = make_broker()
    send(broker, "m1")
    got = broker.receive("q")
    assert got is not None
    broker.actions.abandon(got)
    again = broker.receive("q")
    assert again is not None and again.delivery_count == 2


def test_renewing_the_lock_extends_it() -> None:
    """Message transfers, locks, and settlement (renew lock): renewal resets the lock to the entity's
    lock duration from now; locked_until_utc reflects it."""
    broker, clock = make_broker()
    send(broker, "m1")
    got = broker.receive("q")
    assert got is not None
    clock.advance(timedelta(seconds=20))
    broker.actions.renew_message_lock(got)
    assert got.locked_until_utc == START + timedelta(seconds=20) + LOCK
    clock.advance(timedelta(seconds=20))  # past the original lock
    assert broker.receive("q") is None
    broker.actions.complete(got)
    assert broker.counters("q").lock_renewals == 1


def test_renewing_an_expired_lock_raises_lock_lost() -> None:
    """Message transfers, locks, and settlement: an expired lock cannot be renewed."""
    broker, clock = make_broker()
    send(broker, "m1")
    got = broker.receive("q")
    assert got is not None
    clock.advance(LOCK)
    with pytest.raises(MessageLockLost):
        broker.actions.renew_message_lock(got)


def test_max_delivery_count_dead_letters_after_repeated_abandons() -> None:
    """Overview of Service Bus dead-letter queues (Maximum delivery count): a message delivered
    MaxDeliveryCount times without settlement is moved to the DLQ with reason MaxDeliveryCountExceeded."""
    broker, _ = make_broker()
    send(broker, "poison")
    counts: list[int] = []
    while (got := broker.receive("q")) is not None:
        counts.append(got.delivery_count)
        broker.actions.abandon(got)
    assert counts == [1, 2, 3]
    [dead] = broker.dead_letters("q")
    assert (dead.message_id, dead.reason, dead.delivery_count) == ("poison", MAX_DELIVERY_COUNT_EXCEEDED, 3)
    assert dead.description


def test_max_delivery_count_dead_letters_after_repeated_lock_expiry() -> None:
    """Overview of Service Bus dead-letter queues (Maximum delivery count): lock expiries count as
    delivery attempts too (QueueProperties.MaxDeliveryCount); the move happens when the last lock expires."""
    broker, clock = make_broker()
    send(broker, "crashy")
    for expected in (1, 2, 3):
        got = broker.receive("q")
        assert got is not None and got.delivery_count == expected
        clock.advance(LOCK)
    assert broker.receive("q") is None
    [dead] = broker.dead_letters("q")
    assert dead.reason == MAX_DELIVERY_COUNT_EXCEEDED
    assert dead.dead_lettered_at == START + 3 * LOCK


def test_explicit_dead_letter_keeps_reason_and_description() -> None:
    """Overview of Service Bus dead-letter queues (application-level dead-lettering): the receiver
    dead-letters with its own reason and description; the message leaves the queue for the DLQ."""
    broker, _ = make_broker()
    send(broker, "bad", "not json")
    got = broker.receive("q")
    assert got is not None
    broker.actions.deadletter(got, deadletter_reason="InvalidJson", deadletter_error_description="line 1")
    assert broker.receive("q") is None
    [dead] = broker.dead_letters("q")
    assert (dead.queue, dead.message_id, dead.reason, dead.description) == ("q", "bad", "InvalidJson", "line 1")
    assert dead.text() == "not json"
    assert broker.counters("q").dead_lettered == 1


def test_dead_letter_without_reason_records_none() -> None:
    """Overview of Service Bus dead-letter queues: reason and description are optional on dead-letter."""
    broker, _ = make_broker()
    send(broker, "m")
    got = broker.receive("q")
    assert got is not None
    broker.actions.deadletter(got)
    [dead] = broker.dead_letters()
    assert (dead.reason, dead.description) == (None, None)


def test_the_trigger_actions_refuse_dead_letter_text_the_hosts_sdk_refuses() -> None:
    """The host's .NET SDK refuses a dead-letter reason or description over 4,096 characters before calling
    the service (``localrun/servicebus/limits.py`` has the source): nothing is settled, the lock is kept."""
    broker, _ = make_broker()
    send(broker, "m")
    got = broker.receive("q")
    assert got is not None
    with pytest.raises(DeadLetterTextTooLong):
        broker.actions.deadletter(got, deadletter_reason="Too", deadletter_error_description="x" * 4097)
    assert broker.dead_letters("q") == []
    broker.actions.deadletter(got, deadletter_reason="Too", deadletter_error_description="x" * 4096)
    assert [d.message_id for d in broker.dead_letters("q")] == ["m"]


def test_peeked_message_cannot_be_settled() -> None:
    """Message browsing: peek returns a snapshot without a lock; it cannot be settled."""
    broker, _ = make_broker()
    send(broker, "m")
    [peeked] = broker.peek("q", 1)
    assert peeked.lock_token is None
    with pytest.raises(MessageLockLost):
        broker.actions.complete(peeked)


def test_host_actions_mirror_the_functions_extension_settlement_methods() -> None:
    """Azure Service Bus trigger for Azure Functions (SDK-type bindings): ServiceBusMessageActions
    offers complete, abandon, deadletter(reason, description), defer, renew_message_lock; the broker's
    actions have the same names and parameters so the app's code runs unchanged."""
    from azurefunctions.extensions.bindings.servicebus import ServiceBusMessageActions

    for name in ("complete", "abandon", "deadletter", "defer", "renew_message_lock"):
        real = list(inspect.signature(getattr(ServiceBusMessageActions, name)).parameters)
        ours = list(inspect.signature(getattr(HostMessageActions, name)).parameters)
        assert ours == real, name


def test_app_settlement_helpers_work_on_broker_objects() -> None:
    """The app's settlement helpers (adapters.servicebus.settlement) accept the broker's message and
    actions as they accept the SDK's."""
    broker, _ = make_broker()
    send(broker, "m", '{"a": 1}')
    got = broker.receive("q")
    assert got is not None
    received: ReceivedMessage = got
    actions: MessageActions = broker.actions
    assert body_bytes(received) == b'{"a": 1}'
    apply_settlement(actions, got, Settlement.deadletter("Bad", "why"))
    assert [d.reason for d in broker.dead_letters("q")] == ["Bad"]
