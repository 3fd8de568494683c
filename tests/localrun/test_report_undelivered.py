"""The runner's ``missing_statuses`` and ``silent_failures`` evidence for a status the app gave up: a
submitter's queue full for good refuses with ``QuotaExceeded``, which the app retries for about six hours
and then alerts ``StatusUndelivered`` per status (never ``ReplyQueueUnavailable``: a full queue is
transient). That alert, raised while the order's own queue refused sends, stands in for the status; one
raised while the queue took sends excuses nothing. Found by a fuzzed profile (seed 4422: a status queue
full from 5 s to the end of the run counted every order of that submitter in ``missing_statuses``)."""

from __future__ import annotations

import contextlib
import json
import logging
import random
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from adapters.clock import ManualClock
from adapters.cosmos.alert_mark_store import AlertMarks
from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.ids import status_message_id
from localrun.audit import EventRecorder
from localrun.report import _undelivered_statuses
from localrun.servicebus import InProcessBroker, SendFaults
from localrun.servicebus.faults import RefusalKind, SendRefusal
from localrun.simulation import START as SIMULATION_START
from notifications.status import give_up

START = SIMULATION_START  # the runner's clock starts there: the report reads the end of the run from it


def _alert(
    clock: ManualClock, broker: InProcessBroker, order_id: str, status: str, kind: str = "StatusUndelivered"
) -> None:
    body = {"type": "OperatorAlert", "kind": kind, "orderId": order_id, "details": {"status": status}}
    broker.send(OPERATOR_ALERTS_QUEUE, OutgoingMessage(body=json.dumps(body), message_id=f"{kind}:{order_id}:{status}"))
    clock.advance(timedelta(minutes=1))


class _Result(SimpleNamespace):
    """The run so far: it ends at the clock's now (``simulated_s``)."""

    clock: ManualClock

    @property
    def simulated_s(self) -> float:
        return (self.clock.now() - START).total_seconds()


def _run(until: datetime | None = None) -> tuple[ManualClock, InProcessBroker, Any]:
    clock = ManualClock(START)
    broker = InProcessBroker(clock)
    for queue in (OPERATOR_ALERTS_QUEUE, "full", "fine"):
        broker.declare_queue(queue)
    # "full" refuses from 10 minutes on, for good (or ``until``)
    broker.refuse_sends("full", SendRefusal("quota_exceeded", START + timedelta(minutes=10), until))
    orders = {"a": {"replyTo": "full"}, "b": {"replyTo": "full"}, "c": {"replyTo": "fine"}}
    result = _Result(
        broker=broker, workload=SimpleNamespace(orders=orders), clock=clock, events=EventRecorder(), states=[]
    )
    return clock, broker, result


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


def test_notifications_stuck_of_a_queue_excuses_every_failed_order_of_that_queue_alone() -> None:
    """rt-alert-noise: the supervisor alerts ``NotificationsStuck`` once for a reply queue that keeps failing the
    statuses (no order, ``details.replyTo``), not per order: it stands for every order of that queue that ended in
    a failure state, and for no other."""
    clock, broker, result = _run()
    result.states = [
        {"orderId": "a", "processState": "Error"},
        {"orderId": "b", "processState": "Processed"},  # not owed by the failure record: not excused
        {"orderId": "c", "processState": "Error"},  # another queue's
    ]
    clock.advance(timedelta(minutes=20))
    body = {"type": "OperatorAlert", "kind": "NotificationsStuck", "orderId": None, "details": {"replyTo": "full"}}
    broker.send(OPERATOR_ALERTS_QUEUE, OutgoingMessage(body=json.dumps(body), message_id="stuck:full"))
    clock.advance(timedelta(minutes=1))
    assert _undelivered_statuses(result) == {("a", "Received"), ("a", "Failed"), ("a", "CompensationFailed")}


