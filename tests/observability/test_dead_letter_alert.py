"""Does a new dead letter page an operator while older ones wait? The ``deadLettersFound`` log alert rule
(infra/modules/alerts.bicep) run as Azure Monitor runs it (tests/infra/log_alerts.py) on the rows Application
Insights stores for the dead-letter watch's ``DeadLetterFound`` events (supervisor/dead_letters.py, through the real
exporter: tests/observability/exported.py).

Red team (dlq-alerts): the rule was a metric alert on Service Bus's ``DeadletteredMessages``, the count of messages
WAITING in the dead-letter queues (maximum over the window, greater than 0). A metric alert is stateful: it fired at
the first dead letter and stayed fired while any waited, so a dead letter made days later, while the first still
waited (operators leave them), paged nobody, above all one the broker made (``MaxDeliveryCountExceeded``,
``TTLExpiredException``), which no app event names."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from typing import Any

from adapters.clock import ManualClock
from adapters.dead_letter_ports import DeadLetterWatchPorts, WatchState
from adapters.servicebus.sender import OutgoingMessage
from contracts.names import AGENT_REPLIES_QUEUE, APP_QUEUES, ORDERS_QUEUE
from domain.dead_letters import DeadLetterCursor
from localrun.servicebus import InProcessBroker, QueuePolicy
from settings import SEND_TIMEOUT
from supervisor.dead_letters import WATCH_INTERVAL, watch_dead_letters
from tests.infra.log_alerts import LogRule
from tests.infra.paths import MODULES
from tests.observability.exported import exported
from tools.bicepcheck.query import load, resources


class _Cursors:
    """The watch's cursors in memory (the Cosmos store's conditional writes are tests/supervisor's)."""

    def __init__(self) -> None:
        self.docs: dict[str, DeadLetterCursor] = {}
        self.writes = 0

    def get(self, queue: str) -> DeadLetterCursor | None:
        return self.docs.get(queue)

    def save(self, doc: DeadLetterCursor) -> DeadLetterCursor:
        self.writes += 1
        saved = replace(doc, version=str(self.writes))
        self.docs[doc.queue] = saved
        return saved


class _World:
    def __init__(self) -> None:
        self.clock = ManualClock()
        self.broker = InProcessBroker(self.clock)
        for queue in APP_QUEUES:
            self.broker.declare_queue(queue, QueuePolicy(max_delivery_count=2))
        self.cursors = _Cursors()
        self.ports = DeadLetterWatchPorts(self.broker.deferred_store, self.cursors)  # one process's
        self.start = self.clock.now()

    def watch(self) -> list[tuple[float, str, dict[str, str]]]:
        """One watch run now (the supervisor's), its rows at the minute it ran."""
        ctx: Any = _Ctx(self.clock, self.ports)
        with exported() as rows:
            watch_dead_letters(ctx)
        minute = (self.clock.now() - self.start).total_seconds() / 60
        return [(minute, r.table, r.properties) for r in rows]

    def app_dead_letters(self, queue: str, message_id: str) -> None:
        self.broker.send(queue, OutgoingMessage(body="{}", message_id=message_id))
        message = self.broker.receive(queue)
        assert message is not None
        self.broker.actions.deadletter(message, deadletter_reason="InvalidFields", deadletter_error_description="x")

    def broker_dead_letters(self, queue: str, message_id: str, order_id: str) -> None:
        self.broker.send(queue, OutgoingMessage(body=f'{{"orderId": "{order_id}"}}', message_id=message_id))
        for _ in range(2):
            message = self.broker.receive(queue)
            assert message is not None
            self.broker.actions.abandon(message)

    def at(self, minute: float) -> None:
        self.clock.set(self.start + timedelta(minutes=minute))


class _Ctx:
    """What the watch reads of the app's context: its clock and its ports."""

    def __init__(self, clock: ManualClock, ports: DeadLetterWatchPorts) -> None:
        self.clock = clock
        self.dead_letters = ports


def test_the_rule_counts_dead_letters_found_not_the_messages_waiting() -> None:
    alerts = load(MODULES / "alerts.bicep")
    metrics = [
        r.body["properties"]["criteria"]["allOf"][0]["metricName"]
        for r in resources(alerts, "Microsoft.Insights/metricAlerts")
    ]
    assert "DeadletteredMessages" not in metrics
    assert LogRule.of("deadLettersFound").dimensions == ("queue", "reason")


