"""Red team (s30): a wait loop built from the app's helpers (``next_round_timer``, ``cancel_open_timers``,
``abandon_wait``, ``forget_delivered``), as a review's wait is, with a deadline under and over the Azure
Storage provider's 6-day maximum timer (every round's timer then a chain of 3-day timers), run by the
local engine: the extension's replay of the actions (``localrun.durable.action_replay``) and a cancelled
timer's ``TimerFired`` still delivered while the instance runs. Whatever round the answer comes in, or
the deadline, the instance stays deterministic, acts at that moment and completes."""

from __future__ import annotations

from collections.abc import Generator
from datetime import UTC, datetime, timedelta
from typing import Any

import azure.durable_functions as df
import pytest
from azure.durable_functions import OrchestrationRuntimeStatus

from adapters.clock import ManualClock
from localrun.durable import history as ev
from localrun.durable.engine import DurableEngine
from localrun.durable.registry import registered_orchestrators
from orchestrators.external_events import abandon_wait, forget_delivered, keep_early_events
from orchestrators.timers import cancel_open_timers, next_round_timer
from tests.localrun.real_durable_client import RealDurableClient

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
ANSWER = "Answer"
NAME = "answer_or_deadline_loop"

app = df.DFApp()


def answer_or_deadline_loop(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    """Waits until ``days`` for the answer ``{"id": "me"}``, skipping any other; acts on the outcome,
    then (``then_days``) waits on a timer of its own and acts again, as an attempt's second review does.
    ``detach``: cancelled timers leave the SDK's open tasks (an instance started with ``timerPerRound``)."""
    keep_early_events(context)
    settings = context.get_input()
    detach = context if settings["detach"] else None
    until = context.current_utc_datetime + timedelta(days=settings["days"])
    timers = [context.create_timer(until)]
    outcome = "deadline"
    while True:
        event = context.wait_for_external_event(ANSWER)
        winner = yield context.task_any([event, timers[-1]])
        forget_delivered(context, ANSWER)
        if winner == timers[-1]:
            abandon_wait(context, ANSWER, event)
            break
        if isinstance(event.result, dict) and event.result.get("id") == "me":
            outcome = "answered"
            break
        next_round_timer(context, timers, until, timer_per_round=True)
    cancel_open_timers(timers, context=detach)
    yield context.call_activity("act", outcome)
    yield context.create_timer(context.current_utc_datetime + timedelta(days=settings["then_days"]))
    yield context.call_activity("act", "then")
    return {"outcome": outcome, "rounds": len(timers)}


app.orchestration_trigger(context_name="context")(answer_or_deadline_loop)
FUNCTIONS = app.get_functions()


def run_loop(
    days: float, events: list[tuple[float, str]], *, detach: bool = True, then_days: float = 0.001
) -> tuple[Any, list[tuple[timedelta, str]]]:
    """Runs the loop, raising ``events`` (day, answer id) at their times; returns its instance and when
    (since the start) each ``act`` ran."""
    clock = ManualClock(T0)
    acts: list[tuple[timedelta, str]] = []

    def act(name: str, value: Any) -> Any:
        acts.append((clock.now() - T0, value))
        return value

    engine = DurableEngine(registered_orchestrators(FUNCTIONS), act, clock, context_fields=ev.AZURE_STORAGE_CONTEXT)
    real = RealDurableClient(engine)
    try:
        settings = {"days": days, "detach": detach, "then_days": then_days}
        instance_id = str(real.run(real.client.start_new(NAME, "loop:1", settings)))
        engine.run_until_idle()
        for at, answer_id in [*sorted(events), (days + 30, "")]:
            when = T0 + timedelta(days=at)
            while (due := engine.next_due_time()) is not None and due <= when:
                clock.set(due)
                engine.run_until_idle()
            clock.set(max(clock.now(), when))
            instance = engine.instance(instance_id)
            if answer_id and instance is not None and not instance.is_finished:
                real.run(real.client.raise_event(instance_id, ANSWER, {"id": answer_id}))
                engine.run_until_idle()
        return engine.instance(instance_id), acts
    finally:
        real.close()


SKIPPED = [0.5, 1.0, 4.0]  # answers to something else, each opening a round with a timer of its own


# every (deadline in days, round answered in) that exists: a round opens for each skipped answer before the deadline
ROUNDS = [
    (days, answered)
    for days in (2, 10)
    for answered in (1, 2, 3, 4, None)
    if answered is None or answered <= len([day for day in SKIPPED if day < days]) + 1
]


@pytest.mark.parametrize(("days", "answered_in_round"), ROUNDS)
def test_the_loop_acts_when_the_answer_or_the_deadline_comes_and_completes(days, answered_in_round):
    skipped = [day for day in SKIPPED if day < days]
    answer_day = None if answered_in_round is None else [0.2, 0.7, 1.5, 5.0][answered_in_round - 1]
    events = [(day, "other") for day in skipped if answer_day is None or day < answer_day]
    if answer_day is not None:
        events.append((answer_day, "me"))

    instance, acts = run_loop(days, events)

    assert instance.status is OrchestrationRuntimeStatus.Completed, instance.output
    expected = ("deadline", days) if answer_day is None else ("answered", answer_day)
    assert instance.output["outcome"] == expected[0]
    assert instance.output["rounds"] == len(events) + (1 if answer_day is None else 0)
    assert acts[0] == (timedelta(days=expected[1]), expected[0])  # acted at that moment, not later


@pytest.mark.parametrize("detach", [True, False])
def test_a_long_deadline_answered_early_does_not_hold_up_what_follows(detach):
    """The loop's first 3-day timer, cancelled at the answer (day 1), still fires on day 3 while the
    instance waits on its next timer. Left in the SDK's open tasks (an instance started before
    ``timerPerRound``), the SDK's ``LongTimerTask`` takes it as its next interval and schedules a new
    timer, uncancelled, to day 6, which the extension awaits before what follows: the act due on day 5
    comes on day 6. Taken out (``cancel_timer`` with the context), it comes on day 5."""
    instance, acts = run_loop(10, [(1.0, "me")], detach=detach, then_days=4)

    assert instance.status is OrchestrationRuntimeStatus.Completed
    assert acts[0] == (timedelta(days=1), "answered")
    assert acts[1] == (timedelta(days=5 if detach else 6), "then")
