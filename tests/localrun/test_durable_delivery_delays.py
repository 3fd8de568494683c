"""The runner's Durable backend can be late, as Azure Storage's is (``DurableEngine.delivery_delay``, profile
``durable.delivery_delay_rate`` / ``delivery_delay_ms``): a start, a raised event, a termination, a timer's
``TimerFired`` and an activity's result reach their instance late, and an activity work item reaches its worker
late; the messages of one instance still arrive in the order they were sent, and one whose instance ended
meanwhile is dropped. Before, every message, start and timer was delivered at once."""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import azure.durable_functions as df
import pytest
from azure.durable_functions import OrchestrationRuntimeStatus

from adapters.clock import ManualClock
from localrun.durable import history as ev
from localrun.durable.engine import DurableEngine
from localrun.durable.registry import registered_orchestrators
from localrun.profile import Profile, ProfileError

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
S = timedelta(seconds=1)

app = df.DFApp()


def timer_then_act(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    yield context.create_timer(context.current_utc_datetime + 60 * S)
    done = yield context.call_activity("act", "x")
    return [done, context.current_utc_datetime.isoformat()]


def two_events(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    first = yield context.wait_for_external_event("E")
    second = yield context.wait_for_external_event("E")
    return [first, second]


def reply_or_deadline(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
    timer = context.create_timer(context.current_utc_datetime + 60 * S)
    reply = context.wait_for_external_event("Reply")
    winner = yield context.task_any([reply, timer])
    if winner == reply:
        timer.cancel()
        return reply.result
    return "deadline"


app.orchestration_trigger(context_name="context")(timer_then_act)
app.orchestration_trigger(context_name="context")(reply_or_deadline)
app.orchestration_trigger(context_name="context")(two_events)
FUNCTIONS = app.get_functions()


class Backend:
    """An engine whose ``delivery_delay`` answers from ``delays`` in turn (then none); the activity ``act`` records
    when it ran."""

    def __init__(self, delays: list[timedelta]) -> None:
        self.clock = ManualClock(T0)
        self.runs: list[datetime] = []
        self.engine = DurableEngine(registered_orchestrators(FUNCTIONS), self._act, self.clock)
        drawn: Iterator[timedelta] = iter(delays)
        self.engine.delivery_delay = lambda: next(drawn, timedelta(0))

    def _act(self, name: str, value: Any) -> str:
        self.runs.append(self.clock.now())
        return f"{value}@{(self.clock.now() - T0).total_seconds():g}"

    def settle(self, until: datetime | None = None) -> None:
        """Run everything due, moving the clock on to each next due moment (up to ``until``)."""
        self.engine.run_until_idle()
        while (due := self.engine.next_due_time()) is not None and (until is None or due <= until):
            self.clock.set(max(due, self.clock.now()))
            self.engine.run_until_idle()
        if until is not None:
            self.clock.set(until)
            self.engine.run_until_idle()

    def history(self, instance_id: str) -> list[ev.HistoryEvent]:
        instance = self.engine.instance(instance_id)
        assert instance is not None
        return list(instance.history)


def test_a_late_start_a_late_timer_a_late_work_item_and_a_late_result():
    # drawn in send order: the start, the TimerFired, the activity's work item, its result
    backend = Backend([10 * S, 30 * S, 5 * S, 7 * S])
    backend.engine.start("timer_then_act", "late-1", None)

    backend.settle(T0 + 9 * S)
    instance = backend.engine.instance("late-1")
    assert instance is not None and instance.status is OrchestrationRuntimeStatus.Pending  # its start on its way
    backend.settle()

    # the episode began at 10 s, its 60 s timer due at 70 s fired at 100 s, the activity ran at 105 s and its
    # result reached the instance at 112 s
    assert backend.runs == [T0 + 105 * S]
    assert instance.status is OrchestrationRuntimeStatus.Completed
    assert instance.output == ["x@105", (T0 + 112 * S).isoformat()]
    fired = next(e for e in backend.history("late-1") if e.type is ev.EventType.TIMER_FIRED)
    assert fired.fields["FireAt"] == ev.timestamp_text(T0 + 70 * S)
    assert backend.engine.counters.deliveries_delayed == 4


def test_one_instance_takes_its_messages_in_the_order_they_were_sent():
    # the start at once, the first event 20 s late, the second at once: it waits behind the first
    backend = Backend([timedelta(0), 20 * S, timedelta(0)])
    backend.engine.start("two_events", "order-1", None)
    backend.settle()
    backend.engine.raise_event("order-1", "E", json.dumps("first"))
    backend.clock.advance(S)
    backend.engine.raise_event("order-1", "E", json.dumps("second"))
    backend.settle(T0 + 19 * S)
    instance = backend.engine.instance("order-1")
    assert instance is not None and instance.status is OrchestrationRuntimeStatus.Running  # neither arrived yet

    backend.settle()

    assert instance.output == ["first", "second"]
    raised = [e for e in backend.history("order-1") if e.type is ev.EventType.EVENT_RAISED]
    assert [json.loads(e.fields["Input"]) for e in raised] == ["first", "second"]


def test_a_reply_sent_before_the_deadline_may_reach_the_instance_after_its_timer():
    """The timer's message has been on the queue since the timer was created, visible from its fire time: it does
    not wait behind a reply sent just before the deadline and held back (Azure Storage's polling, a lease moving)."""
    backend = Backend([timedelta(0), 20 * S])  # the start at once, the reply 20 s late, the TimerFired at once
    backend.engine.start("reply_or_deadline", "order-1:1", None)
    backend.settle(T0 + 59 * S)
    backend.engine.raise_event("order-1:1", "Reply", json.dumps("charged"))
    backend.settle()

    instance = backend.engine.instance("order-1:1")
    assert instance is not None and instance.output == "deadline"


def test_a_late_timer_still_comes_after_a_reply_sent_before_its_fire_time():
    backend = Backend([timedelta(0), timedelta(0), 30 * S])  # the reply at once, the TimerFired 30 s late
    backend.engine.start("reply_or_deadline", "order-1:1", None)
    backend.settle(T0 + 59 * S)
    backend.engine.raise_event("order-1:1", "Reply", json.dumps("charged"))
    backend.settle()

    instance = backend.engine.instance("order-1:1")
    assert instance is not None and instance.output == "charged"


def test_an_event_raised_to_a_start_still_on_its_way_comes_after_it():
    backend = Backend([30 * S])
    backend.engine.start("two_events", "order-1", None)
    assert backend.engine.raise_event("order-1", "E", json.dumps("a")).status == 202  # Pending: taken
    assert backend.engine.raise_event("order-1", "E", json.dumps("b")).status == 202
    backend.settle()

    instance = backend.engine.instance("order-1")
    assert instance is not None and instance.output == ["a", "b"]
    assert instance.last_updated == T0 + 30 * S


def test_a_message_that_arrives_after_its_instance_ended_is_dropped():
    backend = Backend([timedelta(0), timedelta(0), timedelta(0), 60 * S])
    backend.engine.start("two_events", "order-1", None)
    backend.settle()
    backend.engine.raise_event("order-1", "E", json.dumps("a"))
    backend.engine.raise_event("order-1", "E", json.dumps("b"))
    backend.settle(T0)
    backend.engine.raise_event("order-1", "E", json.dumps("late"))  # accepted while it ran
    backend.settle()

    instance = backend.engine.instance("order-1")
    assert instance is not None and instance.status is OrchestrationRuntimeStatus.Completed
    assert instance.output == ["a", "b"]
    assert backend.engine.next_due_time() is None


def test_the_profile_takes_a_delivery_delay_within_its_range():
    profile = Profile.parse({"durable": {"delivery_delay_rate": 0.3, "delivery_delay_ms": [1000, 60000]}})
    assert (profile.durable_delivery_delay_rate, profile.durable_delivery_delay_ms) == (0.3, (1000.0, 60000.0))
    assert Profile.parse({}).durable_delivery_delay_rate == 0.0
    assert Profile.parse({"durable": {"delivery_delay_rate": 0.1}}).durable_delivery_delay_ms == (0.0, 10000.0)
    with pytest.raises(ProfileError, match=r"durable\.delivery_delay_ms"):
        Profile.parse({"durable": {"delivery_delay_ms": [0, 600_001]}})
    with pytest.raises(ProfileError, match=r"durable\.delivery_delay_rate"):
        Profile.parse({"durable": {"delivery_delay_rate": 2}})
    with pytest.raises(ProfileError, match=r"durable\.lag"):
        Profile.parse({"durable": {"lag": 1}})