def test_a_new_dead_letter_pages_while_an_old_one_waits_for_days() -> None:
    world = _World()
    rule = LogRule.of("deadLettersFound")
    events = []
    world.at(1)
    world.app_dead_letters(ORDERS_QUEUE, "old")
    events += world.watch()
    for minute in range(3, 3 * 24 * 60, 2):  # three days of supervisor runs: "old" is never logged again
        world.at(minute)
        events += world.watch()
        if minute == 2 * 24 * 60 + 1:  # two days on, "old" still waiting, the broker dead-letters a reply
            world.broker_dead_letters(AGENT_REPLIES_QUEUE, "reply-1", "ord-1")
        if minute == 2 * 24 * 60 + 9:  # and then an order message, eight minutes later
            world.app_dead_letters(ORDERS_QUEUE, "new")
    assert len(world.broker.dead_letters()) == 3  # all of them wait
    found = [(row["queue"], row["messageId"], row.get("reason")) for _, _, row in events]
    assert found == [
        (ORDERS_QUEUE, "old", "InvalidFields"),
        (AGENT_REPLIES_QUEUE, "reply-1", "MaxDeliveryCountExceeded"),
        (ORDERS_QUEUE, "new", "InvalidFields"),
    ]
    pages = rule.pages(events, until=3 * 24 * 60)
    assert [key for _, key in pages] == [
        (ORDERS_QUEUE, "InvalidFields"),
        (AGENT_REPLIES_QUEUE, "MaxDeliveryCountExceeded"),
        (ORDERS_QUEUE, "InvalidFields"),
    ]


def test_a_dead_letter_logged_twice_pages_once() -> None:
    """A run that died after it logged and before it moved its cursor (or two runs at once): the next logs the same
    dead letter again; it is one alert."""
    world = _World()
    world.at(1)
    world.broker_dead_letters(ORDERS_QUEUE, "m-1", "ord-1")
    first = world.watch()
    world.cursors.docs.clear()  # as if its cursor write never landed
    world.at(1 + WATCH_INTERVAL.total_seconds() / 60)
    again = world.watch()
    assert len(first) == len(again) == 1
    assert len(LogRule.of("deadLettersFound").pages(first + again, until=60)) == 1


def test_a_store_blip_in_the_watch_pages_nobody_and_its_dead_letter_pages_once() -> None:
    """Red team (rt-dlwatch): the watch's write of what it saw throttled past the SDK's retries (a 429, a 503: the
    store's ``StoreUnavailable``) was a ``SupervisorPhaseFailed``, which the supervisorFailing rule pages: an
    operator woken for a blip that costs nothing (the next run, two minutes on, logs the same dead letters again,
    one alert each, and writes). The rest of the supervisor logs a store that is unavailable as a warning; so does the
    watch now (``SupervisorRecoveryFailed``), and a queue it cannot read still pages."""
    from adapters.cosmos.errors import StoreUnavailable

    world = _World()
    saves = world.cursors.save
    failures = [StoreUnavailable("429 Too Many Requests: retries exhausted")]

    def throttled(doc: DeadLetterCursor) -> DeadLetterCursor:
        if failures:
            raise failures.pop()
        return saves(doc)

    world.cursors.save = throttled  # type: ignore[method-assign]
    world.at(1)
    world.broker_dead_letters(ORDERS_QUEUE, "m-1", "ord-1")
    events = world.watch()
    world.at(1 + WATCH_INTERVAL.total_seconds() / 60)
    events += world.watch()
    world.at(1 + 2 * WATCH_INTERVAL.total_seconds() / 60)
    events += world.watch()  # written by the run before: nothing more
    assert [row["event"] for _, _, row in events].count("DeadLetterFound") == 2
    assert LogRule.of("supervisorFailing").pages(events, until=60) == []
    assert len(LogRule.of("deadLettersFound").pages(events, until=60)) == 1


class _SlowPeeks:
    """Each peek of every subqueue takes ``seconds`` (a throttled namespace: the SDK waits out ServerBusy inside its
    bounded request) on the watch's monotonic clock."""

    def __init__(self, inner: Any, seconds: float) -> None:
        self._inner, self.seconds, self.now, self.peeks = inner, seconds, 0.0, 0

    def monotonic(self) -> float:
        return self.now

    @contextmanager
    def open_dead_letters(self, queue: str) -> Iterator[Any]:
        with self._inner.open_dead_letters(queue) as receiver:
            outer = self

            class _Peeker:
                def peek(self, max_count: int, from_sequence_number: int = 0) -> list[Any]:
                    outer.now += outer.seconds
                    outer.peeks += 1
                    return list(receiver.peek(max_count, from_sequence_number))

            yield _Peeker()


