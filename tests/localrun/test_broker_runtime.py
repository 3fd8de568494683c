"""Broker contract: time skipping, host restart, counters, thread safety, determinism."""

from __future__ import annotations

import contextlib
import random
import threading
from datetime import UTC, datetime, timedelta

import pytest

from adapters.clock import ManualClock
from adapters.servicebus.sender import OutgoingMessage, SendError
from localrun.servicebus import InProcessBroker, MessageLockLost, QueuePolicy, ReceiverClosed, SendFaults

START = datetime(2026, 1, 1, tzinfo=UTC)
LOCK = timedelta(seconds=30)


def make_broker(policy: QueuePolicy | None = None) -> tuple[InProcessBroker, ManualClock]:
    clock = ManualClock(START)
    broker = InProcessBroker(clock)
    broker.declare_queue("q", policy or QueuePolicy(lock_duration=LOCK, default_ttl=timedelta(hours=1)))
    broker.declare_queue("r", policy or QueuePolicy(lock_duration=LOCK))
    return broker, clock


def send(broker: InProcessBroker, queue: str, message_id: str, scheduled: datetime | None = None) -> None:
    broker.send(queue, OutgoingMessage(body="{}", message_id=message_id, scheduled_enqueue_time=scheduled))


def test_next_due_time_is_the_earliest_scheduled_visibility_lock_expiry_or_ttl() -> None:
    """Scheduled messages, Message transfers, locks, and settlement, Message expiration (Time to Live):
    the moments at which the broker's state changes by itself; None when nothing is pending."""
    broker, clock = make_broker()
    assert broker.next_due_time() is None
    send(broker, "q", "ttl")  # expires at START + 1h
    assert broker.next_due_time() == START + timedelta(hours=1)
    send(broker, "r", "scheduled", scheduled=START + timedelta(minutes=5))
    assert broker.next_due_time() == START + timedelta(minutes=5)
    got = broker.receive("q")
    assert got is not None
    assert broker.next_due_time() == START + LOCK  # the lock; the TTL waits for the lock to end
    broker.actions.complete(got)
    assert broker.next_due_time() == START + timedelta(minutes=5)
    clock.set(START + timedelta(minutes=5))
    assert broker.ready_queues() == ["r"]
    assert broker.next_due_time() is None


def test_jumping_to_next_due_time_makes_progress() -> None:
    """Time skipping: jumping the clock to next_due_time() always changes something, so a runner that
    alternates 'deliver what is ready' and 'jump' terminates."""
    broker, clock = make_broker(QueuePolicy(lock_duration=LOCK, max_delivery_count=4))
    send(broker, "q", "never-settled")
    jumps = 0
    while (due := broker.next_due_time()) is not None or broker.ready_queues():
        if broker.ready_queues():
            assert broker.receive("q") is not None  # never settled: the lock will expire
        else:
            assert due is not None and due > clock.now()
            clock.set(due)
            jumps += 1
    assert jumps == 4
    assert [d.reason for d in broker.dead_letters()] == ["MaxDeliveryCountExceeded"]


def test_host_restart_keeps_the_lock_until_it_expires_then_redelivers() -> None:
    """Message transfers, locks, and settlement: if the receiver dies, the broker keeps the message
    locked until the lock expires; then it is delivered again with delivery count + 1. The dead host's
    settlement handles are gone."""
    broker, clock = make_broker()
    send(broker, "q", "m")
    got = broker.receive("q")
    assert got is not None
    clock.advance(timedelta(seconds=10))
    broker.restart_host()
    with pytest.raises(MessageLockLost):
        broker.actions.complete(got)
    with pytest.raises(MessageLockLost):
        broker.actions.renew_message_lock(got)
    assert broker.receive("q") is None  # still locked by the dead host
    assert broker.next_due_time() == START + LOCK
    clock.set(START + LOCK)
    again = broker.receive("q")
    assert again is not None and again.delivery_count == 2
    broker.actions.complete(again)  # the new host's handle works


def test_host_restart_closes_deferred_receivers() -> None:
    """A receiver opened by the dead host is gone with it; its locks expire as any other."""
    broker, clock = make_broker()
    send(broker, "q", "m")
    got = broker.receive("q")
    assert got is not None
    broker.actions.defer(got)
    with broker.deferred_store.open("q") as receiver:
        [fetched] = receiver.receive_deferred([got.sequence_number])
        broker.restart_host()
        with pytest.raises(ReceiverClosed):
            receiver.complete(fetched)
    with broker.deferred_store.open("q") as receiver:
        assert receiver.receive_deferred([got.sequence_number]) == []  # still locked
        clock.advance(LOCK)
        [again] = receiver.receive_deferred([got.sequence_number])
        assert again.delivery_count == 2  # the third delivery, as the Python SDK counts it (prior attempts)
        receiver.complete(again)


