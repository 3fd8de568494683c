"""External events raised before the wait of their name opens ("early"), replayed by the Durable SDK's
own engine (``orchestrators/external_events.py``).

``begin_step`` sends a Service Bus agent's request itself, so a fast reply is routinely raised before the
activity's completion, while no wait of ``AgentReply`` is open; the reply relay can raise a copy of the
previous step's reply in the same gap (it raises, then settles; a lost lock raises it again). The SDK kept
ONE early event per name: the copy overwrote the reply, the wait skipped the copy, and the step timed out
though its agent had answered (red team, lean protocol, on 4756307). Every early event is now kept, per
name in history order, and each wait takes the oldest one not yet taken: the same for the undo replies of
a compensation round, an operator's ``ReviewDecision`` and ``PaymentNotified``.

And histories recorded before the change (``early_events_recorded.json``, replayed by 4756307) replay to
the same actions."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from contracts.names import AGENT_REPLY_EVENT, PAYMENT_NOTIFIED_EVENT
from localrun.durable.actions import SCHEDULING_TYPES
from localrun.durable.replay import replay
from orchestrators import names
from orchestrators.external_events import EarlyEvents, forget_delivered, keep_early_events
from tests.durable_history import ReplayResult
from tests.orchestrators.early_histories import (
    ANSWER,
    LATER,
    MORE_WAITS,
    PAYMENT,
    RECORDED,
    charge_reply,
    charge_with_early,
    payment_notified_before_the_payment_step_begins,
    review_with_early,
    shipment_reply,
    shipment_with_early,
    undo_reply,
    undo_round_with_early,
)
from tests.orchestrators.support import STEP
from tests.orchestrators.test_scheduler_replay import SHIPPED, called

RECORDED_FILE = Path(__file__).with_name("early_events_recorded.json")


@pytest.fixture(scope="module")
def scheduler(functions: dict[str, Any]) -> Any:
    return functions[names.SCHEDULER].func


@pytest.fixture(scope="module")
def compensate(functions: dict[str, Any]) -> Any:
    return functions[names.COMPENSATION].func


def waits_since(result: ReplayResult, function: str) -> int:
    """How many waits the orchestration opened since its last call of ``function``."""
    last = max(i for i, a in enumerate(result.actions) if a.get("functionName") == function)
    return sum(1 for a in result.actions[last:] if a["type"] == "WaitForExternalEvent")


# --- the per-name queue itself -------------------------------------------------------------------


def test_early_events_of_one_name_are_handed_out_oldest_first_each_once() -> None:
    kept = EarlyEvents()
    kept["AgentReply"] = first = lambda: "first"
    kept["AgentReply"] = second = lambda: "second"
    kept["ReviewDecision"] = other = lambda: "other"
    assert kept["AgentReply"] is first and kept.waiting("AgentReply") == 2
    assert kept.pop("AgentReply") is first
    assert kept["AgentReply"] is second and kept.waiting("AgentReply") == 1
    assert kept.pop("AgentReply", None) is second
    assert "AgentReply" not in kept and kept.pop("AgentReply", None) is None
    assert kept["ReviewDecision"] is other


def test_a_duplicate_task_completion_keeps_the_sdks_one_entry_per_task_id() -> None:
    kept = EarlyEvents({7: lambda: "first"})
    kept[7] = latest = lambda: "latest"
    assert kept[7] is latest and len(kept) == 1


def test_the_queue_is_installed_once_and_keeps_what_the_sdk_already_held() -> None:
    class Context:
        def __init__(self) -> None:
            self.deferred_tasks: dict[Any, Any] = {"AgentReply": print}

    context: Any = Context()
    keep_early_events(context)
    installed = context.deferred_tasks
    assert isinstance(installed, EarlyEvents) and installed["AgentReply"] is print
    keep_early_events(context)
    assert context.deferred_tasks is installed
    forget_delivered(context, "AgentReply")
    assert "AgentReply" not in installed


# --- agent replies (the red team's case, both orders) ----------------------------------------------


@pytest.mark.parametrize(
    "early",
    [
        pytest.param(("copy", "reply"), id="stale-copy-then-reply"),
        pytest.param(("reply", "copy"), id="reply-then-stale-copy"),
    ],
)
def test_two_early_replies_reach_the_wait_in_order_and_the_steps_own_is_taken(scheduler: Any, early: Any) -> None:
    """The shipment's reply and a re-raised copy of the charge's reply, both raised before the completion
    of the shipment's ``begin_step``, in either order: the wait takes them oldest first (the copy is
    skipped where it comes) and the shipment's reply completes the order. Fails on 4756307 for
    reply-then-copy: the copy overwrote the reply, the attempt waited for its deadline."""
    event = {"copy": charge_reply(), "reply": shipment_reply()}
    result = shipment_with_early(*(event[e] for e in early)).run(scheduler)
    assert result.error is None, result.error
    [processed] = called(result, names.MARK_PROCESSED)
    assert processed["completes"] == {"step": "arrange-shipment", "result": SHIPPED}
    # the copy reached the wait before the reply (a skip, then a second wait), or was never needed
    assert waits_since(result, names.BEGIN_STEP) == (2 if early[0] == "copy" else 1)
    assert [a["type"] for a in result.new_actions] == ["CallActivity"]


@pytest.mark.parametrize("early", list(itertools.permutations(("copy", "reply", "duplicate"))), ids="-".join)
def test_any_order_of_a_copy_the_reply_and_its_duplicate_takes_the_reply(scheduler: Any, early: Any) -> None:
    event = {"copy": charge_reply(), "reply": shipment_reply(), "duplicate": shipment_reply()}
    result = shipment_with_early(*(event[e] for e in early)).run(scheduler)
    assert result.error is None, result.error
    assert [c["completes"]["step"] for c in called(result, names.MARK_PROCESSED)] == ["arrange-shipment"]


def test_an_early_event_left_over_reaches_the_next_steps_wait_first_and_is_skipped_there(scheduler: Any) -> None:
    """The charge's reply, then a reply to another request, both early for the charge: the charge takes
    its reply; the other one is kept, in order, for the next wait of the name (the shipment's), which
    skips it and takes the shipment's own reply when it comes."""
    other = charge_reply(request_id="o1:1:charge-payment:payment")  # the previous attempt's request
    f = charge_with_early(charge_reply(), other)
    result = f.run(scheduler)
    assert [b["request"]["step"] for b in called(result, names.BEGIN_STEP)][-1] == "arrange-shipment"
    f.begin()
    f.h.timer_created_not_fired(f.h.now + STEP)
    waiting = f.run(scheduler)
    assert waiting.error is None and not waiting.is_done
    assert waits_since(waiting, names.BEGIN_STEP) == 2  # the left-over skipped, then a wait for the shipment
    f.h.event_raised(AGENT_REPLY_EVENT, shipment_reply(), at=f.h.now + LATER)
    done = f.run(scheduler)
    assert [c["completes"]["step"] for c in called(done, names.MARK_PROCESSED)] == ["arrange-shipment"]


# --- the other waits: undo replies, review answers, payment notifications ----------------------------


@pytest.mark.parametrize("copy_first", [True, False], ids=["copy-then-reply", "reply-then-copy"])
def test_an_undo_reply_is_not_lost_to_an_early_reply_to_another_request(compensate: Any, copy_first: bool) -> None:
    """A refund's reply and a reply to the previous try's request, both raised before the completion of
    the ``send_agent_request`` that sent the refund: the undo is recorded."""
    stale = undo_reply(try_number=0)
    early = (stale, undo_reply()) if copy_first else (undo_reply(), stale)
    result = undo_round_with_early(*early).run(compensate)
    assert result.error is None, result.error
    assert [a["functionName"] for a in result.new_actions if a["type"] == "CallActivity"] == [names.RECORD_UNDO]


@pytest.mark.parametrize("other_first", [True, False], ids=["other-then-answer", "answer-then-other"])
def test_an_operators_early_answer_is_not_lost_to_an_answer_to_another_review(
    scheduler: Any, other_first: bool
) -> None:
    """The review's answer and an answer to another review, both raised before the completion of
    ``await_review``: the review's answer is taken at once (no waiting for the deadline, no close)."""
    other = {"reviewId": "o1:1:charge-payment:review:9", "action": "fail", "operator": "bo"}
    result = review_with_early(*((other, ANSWER) if other_first else (ANSWER, other))).run(scheduler)
    assert result.error is None, result.error
    [(function, begin)] = [
        (a["functionName"], json.loads(a["input"])) for a in result.new_actions if a["type"] == "CallActivity"
    ]
    assert function == names.BEGIN_STEP  # "retry": the step again, with its own agent
    assert begin["agent"] == "payment" and begin["request"]["requestId"] == "o1:1:charge-payment:payment:3"


@pytest.mark.parametrize("times", [1, 2])
def test_an_early_payment_notification_is_taken_once_and_the_capture_requested(scheduler: Any, times: int) -> None:
    """Every ``PaymentNotified`` of an order carries the one payment on its record (``domain.payments``:
    a second notification is refused), so two early ones lost nothing before the queues either; the
    wait takes the oldest."""
    result = payment_notified_before_the_payment_step_begins(times).run(scheduler)
    assert result.error is None, result.error
    [send] = [json.loads(a["input"]) for a in result.new_actions if a.get("functionName") == names.SEND_AGENT_REQUEST]
    assert send["request"]["action"] == "capture"
    assert send["request"]["payload"]["notificationId"] == PAYMENT["notificationId"]
    waits = [a.get("externalEventName") for a in result.actions if a["type"] == "WaitForExternalEvent"]
    assert waits == [PAYMENT_NOTIFIED_EVENT]  # one wait, answered by the oldest early notification


# --- histories recorded before the queues ------------------------------------------------------------


ADDED_CONTEXT_FIELDS = {
    "upperSchemaVersionNew": 2,
    "longRunningTimerIntervalDuration": "3.00:00:00",
    "maximumShortTimerDuration": "6.00:00:00",
    "defaultHttpAsyncRequestSleepTimeMillseconds": 30000,
}


def recorded() -> dict[str, dict[str, Any]]:
    data: dict[str, dict[str, Any]] = json.loads(RECORDED_FILE.read_text(encoding="utf-8"))
    return data


def unnumbered(actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The actions with each activity input's ``writeNumber`` left out: the histories were recorded
    before fenced writes were numbered (``orchestrators.fenced.FencedWrites``), and replay matches a
    task by its name and order, never by its input."""
    out: list[dict[str, Any]] = []
    for action in actions:
        copy = dict(action)
        if isinstance(copy.get("input"), str):
            data = json.loads(copy["input"])
            if isinstance(data, dict):
                data.pop("writeNumber", None)
            copy["input"] = data
        if "compoundActions" in copy:
            copy["compoundActions"] = unnumbered(copy["compoundActions"])
        out.append(copy)
    return out


def scheduling(actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [a for a in unnumbered(actions) if a["type"] in SCHEDULING_TYPES]


def test_the_recorded_histories_are_the_ones_the_builders_make() -> None:
    """The file holds what the builders of ``early_histories`` make today (rebuilt with 4756307's code
    in a worktree: ``early_histories.RECORDED``, the context JSON and the state it answered)."""
    data = recorded()
    assert sorted(data) == sorted(RECORDED)
    for name, build in RECORDED.items():
        history, orchestration = build()
        context = json.loads(history.context_json())
        # the extension's fields the runner sends since (localrun.durable.history.ContextFields)
        added = {key: context.pop(key) for key in ADDED_CONTEXT_FIELDS}
        assert added == ADDED_CONTEXT_FIELDS, name
        assert context == data[name]["context"], name
        assert orchestration == data[name]["orchestration"]


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_a_history_recorded_before_the_queues_replays_to_the_same_actions(functions: dict[str, Any], name: str) -> None:
    """One early event of a name at a time (or copies of one): the same actions, wait for wait. Two of
    one name where the old code kept the newest and took it (``MORE_WAITS``): the same activities,
    timers and output; the queue hands the older one to the wait first, skipped, one wait more."""
    before = recorded()[name]
    state = replay(functions[before["orchestration"]].func, json.dumps(before["context"]))
    assert (state.error, state.is_done, state.output) == (before["error"], before["isDone"], before["output"])
    assert scheduling(state.actions) == scheduling(before["actions"])
    if name in MORE_WAITS:
        waits = [a for a in state.actions if a["type"] == "WaitForExternalEvent"]
        assert len(waits) == 1 + sum(1 for a in before["actions"] if a["type"] == "WaitForExternalEvent")
    else:
        assert unnumbered(state.actions) == unnumbered(before["actions"])
