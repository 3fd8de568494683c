"""Browsing a queue from its newest end (``adapters.servicebus.browse``) over the local broker's receiver,
which peeks as Service Bus does (tests/localrun/test_broker_deferral.py), and over a receiver double for
what the broker cannot hold: sequence numbers near the top of the 64-bit space, answers shorter than
asked."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.servicebus.browse import MAX_SEQUENCE_NUMBER, TailHint, last_sequence_number, peek_newest
from adapters.servicebus.sender import OutgoingMessage
from localrun.servicebus import InProcessBroker

START = datetime(2026, 5, 1, tzinfo=UTC)


def broker_with(count: int) -> InProcessBroker:
    broker = InProcessBroker(ManualClock(START))
    broker.declare_queue("q")
    for number in range(1, count + 1):
        broker.send("q", OutgoingMessage(body=f"m{number}", message_id=f"m{number}"))
    return broker


def remove(broker: InProcessBroker, numbers: set[int]) -> None:
    """Complete the messages with these sequence numbers, defer the others (still peeked): gaps."""
    while (got := broker.receive("q")) is not None:
        if got.sequence_number in numbers:
            broker.actions.complete(got)
        else:
            broker.actions.defer(got)


def peeks(broker: InProcessBroker) -> int:
    return broker.counters("q").peeked


@pytest.mark.parametrize("count", [1, 2, 3, 7, 64, 65, 1000])
def test_the_newest_sequence_number_is_found_from_the_oldest_message(count: int) -> None:
    broker = broker_with(count)
    with broker.deferred_store.open("q") as receiver:
        assert last_sequence_number(receiver) == count
    assert peeks(broker) <= 2 * math.ceil(math.log2(count)) + 2


def test_an_empty_queue_has_no_newest_message() -> None:
    broker = broker_with(0)
    with broker.deferred_store.open("q") as receiver:
        assert last_sequence_number(receiver) is None
        assert last_sequence_number(receiver, hint=5) is None
        hint = TailHint(7)
        assert peek_newest(receiver, 10, hint) == []
    assert hint.sequence_number == 0


def test_gaps_where_messages_were_removed_do_not_mislead_the_search() -> None:
    """Sequence numbers of removed messages are not reused: the search finds the newest message still on
    the queue, whether the gaps are in the middle, at the oldest end or at the newest."""
    broker = broker_with(300)
    remove(broker, {*range(1, 40), *range(100, 260), 298, 299, 300})
    with broker.deferred_store.open("q") as receiver:
        assert last_sequence_number(receiver) == 297
        for hint in (1, 120, 297, 299, 301, 10**12):
            assert last_sequence_number(receiver, hint) == 297, hint
        window = peek_newest(receiver, 50)
    assert [m.sequence_number for m in window] == [*range(260, 298)]  # 248-297, of which 248-259 are gone


@pytest.mark.parametrize("hint", [1, 500, 9_990, 10_000, 10_001, 2**40])
def test_any_hint_gives_the_newest_message(hint: int) -> None:
    broker = broker_with(10_000)
    with broker.deferred_store.open("q") as receiver:
        assert last_sequence_number(receiver, hint) == 10_000


def test_a_hint_at_the_newest_message_costs_two_peeks_and_new_messages_a_few_more() -> None:
    """What a polled summary pays: two one-message peeks when nothing arrived, about 2 * log2(k) + 2 when
    k did, whatever the queue holds; without a hint about 2 * log2(n) for n messages."""
    broker = broker_with(10_000)
    hint = TailHint()
    with broker.deferred_store.open("q") as receiver:
        assert [m.sequence_number for m in peek_newest(receiver, 20, hint)] == [*range(9_981, 10_001)]
    first = peeks(broker)
    assert hint.sequence_number == 10_000 and first <= 2 * math.ceil(math.log2(10_000)) + 3

    with broker.deferred_store.open("q") as receiver:
        assert [m.sequence_number for m in peek_newest(receiver, 20, hint)][-1] == 10_000
    assert peeks(broker) - first == 3  # the hint, one past it, the window

    for number in range(10_001, 10_101):
        broker.send("q", OutgoingMessage(body=f"m{number}", message_id=f"m{number}"))
    before = peeks(broker)
    with broker.deferred_store.open("q") as receiver:
        assert [m.sequence_number for m in peek_newest(receiver, 20, hint)] == [*range(10_081, 10_101)]
    assert hint.sequence_number == 10_100
    assert peeks(broker) - before <= 2 * math.ceil(math.log2(100)) + 3


@dataclass
class Peeked:
    sequence_number: int


class SparseQueue:
    """A ``DeferredReceiver`` whose messages have the given sequence numbers; its peek answers at most
    ``answer_at_most`` messages (Service Bus "returns at most the requested number": a short answer is not
    the end of the queue)."""

    def __init__(self, sequence_numbers: list[int], answer_at_most: int | None = None) -> None:
        self.sequence_numbers = sorted(sequence_numbers)
        self.answer_at_most = answer_at_most
        self.calls: list[tuple[int, int]] = []

    def peek(self, max_count: int, from_sequence_number: int = 0) -> list[Any]:
        if not 0 <= from_sequence_number <= MAX_SEQUENCE_NUMBER:
            raise OverflowError(f"a sequence number is a 64-bit signed integer, not {from_sequence_number}")
        self.calls.append((max_count, from_sequence_number))
        count = min(max_count, self.answer_at_most or max_count)
        return [Peeked(n) for n in self.sequence_numbers if n >= from_sequence_number][:count]


def test_the_search_stays_within_the_64_bit_space_and_128_peeks() -> None:
    for numbers in ([1, MAX_SEQUENCE_NUMBER], [MAX_SEQUENCE_NUMBER], [1, 2**62 + 5], [3, 2**63 - 2]):
        queue = SparseQueue(numbers)
        assert last_sequence_number(queue) == numbers[-1]
        assert len(queue.calls) <= 128, (numbers, len(queue.calls))
        queue = SparseQueue(numbers)
        assert last_sequence_number(queue, hint=MAX_SEQUENCE_NUMBER) == numbers[-1]
        assert len(queue.calls) <= 128


def test_short_answers_are_read_on_to_the_newest_message() -> None:
    queue = SparseQueue([*range(1, 501)], answer_at_most=7)
    assert [m.sequence_number for m in peek_newest(queue, 40)] == [*range(461, 501)]


def test_a_window_wider_than_one_peek_answers_is_read_whole_over_the_broker() -> None:
    """The broker stops a peek at 250 messages, as Service Bus does (tests/localrun/test_broker_deferral.py):
    a window of 300 still gets every one of the newest 300."""
    broker = broker_with(400)
    with broker.deferred_store.open("q") as receiver:
        assert [m.sequence_number for m in peek_newest(receiver, 300)] == [*range(101, 401)]
