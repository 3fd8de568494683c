"""The dead-letter watch (supervisor/dead_letters.py) logs each message that arrives in an app queue's dead-letter
subqueue once (``DeadLetterFound``), the broker's own dead-letterings too, whatever waits there already, also one
numbered below those logged before it (a dead-lettered message keeps its queue's number); what it has seen, a Cosmos
document per queue written conditionally, survives a restart and a lost race.

Red team (dlq-alerts): the dead-letter alert was a metric alert on ``DeadletteredMessages``, the messages WAITING in
dead-letter queues: stateful, it stayed fired while an old dead letter waited and a new one (above all one the
broker made, ``MaxDeliveryCountExceeded`` or ``TTLExpiredException``, which the app never logs) paged nobody
(tests/observability/test_dead_letter_alert.py runs the rule that replaces it)."""

from __future__ import annotations

import gc
import logging
import weakref
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.dead_letter_store import CosmosDeadLetterCursors
from adapters.dead_letter_ports import DeadLetterWatchPorts
from adapters.servicebus.sender import OutgoingMessage
from contracts.names import AGENT_REPLIES_QUEUE, APP_QUEUES, ORDERS_QUEUE, STATE_CONTAINER
from domain.dead_letters import DeadLetterCursor
from localrun.servicebus import InProcessBroker, QueuePolicy
from supervisor.budget import RunBudget
from supervisor.dead_letters import FAILURES_BEFORE_PAGE, WATCH_INTERVAL, watch_dead_letters
from tests.supervisor.conftest import MakeContext

pytestmark = pytest.mark.cosmos


@pytest.fixture
def broker(clock: ManualClock) -> InProcessBroker:
    broker = InProcessBroker(clock)
    for queue in APP_QUEUES:
        broker.declare_queue(queue, QueuePolicy(max_delivery_count=2, default_ttl=timedelta(days=1)))
    return broker


def _ports(broker: InProcessBroker, cosmos_db: Any) -> DeadLetterWatchPorts:
    return DeadLetterWatchPorts(
        broker.deferred_store, CosmosDeadLetterCursors(cosmos_db.get_container_client(STATE_CONTAINER))
    )