def test_notifications_stuck_excuses_nothing_once_the_queue_takes_sends_again_long_before_the_end() -> None:
    """RED TEAM (redteam38). ``NotificationsStuck`` is not a give-up: the record stays owed and the supervisor
    sends its statuses in the first resend window after the queue takes sends again (supervisor/owed.py). A queue
    full from 10 minutes to 2 hours, alerted stuck at 1 h, that then takes sends for the six hours left: a status
    still unheard at the end is one the app dropped (an app that stopped resending after the alert), and the
    report must count it, not excuse it for an alert of a refusal long over."""
    clock, broker, result = _run(until=START + timedelta(hours=2))
    clock.advance(timedelta(hours=1, minutes=2))
    _alert(clock, broker, "a", "", kind="NotificationsStuck")  # the queue refused then
    clock.advance(timedelta(hours=6))  # the queue has taken sends since 2 h
    assert _undelivered_statuses(result) == set()


def test_notifications_stuck_still_excuses_a_queue_that_took_sends_only_near_the_end() -> None:
    """The counterpart: a queue that takes sends again less than a resend window's hour before the end may not
    have met the supervisor's next window yet; its stuck alert still stands for the statuses."""
    clock, broker, result = _run(until=START + timedelta(hours=7, minutes=30))
    clock.advance(timedelta(hours=7, minutes=2))
    _alert(clock, broker, "a", "", kind="NotificationsStuck")
    clock.advance(timedelta(hours=1))  # ends at 8 h 3 min: 33 minutes after the queue took sends again
    assert _undelivered_statuses(result) == {("a", "Received"), ("a", "Failed"), ("a", "CompensationFailed")}


class AlertsDown:
    """The broker, ``operator-alerts`` failing every send (a transient Service Bus error)."""

    def __init__(self, broker: InProcessBroker) -> None:
        self._broker = broker

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue == OPERATOR_ALERTS_QUEUE:
            raise SendError(f"send to {queue!r} failed (injected)")
        self._broker.send(queue, message)


def _given_up(
    result: Any, sender: Any, order_id: str, status: str, waited_for: tuple[Any, ...] = (), marks: Any = None
) -> None:
    """The app's give-up of ``status`` (``notifications.status.give_up``), its events recorded as the runner does."""
    root = logging.getLogger()
    root.addHandler(result.events)
    try:
        give_up(
            sender,
            order_id=order_id,
            status=status,  # type: ignore[arg-type]
            attempt=1,
            variant=None,
            reply_to=result.workload.orders[order_id]["replyTo"],
            at=result.clock.now(),
            error=SendError("QuotaExceeded"),
            marks=marks,
            waited_for=waited_for,
        )
    finally:
        root.removeHandler(result.events)


class _Marks(AlertMarks):
    """Alert marks in memory (the Cosmos store's conditional writes are tests/notifications')."""

    def __init__(self) -> None:
        self.docs: dict[str, Any] = {}

    def get(self, key: str) -> Any:
        return self.docs.get(key)

    def save(self, doc: Any) -> Any:
        self.docs[doc.key] = doc
        return doc


def test_a_final_status_given_up_with_the_received_it_waited_for_excuses_both() -> None:
    """Fuzz seed 8123 (300 orders; ``missing_statuses`` 9). ``Received`` failed and its courier hand-over failed too
    (a bare Durable outage), so the record owed it; the submitter's queue then filled for good. Each order's final
    status, on its timers, said the owed ``Received`` first and failed there; the last try gave the final status up
    and alerted it, but the ``Received`` that waited with it was named nowhere, and every such order counted as
    missing a status the app had given up. The give-up now names both (an event each, one alert with
    ``details.undeliveredBefore``), whether the alert went out, was held behind its queue's, or failed to send."""
    clock, broker, result = _run()
    clock.advance(timedelta(hours=6))
    marks = _Marks()
    _given_up(result, broker, "a", "Completed", ("Received",), marks)  # pages: the queue's first
    _given_up(result, broker, "b", "Compensated", ("Received",), marks)  # held behind a's
    alerts = [json.loads(m.body) for m in broker.peek(OPERATOR_ALERTS_QUEUE, 10)]
    assert [(a["orderId"], a["details"].get("undeliveredBefore")) for a in alerts] == [("a", ["Received"])]
    assert "(and the Received before it)" in alerts[0]["summary"]
    assert _undelivered_statuses(result) == {
        ("a", "Received"),
        ("a", "Completed"),
        ("b", "Received"),
        ("b", "Compensated"),
    }

    clock, broker, result = _run()
    clock.advance(timedelta(hours=6))
    _given_up(result, AlertsDown(broker), "a", "Completed", ("Received",))  # its alert lost: the log rule pages
    _given_up(result, AlertsDown(broker), "b", "Completed")  # nothing waited: its Received is not excused
    assert _undelivered_statuses(result) == {("a", "Received"), ("a", "Completed"), ("b", "Completed")}


