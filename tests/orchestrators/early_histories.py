"""Histories in which external events are raised before the wait of their name opens ("early"), for
the replay tests of ``orchestrators/external_events.py``: an agent's reply raised before the completion
of the activity that sent its request, copies of replies, an operator's answer before the review's
pause is recorded, a payment notification before the payment step's start is. Each builder returns
the history and the registered orchestration that replays it.

``RECORDED`` names the builders whose histories were replayed by the code before the per-name queues
(4756307) into ``early_events_recorded.json``: the replay test checks the code of the day replays them
to the same actions (``tests/orchestrators/test_early_events_replay.py``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from contracts.names import AGENT_REPLY_EVENT, PAYMENT_NOTIFIED_EVENT
from domain.compensation import compensation_instance_id, undo_request_id
from orchestrators import names
from tests.durable_history import History
from tests.orchestrators.support import STEP, T0, sample_order, started_attempt
from tests.orchestrators.test_scheduler_replay import CHARGED, ME, ORDER, RESERVED, SHIPPED, Flow, reply

LATER = timedelta(seconds=1)


def recorded_attempt() -> History:
    """The start of the attempt ``Flow`` builds, with the input of the recorded histories: from before
    a wait loop's round raced a timer of its own (no ``timerPerRound``, no ``reviewsFitFallback``)."""
    return started_attempt(ME, ORDER, 2, timer_per_round=False, reviews_fit_fallback=False)


PAYMENT = {
    "notificationId": "n-1",
    "amountCents": 1000,
    "currency": "EUR",
    "providerReference": "psp-n-1",
    "receivedAt": "2026-03-01T07:59:00.000000Z",
    "sequenceNumber": 7,
}
REVIEW = {"amountThresholdCents": 100_000, "timeoutSeconds": 3600.0, "defaultAction": "compensate"}
UNDO_ME = compensation_instance_id("o1", 3)
CHARGE_ENTRY = {
    "seq": 2,
    "step": "charge-payment",
    "agent": "payment",
    "undoAction": "refund",
    "data": {"chargeId": "C-1", "amountCents": 1000},
    "attempt": 1,
    "at": "2026-03-01T08:00:01.000000Z",
    "outcome": None,
}

Built = tuple[History, str]


def charge_reply(**more: Any) -> dict[str, Any]:
    return reply("charge-payment", result=CHARGED, **more)


def shipment_reply(**more: Any) -> dict[str, Any]:
    return reply("arrange-shipment", result=SHIPPED, **more)


def shipment_with_early(*events: dict[str, Any]) -> Flow:
    """The reservation and the charge done; the shipment's ``begin_step`` (which sends its request) is
    scheduled, ``events`` are raised as ``AgentReply`` before its completion, then it completes and the
    shipment's deadline timer is created: the wait opens with them all early."""
    f = Flow(loaded=recorded_attempt())
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.remote_reply(charge_reply())
    begin = f.h.activity_scheduled(names.BEGIN_STEP)
    for event in events:
        f.h.event_raised(AGENT_REPLY_EVENT, event, at=f.h.now + LATER)
    f.h.complete_activity(begin, {"owned": True}, at=f.h.now + LATER)
    f.h.timer_created_not_fired(f.h.now + STEP)
    return f


def charge_with_early(*events: dict[str, Any]) -> Flow:
    """As ``shipment_with_early``, for the charge (the reservation done, in-process)."""
    f = Flow(loaded=recorded_attempt())
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    begin = f.h.activity_scheduled(names.BEGIN_STEP)
    for event in events:
        f.h.event_raised(AGENT_REPLY_EVENT, event, at=f.h.now + LATER)
    f.h.complete_activity(begin, {"owned": True}, at=f.h.now + LATER)
    f.h.timer_created_not_fired(f.h.now + STEP)
    return f


# --- histories the code before the queues replayed (one early event per name at a time, or copies) ---


def charge_reply_before_its_begin_completes() -> Built:
    f = charge_with_early(charge_reply())
    f.begin()  # the shipment's start carries the charge's result
    return f.h, names.SCHEDULER


def reply_and_its_duplicate_in_one_episode() -> Built:
    f = Flow(loaded=recorded_attempt())
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.remote_reply(charge_reply())
    f.h.event_raised(AGENT_REPLY_EVENT, charge_reply())  # the duplicate, no wait open
    f.begin()
    return f.h, names.SCHEDULER


def shipment_reply_before_its_begin_completes() -> Built:
    f = shipment_with_early(shipment_reply())
    f.processed({"owned": True, "statusSent": True})
    return f.h, names.SCHEDULER


def shipment_reply_twice_before_its_begin_completes() -> Built:
    f = shipment_with_early(shipment_reply(), shipment_reply())
    return f.h, names.SCHEDULER


def a_stale_copy_then_the_shipment_reply_before_its_begin_completes() -> Built:
    """Two early events of one name: the old code kept the newest (the reply) and took it; the queue
    hands the copy first (skipped), then the reply: the same activities, one more wait."""
    f = shipment_with_early(charge_reply(), shipment_reply())
    return f.h, names.SCHEDULER


REVIEW_ID = "o1:1:charge-payment:review:1"
ANSWER = {"reviewId": REVIEW_ID, "action": "retry", "operator": "ana"}


def review_answer_before_its_pause_is_recorded() -> Built:
    return review_with_early(ANSWER), names.SCHEDULER


