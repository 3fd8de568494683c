"""The compensation orchestration replayed by the Durable SDK's own engine over synthetic histories:
all undos succeed; an undo fails transiently then succeeds; an undo fails for good; a round that
resumes after a crash undoes only what is left; fencing lost; the deadline passes first."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from contracts.names import AGENT_REPLY_EVENT
from domain.compensation import compensation_instance_id, undo_request_id
from domain.timefmt import to_text
from orchestrators import names
from orchestrators.state_activity import HAND_OVER_RETRY_DELAYS
from tests.durable_history import History, ReplayResult

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
STEP = timedelta(seconds=60)
ME = compensation_instance_id("o1", 3)
RESERVE = {
    "seq": 1,
    "step": "reserve-inventory",
    "agent": "inventory",
    "undoAction": "release",
    "data": {"reservationId": "R-1"},
    "attempt": 1,
    "at": "2026-03-01T08:00:00.000000Z",
    "outcome": None,
}
CHARGE = {
    "seq": 2,
    "step": "charge-payment",
    "agent": "payment",
    "undoAction": "refund",
    "data": {"chargeId": "C-1", "amountCents": 1000},
    "attempt": 1,
    "at": "2026-03-01T08:00:01.000000Z",
    "outcome": None,
}


@pytest.fixture(scope="module")
def compensate(functions: dict[str, Any]) -> Any:
    return functions[names.COMPENSATION].func


def reply(entry: dict[str, Any], *, try_number: int = 1, outcome: str = "succeeded", **more: Any) -> dict[str, Any]:
    return {
        "requestId": undo_request_id(ME, entry["step"], entry["agent"], try_number),
        "instanceId": ME,
        "orderId": "o1",
        "step": entry["step"],
        "outcome": outcome,
        "transient": more.get("transient", False),
        "result": more.get("result"),
        "error": more.get("error"),
        **({"dependencyOpen": True} if more.get("dependencyOpen") else {}),
    }


class Round:
    """The history of one compensation round, built in the order the orchestration yields."""

    def __init__(
        self,
        entries: list[dict[str, Any]],
        tries: int = 3,
        *,
        timer_per_round: bool = True,
        holds_backoff: bool = False,
        deadline_at_begin: bool = False,
        releases_open_circuit: bool = False,
    ) -> None:
        started: dict[str, Any] = {"orderId": "o1", "round": 3}
        if timer_per_round:  # a round started since rounds carry the flag
            started["timerPerRound"] = True
        if holds_backoff:  # a round started since it holds its record through an undo's backoff
            started["holdsBackoff"] = True
        if deadline_at_begin:  # a round started since an undo's deadline is its begin_undo's time plus the timeout
            started["deadlineAtBegin"] = True
        if releases_open_circuit:  # a round started since an undo meeting an open circuit releases its record
            started["releasesOpenCircuit"] = True
        self.h = History(ME, started, start=T0, name=names.COMPENSATION)
        plan = {
            "owned": True,
            "entries": entries,
            "stepTimeoutSeconds": STEP.total_seconds(),
            "undoTries": tries,
            "retryBaseSeconds": 10.0,
            "retryMaxSeconds": 300.0,
        }
        self.h.activity_completed(names.LOAD_COMPENSATION, plan, at=T0)
        self.h.activity_completed(names.PUBLISH_STATUS, None, at=T0)

    def begin(self, owned: bool = True) -> datetime:
        self.h.activity_completed(names.BEGIN_UNDO, {"owned": owned}, at=self.h.now)
        return self.h.now + STEP

    def remote(self, value: dict[str, Any]) -> None:
        deadline = self.begin()
        self.h.activity_completed(names.SEND_AGENT_REQUEST, None, at=self.h.now)
        self.h.timer_created_not_fired(deadline)
        self.h.event_raised(AGENT_REPLY_EVENT, value, at=self.h.now + timedelta(seconds=2))

    def in_process(self, value: dict[str, Any]) -> None:
        deadline = self.begin()
        call = self.h.activity_scheduled(names.in_process_agent("inventory"))
        self.h.timer_created_not_fired(deadline)
        self.h.complete_activity(call, value, at=self.h.now + timedelta(seconds=1))

    def recorded(self, owned: bool = True) -> None:
        self.h.activity_completed(names.RECORD_UNDO, {"owned": owned}, at=self.h.now)

    def status_sent(self, status: str, orchestrator: Any) -> None:
        """The round tells the submitter ``status`` (after the fenced write), and the send succeeds."""
        result = self.run(orchestrator)
        assert [a["functionName"] for a in result.new_actions] == [names.PUBLISH_STATUS]
        assert json.loads(result.new_actions[0]["input"])["status"] == status
        self.h.activity_completed(names.PUBLISH_STATUS, None, at=self.h.now)

    def run(self, orchestrator: Any) -> ReplayResult:
        return self.h.run(orchestrator)


def inputs(result: ReplayResult, function: str) -> list[dict[str, Any]]:
    return [json.loads(a["input"]) for a in result.actions if a.get("functionName") == function]


def test_a_round_loads_the_log_and_announces_compensating(compensate):
    r = Round([RESERVE, CHARGE])
    result = r.run(compensate)
    assert json.loads(result.actions[1]["input"]) == {"orderId": "o1", "status": "Compensating", "attempt": 3}
    assert [a["functionName"] for a in result.new_actions] == [names.BEGIN_UNDO]
    begin = json.loads(result.new_actions[0]["input"])
    assert begin["seq"] == 2  # newest first
    request = begin["request"]
    assert request["action"] == "undo"
    assert request["idempotencyKey"] == "o1:charge-payment:undo"  # not the forward key, same every round
    assert request["requestId"] == "o1:compensate:3:charge-payment:payment:undo:1"
    assert request["payload"] == {"chargeId": "C-1", "amountCents": 1000, "seq": 2}
    assert request["attempt"] == 3
    assert request["deadline"] == "2026-03-01T09:01:00.000000Z"


def test_all_undos_succeed_newest_first_then_compensated(compensate):
    r = Round([RESERVE, CHARGE])
    r.remote(reply(CHARGE, result={"refundId": "rf-1"}))
    r.recorded()
    r.in_process(reply(RESERVE, result={"releaseId": "rel-1"}))
    r.recorded()
    result = r.run(compensate)
    assert [a["functionName"] for a in result.new_actions] == [names.FINISH_COMPENSATION]
    assert [i["seq"] for i in inputs(result, names.RECORD_UNDO)] == [2, 1]
    # each entry keeps what its undo answered: whether a refund returned money is read from it
    assert [i["result"] for i in inputs(result, names.RECORD_UNDO)] == [{"refundId": "rf-1"}, {"releaseId": "rel-1"}]
    sent = inputs(result, names.SEND_AGENT_REQUEST)
    assert [s["queue"] for s in sent] == ["payment-requests"]
    r.h.activity_completed(names.FINISH_COMPENSATION, {"owned": True}, at=r.h.now)
    r.status_sent("Compensated", compensate)
    result = r.run(compensate)
    assert result.is_done
    assert result.output == {"result": "Compensated", "undone": [2, 1]}


def test_an_undo_that_fails_transiently_is_tried_again_after_a_backoff_then_succeeds(compensate):
    r = Round([RESERVE, CHARGE])
    r.remote(reply(CHARGE, outcome="failed", transient=True, error="503 x4"))
    result = r.run(compensate)
    assert result.new_action_types() == ["CreateTimer"]
    backoff = result.new_actions[0]["fireAt"]
    assert backoff == "2026-03-01T09:00:12.000000Z"  # 10 s after the reply came in
    r.h.timer_fired(datetime(2026, 3, 1, 9, 0, 12, tzinfo=UTC))
    result = r.run(compensate)
    second = json.loads(result.new_actions[0]["input"])["request"]
    assert second["requestId"].endswith(":undo:2")
    assert second["idempotencyKey"] == "o1:charge-payment:undo"  # the same key on every try
    r.remote(reply(CHARGE, try_number=2, result={"refundId": "rf-1"}))
    r.recorded()
    r.in_process(reply(RESERVE, result={"releaseId": "rel-1"}))
    r.recorded()
    r.h.activity_completed(names.FINISH_COMPENSATION, {"owned": True}, at=r.h.now)
    r.status_sent("Compensated", compensate)
    result = r.run(compensate)
    assert result.output == {"result": "Compensated", "undone": [2, 1]}
    assert inputs(result, names.FAIL_COMPENSATION) == []


def test_a_round_started_with_holds_backoff_holds_its_record_through_the_backoff(compensate):
    """Before the backoff timer, ``hold_undo`` moves ``completeBy`` past the next try (its wait may end after the
    try's deadline: tests/compensation/test_redteam42_undo_backoff_held.py); a round started before the flag
    schedules the timer alone (above), as its history holds."""
    r = Round([RESERVE, CHARGE], holds_backoff=True)
    r.remote(reply(CHARGE, outcome="failed", transient=True, error="503 x4"))
    result = r.run(compensate)
    assert [a["functionName"] for a in result.new_actions] == [names.HOLD_UNDO]
    held = json.loads(result.new_actions[0]["input"])
    assert (held["seq"], held["until"]) == (2, "2026-03-01T09:00:12.000000Z")  # the timer's time
    r.h.activity_completed(names.HOLD_UNDO, {"owned": True}, at=r.h.now)
    result = r.run(compensate)
    assert result.new_action_types() == ["CreateTimer"]
    assert result.new_actions[0]["fireAt"] == "2026-03-01T09:00:12.000000Z"
    r.h.timer_created_not_fired(datetime(2026, 3, 1, 9, 0, 12, tzinfo=UTC))
    lost = Round([RESERVE, CHARGE], holds_backoff=True)  # the hold found the record taken: the round ends quietly
    lost.remote(reply(CHARGE, outcome="failed", transient=True, error="503 x4"))
    lost.h.activity_completed(names.HOLD_UNDO, {"owned": False}, at=lost.h.now)
    ended = lost.run(compensate)
    assert ended.is_done and ended.new_action_types() == []


OPEN_CIRCUIT = "payment unavailable (circuit open): not called"


def test_a_round_started_before_releases_open_circuit_ends_on_an_open_circuit_without_a_write(compensate):
    """The agent's gate refused the undo (``dependencyOpen``: no call made). A round started before
    ``releasesOpenCircuit`` ends as its history holds, the record left to the undo's deadline."""
    r = Round([RESERVE, CHARGE])
    r.remote(reply(CHARGE, outcome="failed", transient=True, error=OPEN_CIRCUIT, dependencyOpen=True))
    result = r.run(compensate)
    assert result.is_done and result.new_actions == []
    assert result.output == {"result": "DependencyOpen", "seq": 2, "step": "charge-payment", "error": OPEN_CIRCUIT}


def test_a_round_started_with_releases_open_circuit_hands_its_record_to_the_supervisor_first(compensate):
    """Since the flag, ``release_undo`` (a fenced write: ``completeBy`` now, ``lockedBy`` kept) before the round ends,
    so the supervisor releases it to wait the outage out at once (tests/compensation/test_round_meets_open_circuit.py).
    A release that found the record taken ends the round quietly."""
    r = Round([RESERVE, CHARGE], releases_open_circuit=True)
    r.remote(reply(CHARGE, outcome="failed", transient=True, error=OPEN_CIRCUIT, dependencyOpen=True))
    result = r.run(compensate)
    assert [a["functionName"] for a in result.new_actions] == [names.RELEASE_UNDO]
    assert json.loads(result.new_actions[0]["input"]) == {
        "orderId": "o1",
        "instanceId": ME,
        "seq": 2,
        "error": OPEN_CIRCUIT,
        "writeNumber": 3,  # after load_compensation and begin_undo
    }
    r.h.activity_completed(names.RELEASE_UNDO, {"owned": True}, at=r.h.now)
    result = r.run(compensate)
    assert result.is_done and result.new_actions == []
    assert result.output == {"result": "DependencyOpen", "seq": 2, "step": "charge-payment", "error": OPEN_CIRCUIT}
    assert inputs(result, names.BEGIN_UNDO)[-1]["seq"] == 2  # the older entry is left to the next round

    lost = Round([RESERVE, CHARGE], releases_open_circuit=True)
    lost.remote(reply(CHARGE, outcome="failed", transient=True, error=OPEN_CIRCUIT, dependencyOpen=True))
    lost.h.activity_completed(names.RELEASE_UNDO, {"owned": False}, at=lost.h.now)
    ended = lost.run(compensate)
    assert ended.is_done and ended.output == {"result": "FencingLost", "at": "undo 2"}


def test_an_undo_that_fails_for_good_ends_compensation_failed_naming_the_entry(compensate):
    r = Round([RESERVE, CHARGE])
    r.remote(reply(CHARGE, outcome="failed", error="charge C-1 is disputed"))
    result = r.run(compensate)
    assert [a["functionName"] for a in result.new_actions] == [names.FAIL_COMPENSATION]
    assert json.loads(result.new_actions[0]["input"]) == {
        "orderId": "o1",
        "instanceId": ME,
        "seq": 2,
        "error": "charge C-1 is disputed",
        "writeNumber": 3,  # after load_compensation and begin_undo
        "usedUpTries": False,  # failed for good: no outage to wait out, whatever the error's wording
    }
    r.h.activity_completed(names.FAIL_COMPENSATION, {"owned": True}, at=r.h.now)
    r.status_sent("CompensationFailed", compensate)
    result = r.run(compensate)
    assert result.is_done
    assert result.output == {
        "result": "CompensationFailed",
        "seq": 2,
        "step": "charge-payment",
        "error": "charge C-1 is disputed",
    }
    assert inputs(result, names.BEGIN_UNDO)[-1]["seq"] == 2  # the older entry was never attempted


def test_a_compensation_found_failed_and_moved_on_since_tells_the_submitter_nothing(compensate):
    """``fail_compensation`` run again found its write made and the record moved on (an operator compensated again;
    ``activities.fencing.moved_on``): the round still ends ``CompensationFailed``, with no status for it."""
    r = Round([RESERVE, CHARGE])
    r.remote(reply(CHARGE, outcome="failed", error="charge C-1 is disputed"))
    r.h.activity_completed(names.FAIL_COMPENSATION, {"owned": True, "movedOn": True}, at=r.h.now)
    result = r.run(compensate)
    assert result.is_done
    assert result.new_actions == []
    assert result.output["result"] == "CompensationFailed"


def test_transient_failures_that_use_up_the_tries_end_compensation_failed(compensate):
    r = Round([CHARGE], tries=2)
    r.remote(reply(CHARGE, outcome="failed", transient=True, error="503"))
    r.h.timer_fired(r.h.now + timedelta(seconds=10))
    r.remote(reply(CHARGE, try_number=2, outcome="failed", transient=True, error="503"))
    result = r.run(compensate)
    assert [a["functionName"] for a in result.new_actions] == [names.FAIL_COMPENSATION]
    sent = json.loads(result.new_actions[0]["input"])
    assert (sent["error"], sent["usedUpTries"]) == ("503 (transient; 2 tries used up)", True)


def test_a_round_resuming_after_a_crash_undoes_only_the_entries_not_yet_undone(compensate):
    # The previous round undid entry 3 and crashed before entry 2; this round starts at entry 2.
    third = {**CHARGE, "seq": 3, "step": "charge-payment", "outcome": "Undone"}
    second = {**RESERVE, "seq": 2}
    first = {**RESERVE, "seq": 1, "data": {"reservationId": "R-0"}}
    r = Round([first, second, third])
    result = r.run(compensate)
    assert [json.loads(a["input"])["seq"] for a in result.new_actions] == [2]
    r.in_process(reply(second, result={"releaseId": "rel-2"}))
    r.recorded()
    r.in_process(reply(first, result={"releaseId": "rel-1"}))
    r.recorded()
    r.h.activity_completed(names.FINISH_COMPENSATION, {"owned": True}, at=r.h.now)
    r.status_sent("Compensated", compensate)
    result = r.run(compensate)
    assert result.output == {"result": "Compensated", "undone": [2, 1]}
    assert [i["seq"] for i in inputs(result, names.BEGIN_UNDO)] == [2, 1]
    assert inputs(result, names.SEND_AGENT_REQUEST) == []  # the refund (entry 3) is never sent again


def test_the_deadline_passing_first_ends_the_round_without_touching_the_record(compensate):
    r = Round([RESERVE, CHARGE])
    deadline = r.begin()
    r.h.activity_completed(names.SEND_AGENT_REQUEST, None, at=r.h.now)
    timer = r.h.timer_created_not_fired(deadline)
    r.h.fire_timer(timer, deadline)
    result = r.run(compensate)
    assert result.is_done
    assert result.output == {"result": "DeadlineExpired", "seq": 2, "step": "charge-payment"}
    assert result.new_actions == []


def test_a_round_that_lost_the_record_stops_at_once(compensate):
    r = Round([RESERVE, CHARGE])
    r.begin(owned=False)
    result = r.run(compensate)
    assert result.is_done
    assert result.output == {"result": "FencingLost", "at": "undo 2"}
    assert result.new_actions == []


def test_a_round_not_owning_the_record_at_load_does_nothing(compensate):
    h = History(ME, {"orderId": "o1", "round": 3}, start=T0, name=names.COMPENSATION)
    h.activity_completed(names.LOAD_COMPENSATION, {"owned": False}, at=T0)
    result = h.run(compensate)
    assert result.output == {"result": "FencingLost", "at": "load"}
    assert result.new_actions == []


def test_a_round_that_lost_the_record_when_recording_an_undo_stops_there(compensate):
    r = Round([RESERVE, CHARGE])
    r.remote(reply(CHARGE, result={"refundId": "rf-1"}))
    r.recorded(owned=False)
    result = r.run(compensate)
    assert result.is_done
    assert result.output == {"result": "FencingLost", "at": "undo 2"}
    assert result.new_actions == []


def test_a_round_that_lost_the_record_when_finishing_sends_no_compensated_status(compensate):
    r = Round([CHARGE])
    r.remote(reply(CHARGE, result={"refundId": "rf-1"}))
    r.recorded()
    r.h.activity_completed(names.FINISH_COMPENSATION, {"owned": False}, at=r.h.now)
    result = r.run(compensate)
    assert result.is_done
    assert result.output == {"result": "FencingLost", "at": "finish"}
    assert result.new_actions == []


def test_a_round_that_lost_the_record_when_failing_sends_no_failed_status(compensate):
    r = Round([CHARGE])
    r.remote(reply(CHARGE, outcome="failed", error="charge C-1 is disputed"))
    r.h.activity_completed(names.FAIL_COMPENSATION, {"owned": False}, at=r.h.now)
    result = r.run(compensate)
    assert result.is_done
    assert result.output == {"result": "FencingLost", "at": "undo 2"}
    assert result.new_actions == []


def test_the_compensated_hand_over_is_retried_as_long_as_a_final_status(compensate):
    """Found by the red team (cosmos lost responses and 503s, seed 3, ord-00024): ``finish_compensation``
    committed unanswered and its next tries met a 503; the round failed, the record was ``Compensated``
    (terminal: no supervisor looks at it again) and ``Compensated`` was never sent. The hand-over write
    is now retried on durable timers as long as a final status (``HAND_OVER_RETRY_DELAYS``)."""
    r = Round([RESERVE])
    r.in_process(reply(RESERVE, result={"releaseId": "rel-1"}))
    r.recorded()
    r.h.activity_failing(names.FINISH_COMPENSATION, "Cosmos DB 503", HAND_OVER_RETRY_DELAYS[:3])
    result = r.run(compensate)
    assert result.error is None
    assert result.new_action_types() == ["CreateTimer"]  # a fourth wait, then a fifth try

    r.h.timer_fired(r.h.now + HAND_OVER_RETRY_DELAYS[3])
    r.h.activity_completed(names.FINISH_COMPENSATION, {"owned": True}, at=r.h.now)  # found done
    r.status_sent("Compensated", compensate)
    assert r.run(compensate).output == {"result": "Compensated", "undone": [1]}


def test_a_compensated_hand_over_that_fails_on_every_try_is_alerted_before_the_round_fails(compensate):
    """As ``mark_processed``'s (tests/orchestrators/test_scheduler_replay.py): a ``finish_compensation`` that
    may have committed unanswered, then failed for six hours, leaves a terminal record nobody was told of."""
    r = Round([RESERVE])
    r.in_process(reply(RESERVE, result={"releaseId": "rel-1"}))
    r.recorded()
    r.h.activity_failing(names.FINISH_COMPENSATION, "Cosmos DB 503", HAND_OVER_RETRY_DELAYS)
    result = r.run(compensate)
    assert result.error is None
    assert [a["functionName"] for a in result.new_actions] == [names.SEND_ALERT]
    alert = json.loads(result.new_actions[0]["input"])["alert"]
    assert (alert["kind"], alert["details"]["state"]) == ("HandOverUnconfirmed", "Compensated")

    r.h.activity_failed(names.SEND_ALERT, "Service Bus down", at=r.h.now)  # the alert's send is retried too
    r.h.timer_fired(r.h.now + timedelta(seconds=2))
    assert [a["functionName"] for a in r.run(compensate).new_actions] == [names.SEND_ALERT]


def test_a_round_started_with_deadline_at_begin_races_the_deadline_its_begin_undo_wrote(compensate):
    """Red team (clocks, ``tests/orchestrators/test_redteam_clocks_begin.py``): ``begin_undo`` ran 90 s after the
    episode that scheduled it; the undo's request and timer take the deadline the activity answered, and the round
    replays to its end on that history."""
    r = Round([RESERVE, CHARGE], deadline_at_begin=True)
    written = T0 + timedelta(seconds=90) + STEP
    r.h.activity_completed(names.BEGIN_UNDO, {"owned": True, "deadline": "2026-03-01T09:02:30.000000Z"}, at=r.h.now)
    result = r.run(compensate)
    [begin] = inputs(result, names.BEGIN_UNDO)
    assert begin["timeoutSeconds"] == STEP.total_seconds()
    [sent] = inputs(result, names.SEND_AGENT_REQUEST)
    assert sent["request"]["deadline"] == "2026-03-01T09:02:30.000000Z"
    r.h.activity_completed(names.SEND_AGENT_REQUEST, None, at=r.h.now)
    result = r.run(compensate)
    assert [(a["type"], a.get("fireAt")) for a in result.new_actions][-1] == (
        "CreateTimer",
        "2026-03-01T09:02:30.000000Z",
    )
    r.h.timer_created_not_fired(written)
    r.h.event_raised(AGENT_REPLY_EVENT, reply(CHARGE, result={"refundId": "rf-1"}), at=r.h.now + timedelta(seconds=80))
    r.recorded()
    result = r.run(compensate)
    assert result.error is None
    assert [i["seq"] for i in inputs(result, names.RECORD_UNDO)] == [2]
    assert inputs(result, names.BEGIN_UNDO)[-1]["seq"] == 1  # the next entry, on the same flag
    assert inputs(result, names.BEGIN_UNDO)[-1]["timeoutSeconds"] == STEP.total_seconds()


def test_the_1025th_transient_undo_failure_waits_the_capped_backoff(compensate):
    """Red team (limits): a round tries an undo up to ``undoTries`` (``MAX_FAILURES``, any count) times, the
    backoff between two tries doubling up to ``retryMaxSeconds``. It was computed as ``retryBaseSeconds * 2 **
    (try - 1)``: ``2 ** 1024`` is no float, so the 1,025th transient failure raised ``OverflowError`` ("int too
    large to convert to float") and failed the round instead of waiting the cap. The agents' and the
    supervisor's backoff had been fixed for the same arithmetic (``domain.retry``); the round now shares it."""
    cap = timedelta(seconds=300)
    r = Round([CHARGE], tries=1100)
    for number in range(1, 1025):
        r.remote(reply(CHARGE, try_number=number, outcome="failed", transient=True, error="503"))
        r.h.timer_fired(r.h.now + min(timedelta(seconds=10) * 2 ** min(number - 1, 10), cap))
    r.remote(reply(CHARGE, try_number=1025, outcome="failed", transient=True, error="503"))
    result = r.run(compensate)
    assert result.error is None
    assert result.new_action_types() == ["CreateTimer"]
    assert result.new_actions[0]["fireAt"] == to_text(r.h.now + cap)