def test_a_give_up_whose_alert_send_failed_is_excused_by_the_logged_event_the_log_rule_pages_on() -> None:
    """Red team: a queue full for good with Service Bus send failures, two faults the fuzz draws together: about
    one give-up alert in ten failed its one send, and the order counted in ``missing_statuses`` though the app did
    what its design says (``AlertSendFailed`` of a ``StatusUndelivered``, which the ``alertsUndelivered`` log
    alert rule pages on). Only for a queue that refused sends in the run, and only the status given up."""
    clock, broker, result = _run()
    clock.advance(timedelta(hours=6))
    _given_up(result, AlertsDown(broker), "a", "Completed")
    _given_up(result, AlertsDown(broker), "c", "Completed")  # its queue never refused: no excuse
    _given_up(result, broker, "b", "Completed")  # its alert went out: the alert path
    assert broker.peek(OPERATOR_ALERTS_QUEUE, 10)[0].message_id.startswith("alert:StatusUndelivered:b")
    assert _undelivered_statuses(result) == {("a", "Completed"), ("b", "Completed")}


def test_give_ups_held_behind_their_queues_alert_are_excused_with_it() -> None:
    """rt-alert-noise: the app alerts ``StatusUndelivered`` once per reply queue and error while it lasts
    (notifications/status.py ``give_up``, an alert mark), and logs each give-up: one alert raised while the queue
    refused stands for every status given up to that queue, not for another queue's."""
    clock, broker, result = _run()
    clock.advance(timedelta(hours=6))
    marks = _Marks()
    root = logging.getLogger()
    root.addHandler(result.events)
    try:
        for order_id in ("a", "b", "c"):
            give_up(
                broker,
                order_id=order_id,
                status="Completed",
                attempt=1,
                variant=None,
                reply_to=result.workload.orders[order_id]["replyTo"],
                at=clock.now(),
                error=SendError("QuotaExceeded"),
                marks=marks,
            )
    finally:
        root.removeHandler(result.events)
    kinds = [json.loads(m.body)["orderId"] for m in broker.peek(OPERATOR_ALERTS_QUEUE, 10)]
    assert kinds == ["a", "c"]  # b's held behind a's: the same queue
    assert _undelivered_statuses(result) == {("a", "Completed"), ("b", "Completed")}  # c's queue never refused


def test_a_queue_level_stuck_alert_excuses_no_order_that_failed_after_its_refusal_ended() -> None:
    """RED TEAM (rt-marks). The queue-level ``NotificationsStuck`` stood for every failed order of its queue, ever:
    an order of that queue that failed after the queue took sends again (its statuses then owed to a queue that
    took them) and was never heard was excused by an alert of a refusal already over, so ``missing_statuses`` could
    no longer count a status the app dropped on a queue that had once been alerted. It stands for the orders whose
    statuses were owed while that refusal lasted: failed (``completeBy``, when the failure record began owing)
    before it ended."""
    clock, broker, result = _run(until=START + timedelta(hours=2))
    result.states = [
        {"orderId": "a", "processState": "Error", "completeBy": (START + timedelta(minutes=30)).isoformat()},
        # failed at 2 h 5 min: the queue took sends from 2 h
        {"orderId": "b", "processState": "Error", "completeBy": (START + timedelta(hours=2, minutes=5)).isoformat()},
    ]
    clock.advance(timedelta(hours=1, minutes=2))
    body = {"type": "OperatorAlert", "kind": "NotificationsStuck", "orderId": None, "details": {"replyTo": "full"}}
    broker.send(OPERATOR_ALERTS_QUEUE, OutgoingMessage(body=json.dumps(body), message_id="stuck:full"))
    clock.advance(timedelta(hours=1, minutes=8))  # ends at 2 h 10 min: the alert still stands for its refusal
    assert _undelivered_statuses(result) == {("a", "Received"), ("a", "Failed"), ("a", "CompensationFailed")}


