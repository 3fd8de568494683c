"""Broker contract: message expiration (time to live)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from adapters.clock import ManualClock
from adapters.servicebus.sender import OutgoingMessage
from localrun.servicebus import TTL_EXPIRED, InProcessBroker, QueuePolicy

START = datetime(2026, 1, 1, tzinfo=UTC)
LOCK = timedelta(seconds=30)
TTL = timedelta(minutes=10)


def make_broker(*, dead_letter_on_expiration: bool = True) -> tuple[InProcessBroker, ManualClock]:
    clock = ManualClock(START)
    broker = InProcessBroker(clock)
    broker.declare_queue(
        "q", QueuePolicy(lock_duration=LOCK, default_ttl=TTL, dead_letter_on_expiration=dead_letter_on_expiration)
    )
    return broker, clock


def send(broker: InProcessBroker, message_id: str, scheduled: datetime | None = None) -> None:
    broker.send("q", OutgoingMessage(body="{}", message_id=message_id, scheduled_enqueue_time=scheduled))


def test_expires_at_is_enqueued_time_plus_ttl() -> None:
    """Message expiration (Time to Live): at enqueue, ExpiresAtUtc = EnqueuedTimeUtc + TimeToLive; the
    entity's default TTL applies to messages that set none."""
    broker, _ = make_broker()
    send(broker, "m")
    got = broker.receive("q")
    assert got is not None
    assert got.expires_at_utc == START + TTL
    assert got.time_to_live == TTL


def test_expired_message_is_not_delivered_and_is_dead_lettered() -> None:
    """Message expiration (Time to Live): past ExpiresAtUtc a message is ineligible for retrieval;
    Overview of Service Bus dead-letter queues: with dead-lettering on expiration it moves to the DLQ
    with reason TTLExpiredException."""
    broker, clock = make_broker()
    send(broker, "m")
    clock.advance(TTL)
    assert broker.receive("q") is None
    [dead] = broker.dead_letters("q")
    assert (dead.message_id, dead.reason, dead.dead_lettered_at) == ("m", TTL_EXPIRED, START + TTL)
    assert broker.counters("q").expired == 1


def test_expired_message_is_dropped_without_dead_lettering_on_expiration() -> None:
    """Message expiration (Time to Live): without dead-lettering on expiration, an expired message is
    simply removed."""
    broker, clock = make_broker(dead_letter_on_expiration=False)
    send(broker, "m")
    clock.advance(TTL)
    assert broker.receive("q") is None
    assert broker.dead_letters("q") == []
    assert broker.peek("q", 10) == []


def test_locked_message_is_not_affected_by_expiry_until_its_lock_ends() -> None:
    """Message expiration (Time to Live): expiration doesn't affect a message currently locked for
    delivery; it can still be completed."""
    broker, clock = make_broker()
    send(broker, "m")
    clock.advance(TTL - timedelta(seconds=10))
    got = broker.receive("q")
    assert got is not None
    clock.advance(timedelta(seconds=20))  # past ExpiresAtUtc, within the lock
    broker.actions.complete(got)
    assert broker.dead_letters("q") == []


def test_expiry_takes_effect_when_the_lock_of_an_expired_message_ends() -> None:
    """Message expiration (Time to Live): if the lock expires or the message is abandoned, expiration
    takes immediate effect."""
    broker, clock = make_broker()
    send(broker, "abandoned")
    send(broker, "lock-expired")
    clock.advance(TTL - timedelta(seconds=10))
    first = broker.receive("q")
    second = broker.receive("q")
    assert first is not None and second is not None
    clock.advance(timedelta(seconds=20))
    broker.actions.abandon(first)
    clock.advance(LOCK)
    assert broker.receive("q") is None
    assert [(d.message_id, d.reason) for d in broker.dead_letters("q")] == [
        ("abandoned", TTL_EXPIRED),
        ("lock-expired", TTL_EXPIRED),
    ]


def test_ttl_of_a_scheduled_message_counts_from_its_enqueue_time() -> None:
    """Message expiration (Time to Live): for scheduled messages the expiration depends on the enqueue
    time (the scheduled time), not on when the message was sent."""
    broker, clock = make_broker()
    send(broker, "later", scheduled=START + timedelta(minutes=30))
    clock.advance(timedelta(minutes=35))  # longer than TTL after sending, 5 min after enqueue
    got = broker.receive("q")
    assert got is not None
    assert got.expires_at_utc == START + timedelta(minutes=30) + TTL


def test_expiry_while_time_jumps_far_is_evaluated_when_it_was_due() -> None:
    """Message expiration (Time to Live) together with locks: a jump of the clock past a lock expiry and
    a TTL applies both in order: the lock ends first (redelivery possible), then the TTL dead-letters."""
    broker, clock = make_broker()
    send(broker, "m")
    got = broker.receive("q")
    assert got is not None
    clock.advance(TTL * 3)
    assert broker.receive("q") is None
    [dead] = broker.dead_letters("q")
    assert (dead.reason, dead.dead_lettered_at, dead.delivery_count) == (TTL_EXPIRED, START + TTL, 1)
