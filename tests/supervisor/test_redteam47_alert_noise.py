"""Red team (rt-alert-noise): the owed sweep paged the operator again and again for one problem.

- A submitter's status queue full for good: every failed order of that queue alerted ``NotificationsStuck`` in each
  hour's resend window, one page per order per hour (100 orders of ``status-queue-full-for-good``: 28 such alerts
  in 8 hours). It is one problem, the queue: one alert per reply queue and error, again only when it was over
  (``domain/alert_marks.py``) or once a day; a second queue breaking still pages at once.
- An owed alert that went out but whose record could not be marked delivered was sent again in each hour's resend
  window (past duplicate detection's 10 minutes), and the ``operatorAlertRaised`` rule, resolved after 15 quiet
  minutes, paged for it every hour: the alert is now marked sent beside the record, and the resends send the
  status alone.

Both run the real owed sweep (``supervisor.owed.deliver_due``) over the real Cosmos SDK (the local protocol server);
the marks are documents in the ``state`` container (``adapters/cosmos/alert_mark_store.py``)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.state_store import CosmosStateStore, update_once
from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.names import OPERATOR_ALERTS_QUEUE
from dependencies import AppContext
from domain import transitions
from domain.records import StateRecord
from supervisor import owed
from tests.fakes import RecordingSender, StateStoreThatFails
from tests.infra.log_alerts import LogRule
from tests.observability.exported import exported
from tests.supervisor.conftest import MakeContext

pytestmark = pytest.mark.cosmos

FULL = ("client-a", "client-b")
Event = tuple[float, str, dict[str, str]]  # minute logged, table, Properties
T0 = ManualClock().now()  # every test's clock starts there


class FullQueues(RecordingSender):
    """The queues named in ``full`` refuse every send as a full queue does."""

    def __init__(self) -> None:
        super().__init__()
        self.full: set[str] = set()

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue in self.full:
            raise SendError(f"send to {queue!r} failed: QuotaExceeded: the maximum entity size has been reached")
        super().send(queue, message)


def _failed(states: CosmosStateStore, clock: ManualClock, order_id: str, reply_to: str) -> StateRecord:
    """A record whose attempt failed now (the scheduler's ``Failed``): its alert and status owed from now."""
    record = states.create(transitions.new_record(order_id, reply_to, clock.now()))
    record = update_once(states, record, lambda r: transitions.claim(r, clock.now(), timedelta(minutes=5)))
    owner = record.locked_by
    assert owner is not None
    return update_once(
        states, record, lambda r: owed.owe_notifications(transitions.fail(r, owner, None, "card refused", clock.now()))
    )


def _sweep(ctx: AppContext, clock: ManualClock, span: timedelta, log: list[Event] | None = None) -> None:
    """The owed sweep every two minutes for ``span``; ``log`` gets the rows each logged, at the minute since ``T0``."""
    end = clock.now() + span
    while clock.now() < end:
        clock.advance(timedelta(minutes=2))
        with exported() as rows:
            owed.deliver_due(ctx)
        if log is not None:
            minute = (clock.now() - T0).total_seconds() / 60
            log.extend((minute, row.table, row.properties) for row in rows)


def _pages(log: list[Event], kind: str) -> list[tuple[int, tuple[str, ...]]]:
    """The ``operatorAlertRaised`` rule's pages (infra/modules/alerts.bicep, run by tests/infra/log_alerts.py) of
    the ``kind`` alerts ``log`` raised."""
    mine = [e for e in log if e[2].get("alertKind") == kind]
    return LogRule.of("operatorAlertRaised").pages(mine, until=int(log[-1][0]) + 60 if log else 0)


def _alerts(sender: RecordingSender, kind: str) -> list[dict[str, object]]:
    bodies = [json.loads(m.body) for q, m in sender.sent if q == OPERATOR_ALERTS_QUEUE]
    return [b for b in bodies if b["kind"] == kind]


def test_a_queue_full_for_good_pages_once_and_a_second_queue_still_pages(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock
) -> None:
    sender = FullQueues()
    sender.full.add(FULL[0])
    ctx = make_ctx(sender=sender)
    log: list[Event] = []
    for i in range(3):  # three failed orders of one queue, 25 minutes apart
        _failed(states, clock, f"o-a{i}", FULL[0])
        _sweep(ctx, clock, timedelta(minutes=25), log)
    _sweep(ctx, clock, timedelta(hours=2), log)
    sender.full.add(FULL[1])  # another submitter's queue fills: a new problem
    _failed(states, clock, "o-b0", FULL[1])
    _sweep(ctx, clock, timedelta(hours=2), log)
    stuck = _alerts(sender, "NotificationsStuck")
    # before: one per order and hour (o-a0..o-a2 over 3 to 4 hours, o-b0 over 1): 10 alerts, 10 pages
    assert len({a["alertId"] for a in stuck}) == 2, [a["summary"] for a in stuck]
    assert len(_pages(log, "NotificationsStuck")) == 2
    assert [a["details"]["replyTo"] for a in stuck] == list(FULL)  # type: ignore[index]
    # each order's failure alert went out once (noted on its record)
    assert sorted(str(a["orderId"]) for a in _alerts(sender, "OrderFailed")) == ["o-a0", "o-a1", "o-a2", "o-b0"]
    # each order is still logged, with its queue
    failed = {(e[2]["orderId"], e[2]["replyTo"]) for e in log if e[2].get("event") == "OwedNotificationsFailed"}
    assert failed == {("o-a0", FULL[0]), ("o-a1", FULL[0]), ("o-a2", FULL[0]), ("o-b0", FULL[1])}


def test_a_queue_that_drained_and_fills_again_hours_later_pages_again(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock
) -> None:
    """The first occurrence of a problem is never held back: the queue took sends for longer than
    ``ENDED_AFTER`` (its orders delivered), then filled again."""
    sender = FullQueues()
    sender.full.add(FULL[0])
    ctx = make_ctx(sender=sender)
    _failed(states, clock, "o-1", FULL[0])
    _sweep(ctx, clock, timedelta(hours=2))
    sender.full.clear()
    _sweep(ctx, clock, timedelta(hours=3))
    record = states.get("o-1")
    assert record is not None and record.complete_by is None  # delivered once the queue drained
    sender.full.add(FULL[0])
    _failed(states, clock, "o-2", FULL[0])
    _sweep(ctx, clock, timedelta(hours=2))
    assert len({a["alertId"] for a in _alerts(sender, "NotificationsStuck")}) == 2


def test_an_owed_alert_whose_record_cannot_be_marked_delivered_pages_once(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock, sender: RecordingSender
) -> None:
    _failed(states, clock, "o-unwritable", "client-a")
    broken = StateStoreThatFails(states, "replace")  # the record cannot be written (acknowledged, noted) any more
    ctx = make_ctx(states=broken)
    log: list[Event] = []
    _sweep(ctx, clock, timedelta(hours=4), log)
    record = states.get("o-unwritable")
    assert record is not None and record.complete_by is not None  # still owed: resent every hour
    # before: the OrderFailed alert raised again in each hour's window, past duplicate detection (the queue's 10
    # minutes, not modelled by the recording sender: its distinct hours are counted) and paged each hour
    assert len(_pages(log, "OrderFailed")) == 1
    sent_at = {(T0 - T0) + (e[0] // 60) * timedelta(hours=1) for e in log if e[2].get("event") == "OperatorAlert"}
    assert len(sent_at) == 1, sent_at  # raised in the first hour's window only
    statuses = [json.loads(m.body)["status"] for q, m in sender.sent if q == "client-a"]
    # the control: each hour's window sent the status again, and could not acknowledge it
    assert statuses.count("Failed") >= 4
    held = [e[2] for e in log if e[2].get("event") == "AlertRepeatHeld"]
    assert held and all(p["alertKind"] == "OrderFailed" for p in held)


def test_a_document_that_stays_unreadable_pages_once_not_every_hour(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock, cosmos_db: Any
) -> None:
    """``UnreadableRecord`` was raised in the first window of every hour for as long as the document did not map: a
    new alert id each hour, one page each (24 a day for one bad document). One per document while it lasts now; a
    second bad document is its own."""
    from contracts.names import STATE_CONTAINER
    from supervisor.run import run_supervisor
    from supervisor.scan import ScanState

    ctx = make_ctx()
    container = cosmos_db.get_container_client(STATE_CONTAINER)

    def corrupt(order_id: str, field: str = "failureCount") -> None:
        _failed(states, clock, order_id, "client-a")
        doc = container.read_item(order_id, partition_key=order_id)
        container.replace_item(order_id, {**doc, field: "x"})

    sender = ctx.sender
    assert isinstance(sender, RecordingSender)
    corrupt("o-bad-1")
    for minute in range(0, 4 * 60, 2):
        if minute == 150:
            corrupt("o-bad-2", "attempt")  # broken another way: its own problem (test_alert_noise_mass_drift.py)
        clock.advance(timedelta(minutes=2))
        run_supervisor(ctx, ScanState())
    unreadable = _alerts(sender, "UnreadableRecord")
    # before: one an hour per document, 4 + 2
    assert [a["details"]["documents"] for a in unreadable] == [["o-bad-1"], ["o-bad-2"]], unreadable  # type: ignore[index]
