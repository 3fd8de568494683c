"""Red team (found by the local runner while attacking the lean scheduler; the same replay fails on
1415b51, before it): a duplicate agent reply that arrives in the same orchestrator episode as the
reply itself fails the attempt at the next step's wait.

Cause: the Durable SDK keeps an ``EventRaised`` that found no open wait in ``deferred_tasks`` and
applies it to every later wait of the same name without removing it
(``DurableOrchestrationContext._add_to_open_tasks``); ``orchestrators/agent_call.py`` ``invoke_agent``
answers a reply with another ``requestId`` by waiting again (``while True``), which is resolved at once
by the same deferred duplicate, forever: ``RecursionError`` ("maximum recursion depth exceeded"), the
orchestration fails, the supervisor retries the order (one counted failure, a step timeout of delay).
Runner (the invariants hide it: the supervisor's retry completes the order):
examples/profiles/duplicate-replies.json, 100 orders, seed 1: 37 first attempts end in this
RecursionError (37 on 1415b51 too); all-faults.json seed 1: 4; a prepaid profile with payment
duplicate_reply_rate 0.1, seed 3: ord-00050:1. Known SDK bug: Azure/azure-functions-durable-python
issue 507 ("Single event notification is being yielded every time with wait_for_external_event")."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from contracts.names import AGENT_REPLY_EVENT
from orchestrators import names
from tests.orchestrators.support import STEP
from tests.orchestrators.test_scheduler_replay import CHARGED, RESERVED, Flow, reply


@pytest.fixture(scope="module")
def scheduler(functions: dict[str, Any]) -> Any:
    return functions[names.SCHEDULER].func


def test_a_duplicate_reply_in_the_same_episode_as_the_reply_is_ignored_by_the_next_steps_wait(scheduler: Any) -> None:
    """FINDING. The charge's reply and its duplicate arrive together; the shipment then begins (its
    request sent by ``begin_step``) and waits for its own reply: the attempt must go on waiting (a
    timer and a wait, nothing failed), as it does when the duplicate comes in a later episode
    (``test_a_duplicate_reply_of_a_completed_step_is_ignored``)."""
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.remote_reply(reply("charge-payment", result=CHARGED))
    f.h.event_raised(AGENT_REPLY_EVENT, reply("charge-payment", result=CHARGED))  # the duplicate, same episode
    f.begin()  # arrange-shipment's start (with the charge's result), request sent

    result = f.run(scheduler)

    assert result.error is None, result.error
    assert not result.is_done
    # the shipment's deadline; the duplicate is skipped and the wait goes on with a timer of its own for
    # the same deadline (orchestrators.timers.next_round_timer)
    first, second = result.new_actions
    assert (first["type"], second["type"]) == ("CreateTimer", "CreateTimer")
    assert first["fireAt"] == second["fireAt"]
    assert (first["isCanceled"], second["isCanceled"]) == (False, False)


def test_a_reply_recorded_before_the_completion_of_the_begin_that_sent_it_does_not_fail_the_next_step(
    scheduler: Any,
) -> None:
    """FINDING (same cause). ``begin_step`` sends the charge's request before it answers; the payment
    agent's reply is raised to the instance before the activity's completion is (a fast agent, or a
    host restart that dropped ``begin_step``'s answer and ran it again). The charge's wait takes the
    reply (deferred by the SDK), but the deferred reply stays and answers the shipment's wait too, again
    and again: ``RecursionError``, the attempt fails. Same on 1415b51 with ``send_agent_request``."""
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    begin = f.h.activity_scheduled(names.BEGIN_STEP)  # charge-payment's start, its request sent inside
    f.h.event_raised(AGENT_REPLY_EVENT, reply("charge-payment", result=CHARGED), at=f.h.now + timedelta(seconds=1))
    f.h.complete_activity(begin, {"owned": True})
    f.h.timer_created_not_fired(f.h.now + STEP)
    f.begin()  # arrange-shipment's start carries the charge's result: the early reply was taken

    result = f.run(scheduler)

    assert result.error is None, result.error
    assert not result.is_done
    assert result.new_action_types() == ["CreateTimer"]
