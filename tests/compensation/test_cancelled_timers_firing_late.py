"""Red team (s30): Azure still delivers the ``TimerFired`` of a timer cancelled when its wait ended, to an
instance that runs on. In every wait with a short deadline (a step's agent, in process and over Service
Bus; a prepaid step's payment notification and its capture; a review; a compensation round's undo over
Service Bus), that late ``TimerFired`` changes nothing: whether it lands while the instance waits on
something else or in the episode of the event that won, the orchestrator schedules exactly what it
schedules without it, on instances started with ``timerPerRound`` (the cancelled timer taken out of the
SDK's open tasks) and before it (left in)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from contracts.names import AGENT_REPLY_EVENT, PAYMENT_NOTIFIED_EVENT
from localrun.durable import history as ev
from orchestrators import names
from tests.compensation.test_compensation_replay import CHARGE, RESERVE, Round
from tests.compensation.test_compensation_replay import reply as undo_reply
from tests.compensation.test_scheduler_failure_replay import ME, Attempt, new_inputs, reply
from tests.durable_history import History, ReplayResult
from tests.orchestrators.early_histories import PAYMENT
from tests.orchestrators.support import STEP, sample_order, started_attempt

SECOND = timedelta(seconds=1)
# where the cancelled timers' TimerFired go: each in an episode of its own at its time while the instance
# waits on what follows, or in the episode of the event that won (at the deadline, right after it)
PLACEMENTS = ["later", "same episode"]


@dataclass(frozen=True)
class Late:
    """Where the cancelled timers' TimerFired go (``placement``), and whether they come at all."""

    placement: str
    fire: bool


def _timers(h: History) -> dict[int, datetime]:
    return {
        e.event_id: ev.parse_timestamp(e.fields["FireAt"]) for e in h.events if e.type is ev.EventType.TIMER_CREATED
    }


def _fire_later(h: History, timers: dict[int, datetime], late: Late) -> None:
    """TimerFired for the cancelled ``timers`` at their times, each in an episode of its own."""
    if late.placement == "later" and late.fire:
        for task_id, fire_at in sorted(timers.items(), key=lambda item: item[1]):
            h.fire_timer(task_id, fire_at, at=fire_at)


def _won_at(h: History, task_id: int, early: timedelta, late: Late) -> datetime:
    """When the event racing timer ``task_id`` comes: ``early`` from now, or at the deadline itself
    (its TimerFired then right after it, in its episode: ``_same_episode``)."""
    return _timers(h)[task_id] if late.placement == "same episode" else h.now + early


def _same_episode(h: History, task_id: int, late: Late) -> None:
    if late.placement == "same episode" and late.fire:
        h.fire_timer(task_id, _timers(h)[task_id])


def _scheduler_steps(scheduler: Any, timer_per_round: bool, late: Late) -> list[ReplayResult]:
    """An attempt: the reservation (in process) and the charge (over Service Bus) answered before their
    deadlines; their cancelled timers fire while the shipment's reply is awaited; then the reply."""
    a = Attempt(timer_per_round=timer_per_round)
    h = a.h
    h.activity_completed(names.BEGIN_STEP, {"owned": True}, at=h.now)
    call = h.activity_scheduled(names.in_process_agent("inventory"))
    reserve_timer = h.timer_created_not_fired(h.now + STEP)
    value = reply("reserve-inventory", f"{ME}:reserve-inventory:inventory", result={"reservationId": "R-1"})
    h.complete_activity(call, value, at=_won_at(h, reserve_timer, SECOND, late))
    _same_episode(h, reserve_timer, late)
    rid = f"{ME}:charge-payment:payment"
    h.activity_completed(names.BEGIN_STEP, {"owned": True}, at=h.now)
    charge_timer = h.timer_created_not_fired(h.now + STEP)
    h.event_raised(
        AGENT_REPLY_EVENT,
        reply("charge-payment", rid, result={"chargeId": "C-1"}),
        at=_won_at(h, charge_timer, STEP / 2, late),
    )
    _same_episode(h, charge_timer, late)
    h.activity_completed(names.BEGIN_STEP, {"owned": True}, at=h.now)
    shipment_timer = h.timer_created_not_fired(h.now + STEP)
    cancelled = {task_id: at for task_id, at in _timers(h).items() if task_id != shipment_timer}
    waiting = a.run(scheduler)
    _fire_later(h, cancelled, late)
    meanwhile = a.run(scheduler)
    answer_at = _timers(h)[shipment_timer] - SECOND
    assert answer_at > max(cancelled.values())  # the cancelled timers fired before the answer
    rid = f"{ME}:arrange-shipment:shipping"
    h.event_raised(AGENT_REPLY_EVENT, reply("arrange-shipment", rid, result={"shipmentId": "S-1"}), at=answer_at)
    return [waiting, meanwhile, a.run(scheduler)]