def test_a_throttled_namespace_holds_the_supervisor_run_a_bounded_time_and_every_dead_letter_is_logged_once(
    monkeypatch: Any,
) -> None:
    """Red team (rt-dlwatch): the watch runs at the end of the supervisor's run, inside its timer: until it returns,
    no next run recovers an expired attempt (the schedule is 30 s). It read every queue to the end of its scan (ten
    peeks of 100 a queue, six queues), each peek bounded by 30 s: peeks a throttled namespace answers in 20 s held
    the run twenty minutes, near the host's functionTimeout. The watch now starts no peek past ``WATCH_BUDGET`` (a
    read cut short is a partial read: what lies beyond stays as it was), and the next run starts at the queue it
    did not reach."""
    import supervisor.dead_letters as watch

    monkeypatch.setattr(watch, "MAX_SCAN", 50)
    monkeypatch.setattr(watch, "PEEK_BATCH", 5)
    world = _World()
    slow = _SlowPeeks(world.broker.deferred_store, seconds=20)
    ports = DeadLetterWatchPorts(slow, world.cursors, WatchState(monotonic=slow.monotonic))  # type: ignore[arg-type]
    world.ports = ports
    for queue in APP_QUEUES:
        for i in range(12):
            world.app_dead_letters(queue, f"{queue}-{i}")
    logged: list[tuple[str, str]] = []
    for run in range(24):
        if run == 20:
            slow.seconds = 0.0  # the namespace answers at once again
        world.at(1 + run * WATCH_INTERVAL.total_seconds() / 60)
        started = slow.now
        logged += [(row["queue"], row["sequenceNumber"]) for _, _, row in world.watch()]
        assert slow.now - started <= (watch.WATCH_BUDGET + SEND_TIMEOUT).total_seconds()
        if run == 19:  # throttled: every queue was reached, each over its lowest numbers
            assert {q for q, _ in logged} == set(APP_QUEUES)
    assert sorted(logged) == sorted({(q, str(n)) for q in APP_QUEUES for n in range(1, 13)})  # each once


def test_a_burst_of_dead_letters_found_by_one_run_pages_once() -> None:
    """Red team (rt-dlwatch): each dead letter was its own alert (dimensions queue and sequence number), so a burst
    paged once per message: 150 malformed orders (anyone with Send on ``orders`` can send them; the intake
    dead-letters each) were 150 pages in one evaluation. The action group sends at most 100 emails an hour to its
    one address, and a stateful rule fires at most 300 alerts an evaluation (docs/observability.md): a burst spent
    the hour's emails of every rule (an order failing after it was emailed to nobody), and one over 300 left the
    rest out of the portal's alert list too. One alert per queue and watch run that found new dead letters now
    (dimension ``firstNew``, the lowest number new in that run, on each of its ``DeadLetterFound``), then one per
    queue and reason while new ones keep coming (rt-alert-noise: ``firstNew`` paged every run of a trickle, below): a
    burst pages once, a dead letter logged again by a run that died before its write pages once, a later one of the
    same reason while the alert is fired is part of it, another reason pages, the same after quiet pages again."""
    world = _World()
    rule = LogRule.of("deadLettersFound")
    world.at(1)
    for i in range(150):
        world.app_dead_letters(ORDERS_QUEUE, f"junk-{i}")
    events = world.watch()
    assert len(events) == 150  # every one logged
    world.at(7)
    world.app_dead_letters(ORDERS_QUEUE, "later")
    events += world.watch()
    world.at(9)
    world.broker_dead_letters(ORDERS_QUEUE, "worn-out", "ord-1")  # another reason: another problem
    events += world.watch()
    world.at(60)
    world.app_dead_letters(ORDERS_QUEUE, "after-quiet")
    events += world.watch()
    pages = rule.pages(events, until=90)
    assert pages == [
        (5, (ORDERS_QUEUE, "InvalidFields")),
        (10, (ORDERS_QUEUE, "MaxDeliveryCountExceeded")),
        (60, (ORDERS_QUEUE, "InvalidFields")),
    ]


def test_a_trickle_of_dead_letters_pages_once_while_it_lasts() -> None:
    """Red team (rt-alert-noise): one alert per watch run that found new dead letters (``firstNew``) paged every run
    of a trickle: a producer bug sending one bad message a minute for 200 minutes, dead-lettered one by one, was 100
    pages (30 an hour, of the action group's 100 emails an hour for every rule). One problem: one page while it
    lasts, per queue and reason; it pages again once it stopped for three evaluations, or with another reason."""
    world = _World()
    events = []
    for minute in range(1, 200):
        world.at(minute)
        world.app_dead_letters(ORDERS_QUEUE, f"bug-{minute}")
        if minute % 2 == 1:  # the watch runs at most every two minutes
            events += world.watch()
    assert len(events) == 199  # every one logged
    assert len(LogRule.of("deadLettersFound").pages(events, until=260)) == 1