def review_with_early(*decisions: dict[str, Any]) -> History:
    """A high-impact order whose charge failed with both providers pauses for review: ``decisions`` are
    raised as ``ReviewDecision`` before the completion of ``await_review``."""
    me = "o1:1"
    h = started_attempt(
        me, sample_order(total_cents=250_000), 1, review=REVIEW, timer_per_round=False, reviews_fit_fallback=False
    )

    def answer(step: str, request_id: str, ok: bool, **more: Any) -> dict[str, Any]:
        return {
            "requestId": request_id,
            "instanceId": me,
            "orderId": "o1",
            "step": step,
            "outcome": "succeeded" if ok else "failed",
            "transient": False,
            "result": more.get("result"),
            "error": more.get("error"),
        }

    h.activity_completed(names.BEGIN_STEP, {"owned": True}, at=h.now)
    call = h.activity_scheduled(names.in_process_agent("inventory"))
    h.timer_created_not_fired(h.now + STEP)
    reserved = answer("reserve-inventory", f"{me}:reserve-inventory:inventory", True, result=RESERVED)
    h.complete_activity(call, reserved, at=h.now + LATER)
    for agent, rid in (
        ("payment", f"{me}:charge-payment:payment"),
        ("backup", f"{me}:charge-payment:payment-backup:2"),
    ):
        h.activity_completed(names.BEGIN_STEP, {"owned": True}, at=h.now)
        h.timer_created_not_fired(h.now + STEP)
        failed = answer("charge-payment", rid, False, error=f"declined by {agent}")
        h.event_raised(AGENT_REPLY_EVENT, failed, at=h.now + LATER)
    pause = h.activity_scheduled(names.AWAIT_REVIEW)
    for decision in decisions:
        h.event_raised(names.REVIEW_DECISION_EVENT, decision, at=h.now + LATER)
    h.complete_activity(pause, {"owned": True}, at=h.now + LATER)
    return h


def payment_notified_before_the_payment_step_begins(times: int = 1) -> History:
    me = "p1:1"
    completed = {"reserve-inventory": {"reservationId": "R-1"}}
    h = started_attempt(
        me, sample_order("p1", prepaid=True), 1, completed=completed, timer_per_round=False, reviews_fit_fallback=False
    )
    begin = h.activity_scheduled(names.BEGIN_STEP)
    for _ in range(times):
        h.event_raised(PAYMENT_NOTIFIED_EVENT, PAYMENT, at=h.now + LATER)
    h.complete_activity(begin, {"owned": True}, at=h.now + LATER)
    return h


def payment_notified_early() -> Built:
    return payment_notified_before_the_payment_step_begins(), names.SCHEDULER


def payment_notified_twice_early() -> Built:
    return payment_notified_before_the_payment_step_begins(times=2), names.SCHEDULER


def undo_round_with_early(*events: dict[str, Any]) -> History:
    """A compensation round undoing the charge: ``events`` are raised before the completion of the
    ``send_agent_request`` that sent the refund request."""
    h = History(UNDO_ME, {"orderId": "o1", "round": 3}, start=T0, name=names.COMPENSATION)
    plan = {
        "owned": True,
        "entries": [CHARGE_ENTRY],
        "stepTimeoutSeconds": STEP.total_seconds(),
        "undoTries": 3,
        "retryBaseSeconds": 10.0,
        "retryMaxSeconds": 300.0,
    }
    h.activity_completed(names.LOAD_COMPENSATION, plan, at=T0)
    h.activity_completed(names.PUBLISH_STATUS, None, at=T0)
    h.activity_completed(names.BEGIN_UNDO, {"owned": True}, at=T0)
    send = h.activity_scheduled(names.SEND_AGENT_REQUEST)
    for event in events:
        h.event_raised(AGENT_REPLY_EVENT, event, at=h.now + LATER)
    h.complete_activity(send, None, at=h.now + LATER)
    return h


def undo_reply(try_number: int = 1, **more: Any) -> dict[str, Any]:
    return {
        "requestId": undo_request_id(UNDO_ME, "charge-payment", "payment", try_number),
        "instanceId": UNDO_ME,
        "orderId": "o1",
        "step": "charge-payment",
        "outcome": more.get("outcome", "succeeded"),
        "transient": more.get("transient", False),
        "result": None,
        "error": more.get("error"),
    }


def undo_reply_before_its_send_completes() -> Built:
    return undo_round_with_early(undo_reply()), names.COMPENSATION


RECORDED: dict[str, Callable[[], Built]] = {
    "charge_reply_before_its_begin_completes": charge_reply_before_its_begin_completes,
    "reply_and_its_duplicate_in_one_episode": reply_and_its_duplicate_in_one_episode,
    "shipment_reply_before_its_begin_completes": shipment_reply_before_its_begin_completes,
    "shipment_reply_twice_before_its_begin_completes": shipment_reply_twice_before_its_begin_completes,
    "a_stale_copy_then_the_shipment_reply_before_its_begin_completes": (
        a_stale_copy_then_the_shipment_reply_before_its_begin_completes
    ),
    "review_answer_before_its_pause_is_recorded": review_answer_before_its_pause_is_recorded,
    "payment_notified_early": payment_notified_early,
    "payment_notified_twice_early": payment_notified_twice_early,
    "undo_reply_before_its_send_completes": undo_reply_before_its_send_completes,
}
# Recorded histories holding two early events of one name where the old code kept only the newest: the
# queue hands the older ones to the wait first, skipped as before, so the activities, timers and the
# output are the same; the action list has one more wait per event skipped.
MORE_WAITS = frozenset({"a_stale_copy_then_the_shipment_reply_before_its_begin_completes"})