def _payment_steps(scheduler: Any, timer_per_round: bool, late: Late) -> list[ReplayResult]:
    """A prepaid order: the payment notification comes before the payment step's deadline and the
    capture is answered; the notification wait's cancelled timer fires while the shipment's reply is
    awaited; then the reply."""
    h = started_attempt(ME, sample_order(prepaid=True), 1, timer_per_round=timer_per_round)
    h.activity_completed(names.BEGIN_STEP, {"owned": True}, at=h.now)
    call = h.activity_scheduled(names.in_process_agent("inventory"))
    h.timer_created_not_fired(h.now + STEP)
    value = reply("reserve-inventory", f"{ME}:reserve-inventory:inventory", result={"reservationId": "R-1"})
    h.complete_activity(call, value, at=h.now + SECOND)
    h.activity_completed(names.BEGIN_STEP, {"owned": True}, at=h.now)
    payment_timer = h.timer_created_not_fired(h.now + STEP)
    h.event_raised(PAYMENT_NOTIFIED_EVENT, PAYMENT, at=h.now + SECOND)
    h.activity_completed(names.SEND_AGENT_REQUEST, None, at=h.now)
    capture_timer = h.timer_created_not_fired(_timers(h)[payment_timer])
    rid = f"{ME}:charge-payment:payment"
    h.event_raised(AGENT_REPLY_EVENT, reply("charge-payment", rid, result={"captureId": "K-1"}), at=h.now + SECOND)
    h.activity_completed(names.BEGIN_STEP, {"owned": True}, at=h.now)
    shipment_timer = h.timer_created_not_fired(h.now + STEP)
    waiting = h.run(scheduler)
    _fire_later(h, {payment_timer: _timers(h)[payment_timer], capture_timer: _timers(h)[capture_timer]}, late)
    meanwhile = h.run(scheduler)
    rid = f"{ME}:arrange-shipment:shipping"
    answer_at = _timers(h)[shipment_timer] - SECOND
    h.event_raised(AGENT_REPLY_EVENT, reply("arrange-shipment", rid, result={"shipmentId": "S-1"}), at=answer_at)
    return [waiting, meanwhile, h.run(scheduler)]


def _review_steps(scheduler: Any, timer_per_round: bool, late: Late) -> list[ReplayResult]:
    """A high-impact order's first review (an hour) answered ``retry`` after a minute; the retried
    charge fails on both providers and a second review opens; the first review's cancelled timer fires
    while it is awaited; then the second review's answer."""
    a = Attempt(total=250_000, timer_per_round=timer_per_round)
    a.both_providers_fail()
    [(function, first)] = new_inputs(a.run(scheduler))
    assert function == names.AWAIT_REVIEW
    h = a.h
    h.activity_completed(names.AWAIT_REVIEW, {"owned": True}, at=h.now)
    review_timer = h.timer_created_not_fired(h.now + timedelta(hours=1))
    answer = {"reviewId": first["reviewId"], "action": "retry", "operator": "ana"}
    h.event_raised(names.REVIEW_DECISION_EVENT, answer, at=_won_at(h, review_timer, timedelta(minutes=1), late))
    _same_episode(h, review_timer, late)
    [(function, _)] = new_inputs(a.run(scheduler))
    assert function == names.BEGIN_STEP
    a.charge_fails("payment", f"{ME}:charge-payment:payment:3", "card declined")
    a.charge_fails("payment-backup", f"{ME}:charge-payment:payment-backup:4", "card declined again")
    [(function, second)] = new_inputs(a.run(scheduler))
    assert function == names.AWAIT_REVIEW
    h.activity_completed(names.AWAIT_REVIEW, {"owned": True}, at=h.now)
    h.timer_created_not_fired(h.now + timedelta(hours=1))
    cancelled = {review_timer: _timers(h)[review_timer]}
    waiting = a.run(scheduler)
    _fire_later(h, cancelled, late)
    meanwhile = a.run(scheduler)
    answer = {"reviewId": second["reviewId"], "action": "compensate", "operator": "ana"}
    h.event_raised(names.REVIEW_DECISION_EVENT, answer, at=h.now + timedelta(hours=1) - SECOND)
    return [waiting, meanwhile, a.run(scheduler)]


