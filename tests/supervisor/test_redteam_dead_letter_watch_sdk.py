"""The dead-letter watch (supervisor/dead_letters.py) on the messages the real SDK peeks: an
``azure.servicebus.ServiceBusReceivedMessage``, whose ``body`` is a generator of data sections (or, for a message
another AMQP client sent with a value or sequence body, that value), not the bytes the local broker's messages hold.

Red team (rt-dlwatch): the watch read the order a body names with ``bytes(message.body)``, which the local broker's
bytes allow and the SDK's generator refuses (TypeError), so on Azure every new dead letter failed its queue's watch:
a ``SupervisorPhaseFailed`` every run and no ``DeadLetterFound`` ever, the alert it exists for never paged. A value
body is worse: ``bytes(<int>)`` allocates that many zero bytes. The body is now read as every trigger reads one
(``adapters.servicebus.settlement.body_bytes``); one that is not data names no order."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from typing import Any

from azure.servicebus import ServiceBusReceivedMessage

from adapters.clock import ManualClock
from adapters.dead_letter_ports import DeadLetterWatchPorts
from adapters.servicebus.sender import OutgoingMessage
from contracts.names import ORDERS_QUEUE
from domain.dead_letters import DeadLetterCursor
from localrun.servicebus import InProcessBroker, QueuePolicy
from localrun.servicebus.wire import encode_amqp_message
from supervisor.dead_letters import watch_dead_letters
from tests.fakes import sdk_value_body_message


class _Cursors:
    def __init__(self) -> None:
        self.docs: dict[str, DeadLetterCursor] = {}

    def get(self, queue: str) -> DeadLetterCursor | None:
        return self.docs.get(queue)

    def save(self, doc: DeadLetterCursor) -> DeadLetterCursor:
        saved = replace(doc, version=str(len(self.docs) + 1))
        self.docs[doc.queue] = saved
        return saved


class _SdkPeeker:
    """The broker's subqueue peeked, each message as the SDK decodes the service's answer."""

    def __init__(self, inner: Any, extra: list[ServiceBusReceivedMessage]) -> None:
        self._inner, self._extra = inner, extra

    def peek(self, max_count: int, from_sequence_number: int = 0) -> list[Any]:
        found: list[Any] = [ServiceBusReceivedMessage.from_bytes(encode_amqp_message(m)) for m in self._inner.peek(250)]
        found += self._extra
        kept = [m for m in found if int(m.sequence_number) >= from_sequence_number]
        return sorted(kept, key=lambda m: int(m.sequence_number))[:max_count]


class _SdkBrowser:
    def __init__(self, broker: InProcessBroker, extra: list[ServiceBusReceivedMessage]) -> None:
        self._broker, self._extra = broker, extra

    @contextmanager
    def open_dead_letters(self, queue: str) -> Iterator[_SdkPeeker]:
        with self._broker.deferred_store.open_dead_letters(queue) as inner:
            yield _SdkPeeker(inner, self._extra if queue == ORDERS_QUEUE else [])


class _Ctx:
    def __init__(self, clock: ManualClock, ports: DeadLetterWatchPorts) -> None:
        self.clock = clock
        self.dead_letters = ports


def test_dead_letters_the_sdk_peeks_are_logged_with_their_order(caplog: Any) -> None:
    caplog.set_level(logging.INFO)
    clock = ManualClock()
    broker = InProcessBroker(clock)
    broker.declare_queue(ORDERS_QUEUE, QueuePolicy(max_delivery_count=2, default_ttl=timedelta(days=1)))
    broker.send(ORDERS_QUEUE, OutgoingMessage(body='{"orderId": "ord-1"}', message_id="m-1"))
    message = broker.receive(ORDERS_QUEUE)
    assert message is not None
    broker.actions.deadletter(message, deadletter_reason="InvalidFields", deadletter_error_description="no amount")
    extra = [sdk_value_body_message(50, {"orderId": "ord-2"}, "NotJson"), sdk_value_body_message(51, 7, "NotJson")]
    ports = DeadLetterWatchPorts(_SdkBrowser(broker, extra), _Cursors())  # type: ignore[arg-type]
    ctx: Any = _Ctx(clock, ports)

    assert watch_dead_letters(ctx, (ORDERS_QUEUE,)) == 3

    failed = [r for r in caplog.records if getattr(r, "event", None) == "SupervisorPhaseFailed"]
    assert failed == []
    found = [r for r in caplog.records if getattr(r, "event", None) == "DeadLetterFound"]
    assert [(r.sequenceNumber, r.orderId, r.reason) for r in found] == [
        (1, "ord-1", "InvalidFields"),
        (50, None, "NotJson"),  # not data: it names no order
        (51, None, "NotJson"),
    ]


class _ShortPages:
    """The service returns fewer messages than asked though more wait ("no guarantee of a minimum batch size":
    Microsoft Learn, Message browsing): one a peek here."""

    def __init__(self, broker: InProcessBroker) -> None:
        self._broker = broker

    @contextmanager
    def open_dead_letters(self, queue: str) -> Iterator[Any]:
        with self._broker.deferred_store.open_dead_letters(queue) as inner:

            class _One:
                def peek(self, max_count: int, from_sequence_number: int = 0) -> list[Any]:
                    return list(inner.peek(max_count, from_sequence_number))[:1]

            yield _One()


def test_a_short_answer_is_not_the_end_of_the_subqueue(caplog: Any) -> None:
    caplog.set_level(logging.INFO)
    clock = ManualClock()
    broker = InProcessBroker(clock)
    broker.declare_queue(ORDERS_QUEUE, QueuePolicy(max_delivery_count=2, default_ttl=timedelta(days=1)))
    for i in range(5):
        broker.send(ORDERS_QUEUE, OutgoingMessage(body="{}", message_id=f"m-{i}"))
        message = broker.receive(ORDERS_QUEUE)
        assert message is not None
        broker.actions.deadletter(message, deadletter_reason="InvalidFields", deadletter_error_description="x")
    ctx: Any = _Ctx(clock, DeadLetterWatchPorts(_ShortPages(broker), _Cursors()))  # type: ignore[arg-type]
    assert watch_dead_letters(ctx, (ORDERS_QUEUE,)) == 5