def test_a_give_up_whose_sends_service_bus_failed_is_excused_and_one_sent_since_is_not() -> None:
    """Red team (extreme faults): ``servicebus.send_failure_rate`` 0.9, no queue refusing. A final status's 11 tries
    over about six hours all failed (0.9**11, about a third of them), the app gave it up and alerted as designed,
    and the report counted it in ``missing_statuses`` (6 of 60 orders, seed 1), since only a refusal excused a
    give-up. The broker's evidence now stands for the refusal's: an injected failure kept the status (or the
    ``Received`` sent before it on each try) off the order's queue, and no send stored it since."""

    clock, broker, result = _run()
    result.workload.orders.update({"x": {"replyTo": "fine"}, "y": {"replyTo": "fine"}, "z": {"replyTo": "fine"}})

    def tried(order_id: str, status: str, attempt: int, faults: float) -> None:
        broker.set_send_faults(SendFaults(faults, random.Random(1)))
        message = OutgoingMessage(body="{}", message_id=status_message_id(order_id, status, attempt))
        with contextlib.suppress(SendError):  # the failure the test sets up
            broker.send("fine", message)
        broker.set_send_faults(None)

    tried("x", "Completed", 1, 1.0)  # every try failed
    tried("y", "Received", 0, 1.0)  # the Received each try of the Completed sends first: never stored
    tried("z", "Received", 0, 1.0)  # failed once, then stored: the Completed's give-up is no longer excused by it
    tried("z", "Received", 0, 0.0)
    clock.advance(timedelta(hours=6))
    for order_id in ("x", "y", "z", "c"):  # c: nothing of it failed
        _given_up(result, broker, order_id, "Completed")
    assert _undelivered_statuses(result) == {("x", "Completed"), ("y", "Completed")}


def _gone(back_after: timedelta | None, kind: RefusalKind = "not_found") -> tuple[ManualClock, InProcessBroker, Any]:
    """Queue "gone" refuses the app from 10 minutes for ``back_after`` (None: to the end), alerted
    ``ReplyQueueUnavailable``; order "g" (attempt 1) is its."""
    clock, broker, result = _run()
    broker.declare_queue("gone")
    since = START + timedelta(minutes=10)
    broker.refuse_sends("gone", SendRefusal(kind, since, None if back_after is None else since + back_after))
    result.workload.orders["g"] = {"replyTo": "gone"}
    result.states = [{"orderId": "g", "processState": "Processed", "attempt": 1}]
    clock.advance(timedelta(minutes=11))
    alert = {"type": "OperatorAlert", "kind": "ReplyQueueUnavailable", "details": {"replyTo": "gone"}}
    broker.send(OPERATOR_ALERTS_QUEUE, OutgoingMessage(body=json.dumps(alert), message_id="alert:rqu:gone"))
    return clock, broker, result


def _try(clock: ManualClock, broker: InProcessBroker, status: str, attempt: int, after: timedelta) -> None:
    """A try of order g's ``status`` after ``after``, refused or not."""
    clock.advance(after)
    with contextlib.suppress(SendError):
        broker.send("gone", OutgoingMessage(body="{}", message_id=status_message_id("g", status, attempt)))


