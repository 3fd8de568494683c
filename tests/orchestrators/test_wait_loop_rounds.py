"""Red team (s30): a wait loop that skips an event (an agent's reply to another request, an operator's
answer to another review) and waits again until the same deadline.

The SDK leaves a task it already scheduled out of a when-any's actions, so the next round of the loop
sends the extension a when-any holding the new wait alone; the extension replays the actions one after
another, each awaited (``OutOfProcOrchestrationShim.ProcessAsyncActionsV2``). When the deadline passes,
the orchestrator goes on (an attempt ends ``DeadlineExpired``, a review closes) but the extension still
waits on that when-any: nothing after it is scheduled and the instance's end does not take effect; it
stays Running until another event of the name comes, which may be never (a review never closes, an
attempt's instance Running for good). ``tests.durable_history`` now reads the history as the extension
does (``localrun.durable.action_replay``).

Fix: the next round races a timer of its own for the same deadline and cancels the one it replaces
(``orchestrators.timers.next_round_timer``), on instances started since (``timerPerRound`` in the
input); an instance started before replays as it was recorded."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from contracts.names import AGENT_REPLY_EVENT
from localrun.durable.history import parse_timestamp
from orchestrators import names
from tests.compensation.test_compensation_replay import CHARGE, RESERVE, Round
from tests.compensation.test_compensation_replay import reply as undo_reply
from tests.durable_history import ReplayResult
from tests.orchestrators.support import STEP, started_attempt
from tests.orchestrators.test_scheduler_replay import ME, ORDER, RESERVED, Flow, reply

STALE = reply("charge-payment", result={"chargeId": "OLD"}, request_id="o1:1:charge-payment:payment")


@pytest.fixture(scope="module")
def scheduler(functions: dict[str, Any]) -> Any:
    return functions[names.SCHEDULER].func


@pytest.fixture(scope="module")
def compensate(functions: dict[str, Any]) -> Any:
    return functions[names.COMPENSATION].func


def _own_timer(result: ReplayResult) -> Any:
    [own] = result.new_actions
    assert own["type"] == "CreateTimer" and own["isCanceled"] is False
    return parse_timestamp(own["fireAt"])


def test_an_attempt_that_skipped_a_reply_ends_at_the_deadline_for_the_extension_too(scheduler: Any) -> None:
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    deadline = f.h.now + STEP
    f.remote_reply(STALE)
    own = _own_timer(f.run(scheduler))
    assert own == deadline
    f.h.fire_timer(f.h.timer_created_not_fired(own), own)

    result = f.run(scheduler)

    assert result.output == {"result": "DeadlineExpired", "step": "charge-payment"}
    assert result.extension.reached_end  # the attempt's end takes effect
    assert not result.extension.open_tasks  # the first timer is cancelled: nothing holds the instance


def test_an_attempt_started_before_replays_its_recorded_history_as_it_was(scheduler: Any) -> None:
    """Without ``timerPerRound`` the loop races the one timer, as the history recorded it: no new task,
    nothing non-deterministic; the extension waits for another reply, as it did (such an instance ends
    when one comes; the supervisor retries its order at the record's deadline meanwhile)."""
    f = Flow(loaded=started_attempt(ME, ORDER, 2, timer_per_round=False))
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    deadline = f.h.now + STEP
    f.remote_reply(STALE)
    assert f.run(scheduler).new_actions == []
    f.h.fire_timer(f.timer, deadline)

    result = f.run(scheduler)

    assert result.output == {"result": "DeadlineExpired", "step": "charge-payment"}
    assert result.extension.non_determinism is None
    assert not result.extension.reached_end


def test_a_review_answered_for_another_review_closes_at_its_deadline(scheduler: Any) -> None:
    from tests.compensation.test_scheduler_failure_replay import closed_at_the_deadline, review_requested

    a, data = review_requested(scheduler, "retry")
    a.h.timer_created_not_fired(parse_timestamp(data["until"]))
    other = {"reviewId": "o1:1:charge-payment:review:9", "action": "compensate", "operator": "ana"}
    a.h.event_raised(names.REVIEW_DECISION_EVENT, other, at=a.h.now + timedelta(minutes=5))
    own = _own_timer(a.run(scheduler))
    assert own == parse_timestamp(data["until"])
    a.h.fire_timer(a.h.timer_created_not_fired(own), own)

    closed_at_the_deadline(a, a.run(scheduler), {"owned": True, "action": "retry", "operator": None})


def test_an_undo_that_skipped_a_reply_ends_the_round_at_the_deadline(compensate: Any) -> None:
    r = Round([RESERVE, CHARGE])
    deadline = r.h.now + timedelta(seconds=60)
    r.remote(undo_reply(CHARGE, try_number=2))
    own = _own_timer(r.run(compensate))
    assert own == deadline
    r.h.fire_timer(r.h.timer_created_not_fired(own), own)

    result = r.run(compensate)

    assert result.output == {"result": "DeadlineExpired", "seq": 2, "step": "charge-payment"}
    assert result.extension.reached_end
    assert not result.extension.open_tasks


def test_a_skipped_reply_then_the_right_one_goes_on_with_nothing_left_open(compensate: Any) -> None:
    r = Round([RESERVE, CHARGE])
    r.remote(undo_reply(CHARGE, try_number=2))
    own = _own_timer(r.run(compensate))
    r.h.timer_created_not_fired(own)
    r.h.event_raised(AGENT_REPLY_EVENT, undo_reply(CHARGE), at=r.h.now + timedelta(seconds=1))

    result = r.run(compensate)

    assert [a["functionName"] for a in result.new_actions] == [names.RECORD_UNDO]
    assert result.extension.cancelled_timers == {4, 5}  # both rounds' timers: neither holds the round
    assert result.extension.open_tasks  # only record_undo, just scheduled
