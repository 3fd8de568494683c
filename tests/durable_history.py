"""A synthetic-history builder for orchestrator replay tests.

Builds the context JSON the Durable extension would send after a given sequence of events, runs an
orchestrator over it through the SDK's own replay engine, and returns what the orchestrator asked for
next. Task ids are the SDK's: activities and timers share one counter, in the order the orchestrator
yields them, so build the history in the order the orchestrator schedules things::

    h = History("order-1:1", {"orderId": "order-1"}, start=T0)
    h.activity_completed("claim_order", {"claimed": True})    # task 0
    h.timer_created_not_fired(T0 + timedelta(minutes=5))      # task 1: the deadline timer...
    h.event_raised("AgentReply", {"outcome": "ok"}, at=T0 + timedelta(seconds=30))  # ...loses the race
    result = h.run(scheduler_orchestrator)
    assert [a["type"] for a in result.new_actions] == ["CallActivity"]

Each completion may open a new episode (``at=``), as the host does when a message wakes the
orchestrator; ``timer_fired`` opens one at the timer's time (unless the current episode is already
that late). The episode time is what ``context.current_utc_datetime`` returns from there on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from localrun.durable import history as ev
from localrun.durable.action_replay import ActionReplay, parse_timespan, replay_actions
from localrun.durable.actions import SCHEDULING_TYPES, OrchestratorState
from localrun.durable.replay import OrchestratorCallable, replay


@dataclass(frozen=True)
class ReplayResult:
    """What one replay returned. ``actions`` is every action since the start, flattened depth-first
    (compound actions before their children), each the SDK's dict plus ``"type"``: CallActivity,
    CallActivityWithRetry, CreateTimer, WaitForExternalEvent, WhenAny, WhenAll, ..."""

    state: OrchestratorState
    # The scheduling actions (CallActivity, CreateTimer, ...) beyond the task ids already in the
    # history that the extension's replay of the actions reaches: what the host would schedule now
    # (``localrun.durable.action_replay``). Waits and compound actions are in ``actions`` only.
    new_actions: list[dict[str, Any]]
    context_json: str
    extension: ActionReplay  # the extension's replay of the actions over the history

    @property
    def actions(self) -> list[dict[str, Any]]:
        return self.state.actions

    @property
    def is_done(self) -> bool:
        return self.state.is_done

    @property
    def output(self) -> Any:
        return self.state.output

    @property
    def custom_status(self) -> Any:
        return self.state.custom_status

    @property
    def error(self) -> str | None:
        return self.state.error

    def action_types(self) -> list[str]:
        return [a["type"] for a in self.actions]

    def new_action_types(self) -> list[str]:
        return [a["type"] for a in self.new_actions]


class History:
    """An orchestration history under construction (one instance, one execution)."""

    def __init__(
        self,
        instance_id: str,
        input: Any = None,
        *,
        start: datetime,
        name: str = "orchestrator",
        fields: ev.ContextFields = ev.AZURE_STORAGE_CONTEXT,
    ) -> None:
        self.instance_id = instance_id
        self.input_json: str | None = None if input is None else json.dumps(input)
        self.fields = fields
        self._now = start
        self._next_task_id = 0
        self._events: list[ev.HistoryEvent] = [
            ev.orchestrator_started(start),
            ev.execution_started(start, name, self.input_json),
        ]

    # --- time -----------------------------------------------------------------------------------

    @property
    def now(self) -> datetime:
        """The current episode's time (the orchestrator's ``current_utc_datetime``)."""
        return self._now

    def new_episode(self, at: datetime) -> History:
        """OrchestratorCompleted, then OrchestratorStarted at ``at``: the orchestrator woke up again."""
        if at < self._now:
            raise ValueError(f"episodes move forward in time: {at.isoformat()} < {self._now.isoformat()}")
        self._events.append(ev.orchestrator_completed(self._now))
        self._events.append(ev.orchestrator_started(at))
        self._now = at
        return self

    def _maybe_new_episode(self, at: datetime | None) -> None:
        if at is not None:
            self.new_episode(at)

    def _take_task_id(self) -> int:
        task_id = self._next_task_id
        self._next_task_id += 1
        return task_id

    # --- activities -----------------------------------------------------------------------------

    def activity_scheduled(self, name: str, input: Any = None) -> int:
        """TaskScheduled only: an activity in flight. Returns its task id."""
        task_id = self._take_task_id()
        self._events.append(ev.task_scheduled(self._now, task_id, name, json.dumps(input)))
        return task_id

    def activity_completed(
        self, name: str, result: Any = None, *, input: Any = None, at: datetime | None = None
    ) -> int:
        """TaskScheduled, then (in a new episode at ``at`` if given) TaskCompleted with ``result``."""
        task_id = self.activity_scheduled(name, input)
        self.complete_activity(task_id, result, at=at)
        return task_id

    def complete_activity(self, task_id: int, result: Any = None, *, at: datetime | None = None) -> History:
        """TaskCompleted for an already scheduled activity (use for out-of-order completions)."""
        self._maybe_new_episode(at)
        self._events.append(ev.task_completed(self._now, task_id, json.dumps(result)))
        return self

    def activity_failed(
        self, name: str, reason: str, details: str = "", *, input: Any = None, at: datetime | None = None
    ) -> int:
        """TaskScheduled, then TaskFailed: the orchestrator sees ``Exception(f"{reason} \\n {details}")``."""
        task_id = self.activity_scheduled(name, input)
        self.fail_activity(task_id, reason, details, at=at)
        return task_id

    def activity_failing(self, name: str, reason: str, delays: Sequence[timedelta]) -> History:
        """An activity that failed, each retry ``delays`` apart (a fired timer between) failing too:
        ``len(delays) + 1`` failures, the last one just recorded."""
        for delay in delays:
            self.activity_failed(name, reason, at=self.now)
            self.timer_fired(self.now + delay)
        self.activity_failed(name, reason, at=self.now)
        return self

    def fail_activity(self, task_id: int, reason: str, details: str = "", *, at: datetime | None = None) -> History:
        self._maybe_new_episode(at)
        self._events.append(ev.task_failed(self._now, task_id, reason, details))
        return self

    # --- timers ---------------------------------------------------------------------------------

    def timer_created_not_fired(self, fire_at: datetime) -> int:
        """TimerCreated only: a timer that is pending (or lost a race). Returns its task id."""
        task_id = self._take_task_id()
        self._events.append(ev.timer_created(self._now, task_id, fire_at))
        return task_id

    def timer_fired(self, fire_at: datetime, *, at: datetime | None = None) -> int:
        """TimerCreated, then TimerFired (see ``fire_timer`` for the episode it lands in)."""
        task_id = self.timer_created_not_fired(fire_at)
        self.fire_timer(task_id, fire_at, at=at)
        return task_id

    def fire_timer(self, task_id: int, fire_at: datetime, *, at: datetime | None = None) -> History:
        """TimerFired for an already created timer: in a new episode at ``at`` if given, else in a new
        episode at ``fire_at`` if the current episode is earlier, else in the current episode."""
        if at is not None:
            self.new_episode(at)
        elif self._now < fire_at:
            self.new_episode(fire_at)
        self._events.append(ev.timer_fired(self._now, task_id, fire_at))
        return self

    # --- external events ------------------------------------------------------------------------

    def event_raised(self, name: str, payload: Any = None, *, at: datetime | None = None) -> History:
        """EventRaised (no task id: events match waits by name), in a new episode at ``at`` if given."""
        self._maybe_new_episode(at)
        self._events.append(ev.event_raised(self._now, name, json.dumps(payload)))
        return self

    # --- output ---------------------------------------------------------------------------------

    @property
    def events(self) -> list[ev.HistoryEvent]:
        return list(self._events)

    @property
    def scheduled_task_count(self) -> int:
        return self._next_task_id

    def context_json(self) -> str:
        return ev.context_json(self.instance_id, self.input_json, self._events, fields=self.fields)

    def play(
        self,
        orchestrator: OrchestratorCallable,
        activity: Callable[[str, Any], Any],
        *,
        moved_to: Callable[[datetime], None] | None = None,
    ) -> Any:
        """Runs ``orchestrator`` to its end, one action at a time: each activity it schedules run by ``activity(name,
        input)`` in the episode that scheduled it (its answer recorded completed; an exception recorded failed, its
        text the reason), each timer fired when due (``moved_to`` told its time first: a clock to move). Its
        output."""
        for _ in range(200):
            result = self.run(orchestrator)
            if result.is_done:
                return result.output
            (action,) = result.new_actions
            if action["type"] == "CreateTimer":
                fire_at = ev.parse_timestamp(action["fireAt"])
                if moved_to is not None:
                    moved_to(fire_at)
                self.timer_fired(fire_at)
                continue
            name, data = action["functionName"], json.loads(action["input"])
            try:
                answer = activity(name, data)
            except Exception as exc:
                self.activity_failed(name, str(exc), input=data, at=self.now)
            else:
                self.activity_completed(name, answer, input=data, at=self.now)
        raise AssertionError("the orchestration never ended")

    def run(self, orchestrator: OrchestratorCallable) -> ReplayResult:
        """Replay ``orchestrator`` (a generator function, or a registered function from
        ``app.get_functions()``) over this history."""
        context = self.context_json()
        state = replay(orchestrator, context)
        scheduling = [a for a in state.actions if a["type"] in SCHEDULING_TYPES]
        maximum = self.fields.maximum_short_timer
        extension = replay_actions(
            state.raw.get("actions", []),
            self._events,
            maximum_timer=None if maximum is None else parse_timespan(maximum),
        )
        return ReplayResult(
            state=state,
            new_actions=scheduling[self._next_task_id : max(self._next_task_id, extension.invoked)],
            context_json=context,
            extension=extension,
        )