def _found(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    keys = ("queue", "sequenceNumber", "messageId", "reason", "description", "orderId", "deliveryCount")
    found = [r for r in caplog.records if getattr(r, "event", None) == "DeadLetterFound"]
    caplog.clear()
    return [{k: getattr(r, k) for k in keys} for r in found]


def _app_dead_letters(broker: InProcessBroker, queue: str, message_id: str, body: str = "{}") -> None:
    broker.send(queue, OutgoingMessage(body=body, message_id=message_id))
    message = broker.receive(queue)
    assert message is not None and message.message_id == message_id
    broker.actions.deadletter(message, deadletter_reason="InvalidFields", deadletter_error_description="no amount")


def _broker_dead_letters(broker: InProcessBroker, queue: str, message_id: str, body: str) -> None:
    """Two deliveries abandoned (lock lost, the worker died...): the broker moves it, MaxDeliveryCountExceeded."""
    broker.send(queue, OutgoingMessage(body=body, message_id=message_id))
    for _ in range(2):
        message = broker.receive(queue)
        assert message is not None
        broker.actions.abandon(message)


def _with_ports(make_ctx: MakeContext, ports: DeadLetterWatchPorts) -> Any:
    return replace(make_ctx(), dead_letters=ports)


def test_each_new_dead_letter_is_logged_once_while_old_ones_wait(
    make_ctx: MakeContext, cosmos_db: Any, broker: InProcessBroker, clock: ManualClock, caplog: Any
) -> None:
    caplog.set_level(logging.INFO)
    ctx = _with_ports(make_ctx, _ports(broker, cosmos_db))
    _app_dead_letters(broker, ORDERS_QUEUE, "old-1")
    assert watch_dead_letters(ctx) == 1
    [old] = _found(caplog)
    assert old == {
        "queue": ORDERS_QUEUE,
        "sequenceNumber": 1,
        "messageId": "old-1",
        "reason": "InvalidFields",
        "description": "no amount",
        "orderId": None,
        "deliveryCount": 1,
    }
    clock.advance(WATCH_INTERVAL)
    assert watch_dead_letters(ctx) == 0  # it still waits: not logged again
    assert _found(caplog) == []
    # the broker dead-letters a reply the app never settled: the app logs nothing of it, the watch does
    _broker_dead_letters(broker, AGENT_REPLIES_QUEUE, "reply-7", '{"orderId": "ord-7", "step": "pay"}')
    _app_dead_letters(broker, ORDERS_QUEUE, "new-2", '{"orderId": "ord-2"}')
    clock.advance(WATCH_INTERVAL)
    assert watch_dead_letters(ctx) == 2
    found = {(f["queue"], f["messageId"]): f for f in _found(caplog)}
    assert set(found) == {(ORDERS_QUEUE, "new-2"), (AGENT_REPLIES_QUEUE, "reply-7")}
    reply = found[(AGENT_REPLIES_QUEUE, "reply-7")]
    assert (reply["reason"], reply["orderId"], reply["sequenceNumber"]) == ("MaxDeliveryCountExceeded", "ord-7", 1)
    assert found[(ORDERS_QUEUE, "new-2")]["sequenceNumber"] == 2
    # a new process (restart): its cursors are in Cosmos, nothing is logged again
    ctx.forget_process_memory()
    assert watch_dead_letters(ctx) == 0
    assert _found(caplog) == []


def test_the_watch_runs_at_most_once_an_interval_per_process(
    make_ctx: MakeContext, cosmos_db: Any, broker: InProcessBroker, clock: ManualClock, caplog: Any
) -> None:
    caplog.set_level(logging.INFO)
    ctx = _with_ports(make_ctx, _ports(broker, cosmos_db))
    assert watch_dead_letters(ctx) == 0
    _app_dead_letters(broker, ORDERS_QUEUE, "m-1")
    clock.advance(WATCH_INTERVAL - timedelta(seconds=1))
    assert watch_dead_letters(ctx) == 0  # too soon: the next run logs it
    clock.advance(timedelta(seconds=1))
    assert watch_dead_letters(ctx) == 1


class _RacedCursors:
    """Cosmos documents whose first write of a queue's meets another instance's run, which saw ``other_saw``
    waiting and wrote first."""

    def __init__(self, inner: CosmosDeadLetterCursors, clock: ManualClock, other_saw: list[int]) -> None:
        self._inner, self._clock, self._other_saw, self.raced = inner, clock, other_saw, False

    def get(self, queue: str) -> DeadLetterCursor | None:
        return self._inner.get(queue)

    def save(self, doc: DeadLetterCursor) -> DeadLetterCursor:
        if not self.raced:
            self.raced = True
            current = self._inner.get(doc.queue)
            other = current or DeadLetterCursor.fresh(doc.queue, self._clock.now())
            self._inner.save(other.seeing(self._other_saw, None, self._clock.now()))
        return self._inner.save(doc)


def test_a_run_that_lost_a_race_writes_what_it_saw_and_nothing_is_logged_again(
    make_ctx: MakeContext, cosmos_db: Any, broker: InProcessBroker, clock: ManualClock, caplog: Any
) -> None:
    caplog.set_level(logging.INFO)
    cursors = CosmosDeadLetterCursors(cosmos_db.get_container_client(STATE_CONTAINER))
    for i in range(4):
        _app_dead_letters(broker, ORDERS_QUEUE, f"m-{i}")
    raced = _RacedCursors(cursors, clock, other_saw=[1, 2, 3])
    ctx = _with_ports(make_ctx, DeadLetterWatchPorts(broker.deferred_store, raced))
    assert watch_dead_letters(ctx, (ORDERS_QUEUE,)) == 4
    seen = cursors.get(ORDERS_QUEUE)
    assert raced.raced and seen is not None and seen.new_of([1, 2, 3, 4]) == []  # its own view, read again
    _found(caplog)
    _app_dead_letters(broker, ORDERS_QUEUE, "m-4")
    clock.advance(WATCH_INTERVAL)
    assert watch_dead_letters(ctx, (ORDERS_QUEUE,)) == 1
    assert [f["messageId"] for f in _found(caplog)] == ["m-4"]


def test_a_message_dead_lettered_after_others_with_a_lower_number_is_logged(
    make_ctx: MakeContext, cosmos_db: Any, broker: InProcessBroker, clock: ManualClock, caplog: Any
) -> None:
    """A cursor past the newest number logged missed it: the broker dead-letters a message after its last
    delivery, and it keeps the number it had on the queue, below the app's dead letters made meanwhile."""
    caplog.set_level(logging.INFO)
    ctx = _with_ports(make_ctx, _ports(broker, cosmos_db))
    broker.send(ORDERS_QUEUE, OutgoingMessage(body='{"orderId": "ord-1"}', message_id="slow-1"))
    first = broker.receive(ORDERS_QUEUE)
    assert first is not None and first.message_id == "slow-1"
    broker.actions.abandon(first)  # its first delivery failed
    last = broker.receive(ORDERS_QUEUE)  # its last delivery, locked while another message comes and goes
    assert last is not None and last.message_id == "slow-1"
    _app_dead_letters(broker, ORDERS_QUEUE, "bad-2")
    assert watch_dead_letters(ctx) == 1
    assert [(f["messageId"], f["sequenceNumber"]) for f in _found(caplog)] == [("bad-2", 2)]
    broker.actions.abandon(last)  # the broker dead-letters it, numbered 1
    clock.advance(WATCH_INTERVAL)
    assert watch_dead_letters(ctx) == 1
    [late] = _found(caplog)
    assert (late["messageId"], late["sequenceNumber"], late["reason"]) == ("slow-1", 1, "MaxDeliveryCountExceeded")


def test_a_subqueue_over_the_scan_is_watched_over_its_lowest_numbers_and_nothing_beyond_is_logged_twice(
    make_ctx: MakeContext, cosmos_db: Any, broker: InProcessBroker, clock: ManualClock, caplog: Any, monkeypatch: Any
) -> None:
    import supervisor.dead_letters as watch

    monkeypatch.setattr(watch, "MAX_SCAN", 5)
    monkeypatch.setattr(watch, "PEEK_BATCH", 2)
    caplog.set_level(logging.INFO)
    cursors = CosmosDeadLetterCursors(cosmos_db.get_container_client(STATE_CONTAINER))
    ctx = _with_ports(make_ctx, DeadLetterWatchPorts(broker.deferred_store, cursors))
    for i in range(3):
        _app_dead_letters(broker, ORDERS_QUEUE, f"m-{i}")
    assert watch_dead_letters(ctx, (ORDERS_QUEUE,)) == 3
    for i in range(3, 8):
        _app_dead_letters(broker, ORDERS_QUEUE, f"m-{i}")
    clock.advance(WATCH_INTERVAL)
    assert watch_dead_letters(ctx, (ORDERS_QUEUE,)) == 2  # 4 and 5: the scan ends at 5
    # an operator takes the oldest three away: 6 to 8 come into the scan and are logged, 4 and 5 not again
    for dead in broker.dead_letters(ORDERS_QUEUE)[:3]:
        assert broker.take_dead_letter(ORDERS_QUEUE, dead.sequence_number) is not None
    _found(caplog)
    clock.advance(WATCH_INTERVAL)
    assert watch_dead_letters(ctx, (ORDERS_QUEUE,)) == 3
    assert [f["sequenceNumber"] for f in _found(caplog)] == [6, 7, 8]


def test_outside_text_is_cleaned_and_a_body_gives_only_its_order(
    make_ctx: MakeContext, cosmos_db: Any, broker: InProcessBroker, caplog: Any
) -> None:
    caplog.set_level(logging.INFO)
    ctx = _with_ports(make_ctx, _ports(broker, cosmos_db))
    broker.send_from_client(
        ORDERS_QUEUE, OutgoingMessage(body='{"orderId": "ord-9", "card": "4111111111111111"}', message_id="m\u202e-9\n")
    )
    message = broker.receive(ORDERS_QUEUE)
    assert message is not None
    broker.actions.deadletter(
        message, deadletter_reason="Bad\u2066Reason", deadletter_error_description="line one\nFORGED line two"
    )
    assert watch_dead_letters(ctx) == 1
    [found] = _found(caplog)
    assert (found["messageId"], found["reason"], found["description"], found["orderId"]) == (
        "m-9",
        "BadReason",
        "line one FORGED line two",
        "ord-9",
    )
    logged = [r for r in caplog.records]
    assert not any("4111" in r.getMessage() for r in logged)


class _BrokenBrowser:
    """Every queue's subqueue peeks, but ``broken``'s fails."""

    def __init__(self, inner: Any, broken: str | None) -> None:
        self._inner, self.broken = inner, broken

    def open_dead_letters(self, queue: str) -> Any:
        if queue == self.broken:
            raise RuntimeError("MessagingEntityNotFound")
        return self._inner.open_dead_letters(queue)


def test_a_queue_that_cannot_be_read_pages_at_its_third_failed_watch_in_a_row_and_the_others_are_watched(
    make_ctx: MakeContext, cosmos_db: Any, broker: InProcessBroker, clock: ManualClock, caplog: Any
) -> None:
    """A busy namespace or a dropped connection fails one watch and passes: a page for it is noise. A queue the
    watch cannot read for six minutes (a role missing, the queue gone) pages."""
    caplog.set_level(logging.INFO)
    cursors = CosmosDeadLetterCursors(cosmos_db.get_container_client(STATE_CONTAINER))
    browser = _BrokenBrowser(broker.deferred_store, ORDERS_QUEUE)
    ctx = _with_ports(make_ctx, DeadLetterWatchPorts(browser, cursors))
    _app_dead_letters(broker, AGENT_REPLIES_QUEUE, "r-1")

    def events(name: str) -> list[str]:
        return [r.phase for r in caplog.records if getattr(r, "event", None) == name]

    for run in range(1, FAILURES_BEFORE_PAGE):
        assert watch_dead_letters(ctx) == (1 if run == 1 else 0)  # the other queues are watched
        assert events("SupervisorPhaseFailed") == []
        assert events("SupervisorRecoveryFailed") == [f"dead-letter watch of {ORDERS_QUEUE}"] * run
        clock.advance(WATCH_INTERVAL)
    caplog.clear()
    assert watch_dead_letters(ctx) == 0
    assert events("SupervisorPhaseFailed") == [f"dead-letter watch of {ORDERS_QUEUE}"]
    # read once again, the count starts over: a later failure is a warning again
    browser.broken = None
    clock.advance(WATCH_INTERVAL)
    watch_dead_letters(ctx)
    browser.broken = ORDERS_QUEUE
    caplog.clear()
    clock.advance(WATCH_INTERVAL)
    watch_dead_letters(ctx)
    assert (events("SupervisorPhaseFailed"), len(events("SupervisorRecoveryFailed"))) == ([], 1)


class _Letter:
    def __init__(self, number: int) -> None:
        self.sequence_number = number


class _Pages:
    """A subqueue of numbers 1..n peeked ``batch`` at a time, each peek new message objects."""

    def __init__(self, n: int) -> None:
        self._n = n
        self.handed: list[weakref.ref[_Letter]] = []

    def peek(self, max_count: int, from_sequence_number: int = 0) -> list[Any]:
        page = [_Letter(k) for k in range(from_sequence_number, min(self._n, from_sequence_number + max_count - 1) + 1)]
        self.handed += [weakref.ref(m) for m in page]
        return page


def test_a_read_keeps_only_the_messages_it_has_not_seen() -> None:
    """Up to 1,000 bodies of up to 256 KB each: the ones seen before are let go page by page, not held to the end."""
    from supervisor.dead_letters import PEEK_BATCH, _waiting

    pages = _Pages(3 * PEEK_BATCH)
    seen = DeadLetterCursor.fresh(ORDERS_QUEUE, ManualClock().now()).seeing(
        range(1, 2 * PEEK_BATCH + 1), None, ManualClock().now()
    )
    numbers, unseen, read_up_to = _waiting(pages, seen, lambda: True)
    gc.collect()
    assert numbers == list(range(1, 3 * PEEK_BATCH + 1)) and read_up_to is None
    assert [m.sequence_number for m in unseen] == list(range(2 * PEEK_BATCH + 1, 3 * PEEK_BATCH + 1))
    alive = [m for m in (ref() for ref in pages.handed) if m is not None]
    assert {m.sequence_number for m in alive} == {m.sequence_number for m in unseen}


class _CountedCursors:
    def __init__(self, inner: CosmosDeadLetterCursors) -> None:
        self._inner, self.reads, self.writes = inner, 0, 0

    def get(self, queue: str) -> DeadLetterCursor | None:
        self.reads += 1
        return self._inner.get(queue)

    def save(self, doc: DeadLetterCursor) -> DeadLetterCursor:
        self.writes += 1
        return self._inner.save(doc)


def test_a_watch_that_finds_nothing_changed_reads_each_queue_s_document_once_and_writes_nothing(
    make_ctx: MakeContext, cosmos_db: Any, broker: InProcessBroker, clock: ManualClock
) -> None:
    counted = _CountedCursors(CosmosDeadLetterCursors(cosmos_db.get_container_client(STATE_CONTAINER)))
    ctx = _with_ports(make_ctx, DeadLetterWatchPorts(broker.deferred_store, counted))
    _app_dead_letters(broker, ORDERS_QUEUE, "m-1")
    assert watch_dead_letters(ctx) == 1
    assert counted.writes == 1  # the one queue whose subqueue changed
    counted.reads = counted.writes = 0
    clock.advance(WATCH_INTERVAL)
    assert watch_dead_letters(ctx) == 0
    assert (counted.reads, counted.writes) == (len(APP_QUEUES), 0)


def test_a_supervisor_run_whose_budget_is_spent_peeks_nothing_and_the_next_run_watches(
    make_ctx: MakeContext, cosmos_db: Any, broker: InProcessBroker, clock: ManualClock, caplog: Any
) -> None:
    """The watch runs last in the supervisor's run (supervisor/budget.py): a run whose budget its phases spent
    peeks nothing, says so, and is not counted as a watch, so the next run's watches at once."""
    caplog.set_level(logging.INFO)
    ctx = _with_ports(make_ctx, _ports(broker, cosmos_db))
    _app_dead_letters(broker, ORDERS_QUEUE, "m-1")

    assert watch_dead_letters(ctx, APP_QUEUES, RunBudget.start(clock, timedelta(0))) == 0
    stopped = [r.__dict__ for r in caplog.records if getattr(r, "event", None) == "SupervisorPhaseStopped"]
    assert [(s["phase"], s["done"], s["left"]) for s in stopped] == [("dead-letter watch", 0, len(APP_QUEUES))]
    assert _found(caplog) == []
    assert watch_dead_letters(ctx) == 1  # the next run, at once
