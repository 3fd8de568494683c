"""The broker's dead-letter subqueue as a receiver peeks it (``<queue>/$deadletterqueue``): a queue of its own, its
each message keeping the sequence number it had on the queue (peeked in that order, so one dead-lettered late may
come first), whoever moved them (the app, or the broker itself:
``MaxDeliveryCountExceeded``, ``TTLExpiredException``), each with the ``DeadLetterReason`` and
``DeadLetterErrorDescription`` its move set (Microsoft Learn, *Service Bus dead-letter queues*). The dead-letter watch
(``supervisor/dead_letters.py``) reads it so."""

from __future__ import annotations

from datetime import timedelta

from adapters.clock import ManualClock
from adapters.servicebus.browse import last_sequence_number
from adapters.servicebus.sender import OutgoingMessage
from localrun.servicebus import InProcessBroker, QueuePolicy


def _broker(**policy: object) -> tuple[InProcessBroker, ManualClock]:
    clock = ManualClock()
    broker = InProcessBroker(clock)
    broker.declare_queue("q", QueuePolicy(**policy))  # type: ignore[arg-type]
    return broker, clock


def test_the_subqueue_keeps_each_message_s_number_and_peeks_in_that_order_with_their_reason() -> None:
    # 2 deliveries: a defer counts one as abandon does (with 1 the defer itself dead-letters: azure-service-bus#375)
    broker, clock = _broker(max_delivery_count=2, default_ttl=timedelta(minutes=5))
    for i in (1, 2, 3):
        broker.send("q", OutgoingMessage(body=f'{{"orderId": "o-{i}"}}', message_id=f"m-{i}"))
    first = broker.receive("q")
    assert first is not None and first.message_id == "m-1"
    broker.actions.defer(first)  # waits on the queue: dead-lettered last, numbered first
    second = broker.receive("q")
    assert second is not None and second.message_id == "m-2"
    broker.actions.deadletter(second, deadletter_reason="InvalidFields", deadletter_error_description="no amount")
    third = broker.receive("q")
    assert third is not None and third.message_id == "m-3"
    broker.actions.abandon(third)
    third = broker.receive("q")
    assert third is not None and third.message_id == "m-3"
    broker.actions.abandon(third)  # its last allowed delivery: the broker dead-letters it
    clock.advance(timedelta(minutes=6))  # m-1, deferred, expires: moved when it is fetched
    with broker.deferred_store.open("q") as main:
        assert main.receive_deferred([first.sequence_number]) == []
    with broker.deferred_store.open_dead_letters("q") as dead:
        peeked = dead.peek(10, 1)
        assert [(m.message_id, m.sequence_number) for m in peeked] == [("m-1", 1), ("m-2", 2), ("m-3", 3)]
        assert [m.dead_letter_reason for m in peeked] == [
            "TTLExpiredException",
            "InvalidFields",
            "MaxDeliveryCountExceeded",
        ]
        assert peeked[1].dead_letter_error_description == "no amount"
        assert [m.message_id for m in dead.peek(10, 3)] == ["m-3"]
        assert dead.peek(10, 4) == []
        assert last_sequence_number(dead) == 3
    assert broker.take_dead_letter("q", 2) is not None
    with broker.deferred_store.open_dead_letters("q") as dead:
        assert [m.message_id for m in dead.peek(10, 1)] == ["m-1", "m-3"]
    with broker.deferred_store.open("q") as main:
        assert main.peek(10) == []  # not on the queue itself


def test_a_peek_of_the_subqueue_is_bounded_as_any_peek() -> None:
    broker, _ = _broker(max_delivery_count=1)
    for i in range(300):
        broker.send("q", OutgoingMessage(body="{}", message_id=f"m-{i}"))
        message = broker.receive("q")
        assert message is not None
        broker.actions.abandon(message)
    with broker.deferred_store.open_dead_letters("q") as dead:
        assert len(dead.peek(1000, 1)) == 250
