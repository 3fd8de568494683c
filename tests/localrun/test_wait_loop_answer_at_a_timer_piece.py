"""Red team (s30): the wait loop of ``test_wait_loop_long_deadlines.py`` with a deadline over 6 days (its
timer a chain of 3-day timers), answered exactly when a 3-day timer fires, both in one episode, in
either order. Answer first: the loop cancels the long timer, and its 3-day timer's ``TimerFired``,
right after, finds it out of the SDK's open tasks. Timer first: the SDK's ``LongTimerTask`` schedules its
next 3-day timer, and the answer cancels that one at once. Either way the loop acts at the answer,
what follows comes on time, and the instance completes. Except, answer first, on an instance started
before ``timerPerRound`` (the cancelled 3-day timer left in the SDK's open tasks): its ``TimerFired``
makes the ``LongTimerTask`` schedule a next one, uncancelled, to the deadline, and what follows waits
for it, as docs/design.md "Versions" says of such an instance."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from azure.durable_functions import OrchestrationRuntimeStatus

from adapters.clock import ManualClock
from localrun.durable import history as ev
from localrun.durable.engine import DurableEngine
from localrun.durable.registry import registered_orchestrators
from tests.localrun.real_durable_client import RealDurableClient
from tests.localrun.test_wait_loop_long_deadlines import ANSWER, FUNCTIONS, NAME, T0

PIECE = timedelta(days=3)  # the SDK's long timer interval on Azure Storage


@pytest.mark.parametrize("detach", [True, False])
@pytest.mark.parametrize("first", ["answer", "timer"])
def test_an_answer_in_the_episode_of_a_long_timers_piece_is_acted_on_and_what_follows_is_on_time(first, detach):
    clock = ManualClock(T0)
    acts: list[tuple[timedelta, Any]] = []

    def act(name: str, value: Any) -> Any:
        acts.append((clock.now() - T0, value))
        return value

    engine = DurableEngine(registered_orchestrators(FUNCTIONS), act, clock, context_fields=ev.AZURE_STORAGE_CONTEXT)
    real = RealDurableClient(engine)
    try:
        settings = {"days": 10, "detach": detach, "then_days": 1}
        instance_id = str(real.run(real.client.start_new(NAME, "loop:1", settings)))
        engine.run_until_idle()
        clock.set(T0 + PIECE)
        if first == "answer":
            real.run(real.client.raise_event(instance_id, ANSWER, {"id": "me"}))
            assert engine.fire_due_timers() == 1
        else:
            assert engine.fire_due_timers() == 1
            real.run(real.client.raise_event(instance_id, ANSWER, {"id": "me"}))
        engine.run_until_idle()  # one episode reads both
        while (due := engine.next_due_time()) is not None:
            clock.set(due)
            engine.run_until_idle()
        instance = engine.instance(instance_id)
    finally:
        real.close()

    assert instance is not None
    assert instance.status is OrchestrationRuntimeStatus.Completed, instance.output
    assert instance.output["outcome"] == "answered"
    held_up = first == "answer" and not detach
    then = timedelta(days=10) if held_up else PIECE + timedelta(days=1)
    assert acts == [(PIECE, "answered"), (then, "then")]