def test_a_status_dropped_after_its_queue_refused_it_for_the_whole_retry_window_is_excused() -> None:
    """A red team: submitter 2's queue deleted for 55 minutes, then back. The app tries a refused final status for
    ``REFUSED_RETRY_WINDOW`` (45 minutes) and drops it, the queue's ``ReplyQueueUnavailable`` alert standing for
    it (orchestrators/status.py); the statuses so dropped were counted in ``missing_statuses`` once the queue came
    back (only a queue still refusing at the end excused them). Excused now, and only so: a queue that came back
    within the window, or a full queue (tried for hours, given up by name), excuses nothing."""
    clock, broker, result = _gone(timedelta(minutes=55))
    _try(clock, broker, "Completed", 1, timedelta(0))
    _try(clock, broker, "Completed", 1, timedelta(minutes=45))  # the window's last try
    clock.advance(timedelta(hours=1))  # the queue took sends again since
    assert ("g", "Completed") in _undelivered_statuses(result)

    clock, broker, result = _gone(timedelta(minutes=30))  # back within the window: the app should have sent it
    _try(clock, broker, "Completed", 1, timedelta(0))
    _try(clock, broker, "Completed", 1, timedelta(minutes=10))
    clock.advance(timedelta(hours=1))
    assert ("g", "Completed") not in _undelivered_statuses(result)

    clock, broker, result = _gone(None, kind="quota_exceeded")  # full: tried for hours, given up by name
    _try(clock, broker, "Completed", 1, timedelta(0))
    clock.advance(timedelta(hours=1))
    assert ("g", "Completed") not in _undelivered_statuses(result)


def test_a_status_whose_tries_were_refused_on_the_received_first_is_excused_for_the_window() -> None:
    """Each try of a final status says an owed ``Received`` first: refused there, the status's own MessageId is
    tried only once the ``Received`` is dropped, at the window's end. The window began at its first try."""
    clock, broker, result = _gone(timedelta(minutes=55))
    _try(clock, broker, "Received", 0, timedelta(0))
    _try(clock, broker, "Completed", 1, timedelta(minutes=45))
    clock.advance(timedelta(hours=1))
    assert {("g", "Received"), ("g", "Completed")} <= _undelivered_statuses(result)

    clock, broker, result = _gone(timedelta(minutes=55))
    _try(clock, broker, "Received", 0, timedelta(0))  # the Completed never tried: nothing of it is excused
    clock.advance(timedelta(hours=1))
    assert ("g", "Completed") not in _undelivered_statuses(result)


def test_no_excuse_without_the_queues_alert_or_once_the_status_was_stored() -> None:
    clock, broker, result = _run()
    broker.declare_queue("gone")
    since = START + timedelta(minutes=10)
    broker.refuse_sends("gone", SendRefusal("not_found", since, since + timedelta(minutes=55)))
    result.workload.orders["g"] = {"replyTo": "gone"}
    result.states = [{"orderId": "g", "processState": "Processed", "attempt": 1}]
    clock.advance(timedelta(minutes=11))
    _try(clock, broker, "Completed", 1, timedelta(0))
    clock.advance(timedelta(hours=1))
    assert ("g", "Completed") not in _undelivered_statuses(result)  # no ReplyQueueUnavailable alert

    clock, broker, result = _gone(timedelta(minutes=55))
    _try(clock, broker, "Completed", 1, timedelta(0))
    _try(clock, broker, "Completed", 1, timedelta(minutes=60))  # stored: heard, nothing to excuse
    assert broker.first_refused("gone", status_message_id("g", "Completed", 1)) is None


class _LastTryOrchestration:
    """The part of an orchestration's context ``last_try_lost`` reads: past that point for the first time."""

    is_replaying = False
    instance_id = "a:1"


def test_a_status_whose_last_try_died_on_every_repeat_is_excused_by_the_event_the_log_rule_pages_on() -> None:
    """A final status whose last try and every repeat of it failed before their code ran (``host.last_try_crash_rate``)
    was neither sent nor given up: before ``LastTryLost``, counted in ``missing_statuses`` (2 in
    status-queue-full-for-good at a rate of 0.5, 150 orders, seed 1). The orchestration's ``LastTryLost``, which the
    ``alertsUndelivered`` rule pages on, stands for it, as a ``StatusUndelivered`` does; one of an alert (no status)
    excuses no status."""
    from orchestrators.status import last_try_lost

    _, _, result = _run()
    root = logging.getLogger()
    root.addHandler(result.events)
    try:
        last_try_lost(_LastTryOrchestration(), "publish_status", "lost", orderId="a", status="Completed", attempt=1)  # type: ignore[arg-type]
        last_try_lost(_LastTryOrchestration(), "send_alert", "lost", orderId="b", alertKind="OrderRejected")  # type: ignore[arg-type]
    finally:
        root.removeHandler(result.events)
    assert _undelivered_statuses(result) == {("a", "Completed")}