def test_counters_count_each_operation_per_queue() -> None:
    """Per-queue operation counters (runner bookkeeping, the basis of operations per order)."""
    broker, _ = make_broker()
    send(broker, "q", "a")
    send(broker, "q", "a")  # duplicate
    send(broker, "q", "b")
    send(broker, "r", "c")
    a = broker.receive("q")
    b = broker.receive("q")
    assert a is not None and b is not None
    broker.actions.complete(a)
    broker.actions.abandon(b)
    b = broker.receive("q")
    assert b is not None
    broker.actions.defer(b)
    broker.peek("q", 10)
    q = broker.counters("q")
    observed = (q.sent, q.duplicates_dropped, q.delivered, q.completed, q.abandoned, q.deferred, q.peeked)
    assert observed == (2, 1, 3, 1, 1, 1, 1)
    assert (q.send_operations, q.receive_operations) == (3, 3)
    total = broker.counters()
    assert (total.sent, total.delivered) == (3, 3)


def test_concurrent_senders_and_receivers_lose_and_duplicate_nothing() -> None:
    """Thread safety: with several threads sending and receiving at once, every message is stored once
    with a unique sequence number and completed exactly once."""
    clock = ManualClock(START)
    broker = InProcessBroker(clock)
    broker.declare_queue("q", QueuePolicy(lock_duration=timedelta(minutes=5)))
    per_sender, senders = 300, 4
    completed: list[str] = []
    sequence_numbers: list[int] = []
    done_sending = threading.Event()
    guard = threading.Lock()

    def produce(n: int) -> None:
        for i in range(per_sender):
            send(broker, "q", f"{n}-{i}")

    def consume() -> None:
        while True:
            got = broker.receive("q")
            if got is None:
                if done_sending.is_set() and broker.receive("q") is None:
                    return
                continue
            broker.actions.complete(got)
            with guard:
                completed.append(got.message_id)
                sequence_numbers.append(got.sequence_number)

    producers = [threading.Thread(target=produce, args=(n,)) for n in range(senders)]
    consumers = [threading.Thread(target=consume) for _ in range(3)]
    for t in producers + consumers:
        t.start()
    for t in producers:
        t.join()
    done_sending.set()
    for t in consumers:
        t.join(timeout=10)
    assert sorted(completed) == sorted(f"{n}-{i}" for n in range(senders) for i in range(per_sender))
    assert sorted(sequence_numbers) == list(range(1, per_sender * senders + 1))


def test_same_inputs_and_seed_give_the_same_history() -> None:
    """Determinism: lock tokens, sequence numbers and injected faults depend only on the inputs and the
    seed, never on the wall clock or global randomness."""

    def run(seed: int) -> list[tuple[str, int, str | None, int]]:
        clock = ManualClock(START)
        broker = InProcessBroker(clock, send_faults=SendFaults(0.2, random.Random(seed), stored_anyway_rate=0.5))
        broker.declare_queue("q", QueuePolicy(lock_duration=LOCK, max_delivery_count=2))
        trace: list[tuple[str, int, str | None, int]] = []
        for i in range(50):
            with contextlib.suppress(SendError):
                send(broker, "q", f"m{i % 30}")
            got = broker.receive("q")
            if got is not None:
                trace.append((got.message_id, got.sequence_number, got.lock_token, got.delivery_count))
                if i % 3 == 0:
                    broker.actions.abandon(got)
                elif i % 3 == 1:
                    broker.actions.complete(got)
            clock.advance(timedelta(seconds=7))
        return trace

    assert run(3) == run(3)
    assert run(3) != run(4)


@pytest.mark.parametrize(
    "policy",
    [
        {"lock_duration": timedelta(minutes=5, seconds=1)},
        {"lock_duration": timedelta(0)},
        {"duplicate_detection_window": timedelta(seconds=19)},
        {"duplicate_detection_window": timedelta(days=7, seconds=1)},
    ],
    ids=["lock-over-5-minutes", "no-lock", "window-under-20-seconds", "window-over-7-days"],
)
def test_a_queue_policy_service_bus_would_refuse_cannot_be_declared(policy: dict[str, timedelta]) -> None:
    """Service Bus refuses a queue whose lock duration is over 5 minutes (ServiceBusQueueData.LockDuration) or
    whose duplicate detection window is outside 20 seconds to 7 days (duplicate-detection doc): the broker
    never runs a queue that could not exist (``localrun/servicebus/policy.py``)."""
    with pytest.raises(ValueError, match="Service Bus"):
        QueuePolicy(**policy)  # type: ignore[arg-type]


def test_the_limits_themselves_are_accepted() -> None:
    QueuePolicy(lock_duration=timedelta(minutes=5), duplicate_detection_window=timedelta(seconds=20))
    QueuePolicy(duplicate_detection_window=timedelta(days=7))