def _undo_steps(compensate: Any, timer_per_round: bool, late: Late) -> list[ReplayResult]:
    """A compensation round: the refund (over Service Bus) answered; its cancelled timer fires while the
    release (in process) runs; then the release's answer."""
    r = Round([RESERVE, CHARGE], timer_per_round=timer_per_round)
    h = r.h
    deadline = r.begin()
    h.activity_completed(names.SEND_AGENT_REQUEST, None, at=h.now)
    refund_timer = h.timer_created_not_fired(deadline)
    h.event_raised(
        AGENT_REPLY_EVENT, undo_reply(CHARGE, result={"refundId": "rf-1"}), at=_won_at(h, refund_timer, STEP / 2, late)
    )
    _same_episode(h, refund_timer, late)
    r.recorded()
    deadline = r.begin()
    call = h.activity_scheduled(names.in_process_agent("inventory"))
    h.timer_created_not_fired(deadline)
    waiting = r.run(compensate)
    _fire_later(h, {refund_timer: _timers(h)[refund_timer]}, late)
    meanwhile = r.run(compensate)
    answer_at = deadline - SECOND
    assert answer_at > _timers(h)[refund_timer]
    h.complete_activity(call, undo_reply(RESERVE, result={"releaseId": "rel-1"}), at=answer_at)
    return [waiting, meanwhile, r.run(compensate)]


Steps = Callable[[Any, bool, Late], list[ReplayResult]]


def _scheduled(results: list[ReplayResult]) -> list[list[tuple[str, Any, Any]]]:
    """What each replay newly asked the extension to do, and how each ended."""
    return [
        [(a["type"], a.get("functionName"), a.get("isCanceled")) for a in result.new_actions]
        + [("end", result.is_done, result.error)]
        for result in results
    ]


# every wait in both placements, except the payment wait in the same episode as its answer: a notification at
# the deadline leaves the capture no time, so nothing comes after it to be held up
CASES = [
    (wait, placement)
    for wait in ("agent", "payment", "review", "undo")
    for placement in PLACEMENTS
    if not (wait == "payment" and placement == "same episode")
]


@pytest.mark.parametrize(("wait", "placement"), CASES)
@pytest.mark.parametrize("timer_per_round", [True, False])
def test_a_cancelled_short_timer_firing_late_changes_nothing(scheduler, compensate, wait, timer_per_round, placement):
    steps: Steps = {"agent": _scheduler_steps, "payment": _payment_steps, "review": _review_steps, "undo": _undo_steps}[
        wait
    ]
    orchestrator = compensate if wait == "undo" else scheduler

    expected = _scheduled(steps(orchestrator, timer_per_round, Late(placement, fire=False)))
    results = steps(orchestrator, timer_per_round, Late(placement, fire=True))

    assert _scheduled(results) == expected
    assert expected[1][:-1] == []  # meanwhile: nothing new
    assert expected[2][:-1] != []  # the answer is acted on at once
    for result in results:
        assert result.extension.non_determinism is None


@pytest.fixture(scope="module")
def compensate(functions: dict[str, Any]) -> Any:
    return functions[names.COMPENSATION].func


@pytest.fixture(scope="module")
def scheduler(functions: dict[str, Any]) -> Any:
    return functions[names.SCHEDULER].func
