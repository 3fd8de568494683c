"""The runner's ``missing_statuses`` and ``silent_failures`` evidence for a status the app gave up: a
submitter's queue full for good refuses with ``QuotaExceeded``, which the app retries for about six hours
and then alerts ``StatusUndelivered`` per status (never ``ReplyQueueUnavailable``: a full queue is
transient). That alert, raised while the order's own queue refused sends, stands in for the status; one
raised while the queue took sends excuses nothing. Found by a fuzzed profile (seed 4422: a status queue
full from 5 s to the end of the run counted every order of that submitter in ``missing_statuses``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from adapters.clock import ManualClock
from adapters.servicebus.sender import OutgoingMessage
from contracts.names import OPERATOR_ALERTS_QUEUE
from localrun.report import _undelivered_statuses
from localrun.servicebus import InProcessBroker
from localrun.servicebus.faults import SendRefusal

START = datetime(2026, 1, 1, tzinfo=UTC)


def _alert(
    clock: ManualClock, broker: InProcessBroker, order_id: str, status: str, kind: str = "StatusUndelivered"
) -> None:
    body = {"type": "OperatorAlert", "kind": kind, "orderId": order_id, "details": {"status": status}}
    broker.send(OPERATOR_ALERTS_QUEUE, OutgoingMessage(body=json.dumps(body), message_id=f"{kind}:{order_id}:{status}"))
    clock.advance(timedelta(minutes=1))


def _run() -> tuple[ManualClock, InProcessBroker, Any]:
    clock = ManualClock(START)
    broker = InProcessBroker(clock)
    for queue in (OPERATOR_ALERTS_QUEUE, "full", "fine"):
        broker.declare_queue(queue)
    # "full" refuses from 10 minutes on, for good
    broker.refuse_sends("full", SendRefusal("quota_exceeded", START + timedelta(minutes=10)))
    orders = {"a": {"replyTo": "full"}, "b": {"replyTo": "full"}, "c": {"replyTo": "fine"}}
    return clock, broker, SimpleNamespace(broker=broker, workload=SimpleNamespace(orders=orders))


def test_a_status_given_up_while_its_queue_refused_is_excused() -> None:
    clock, broker, result = _run()
    clock.advance(timedelta(minutes=20))
    _alert(clock, broker, "a", "Received")
    _alert(clock, broker, "a", "Completed")
    assert _undelivered_statuses(result) == {("a", "Received"), ("a", "Completed")}


def test_an_alert_while_the_queue_took_sends_or_for_another_queue_excuses_nothing() -> None:
    clock, broker, result = _run()
    _alert(clock, broker, "b", "Completed")  # at 0 min: the queue was taking sends then
    clock.advance(timedelta(minutes=20))
    _alert(clock, broker, "c", "Completed")  # its own queue never refused
    _alert(clock, broker, "ghost", "Completed")  # not an order of the workload
    _alert(clock, broker, "c", "Failed", kind="NotificationsStuck")
    _alert(clock, broker, "b", "Failed", kind="OrderFailed")  # not an alert that a status cannot arrive
    assert _undelivered_statuses(result) == set()


def test_notifications_stuck_while_the_queue_refused_excuses_what_the_failure_record_owes() -> None:
    """The supervisor keeps a failure record's status owed with no end, and alerts ``NotificationsStuck`` once
    an hour: that alert names the order, not the status, and stands for its ``Received`` and failure status."""
    clock, broker, result = _run()
    _alert(clock, broker, "a", "", kind="NotificationsStuck")  # the queue still took sends then
    assert _undelivered_statuses(result) == set()
    clock.advance(timedelta(minutes=20))
    _alert(clock, broker, "a", "", kind="NotificationsStuck")
    assert _undelivered_statuses(result) == {("a", "Received"), ("a", "Failed"), ("a", "CompensationFailed")}
