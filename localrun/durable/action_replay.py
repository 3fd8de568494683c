"""What the extension makes of the actions an out-of-process orchestrator returns, over its history.
Pure: no clock, no I/O.

The SDK answers with every action it yielded; the extension does not take that list as it is. On every
episode DurableTask.Core replays the orchestration, and the extension's part of it
(``OutOfProcOrchestrationShim.ProcessAsyncActionsV2``, replay schemas V2 and V3) invokes the actions
one after another, awaiting each before it invokes the next; the history's events complete those
awaited tasks in history order (``TaskOrchestrationExecutor.ExecuteCore``). So:

- an action is scheduled only once the replay reaches it: when the task before it is done in the
  extension's view. A when-any is done when one of its children is, a when-all when all are; a timer
  whose action says ``isCanceled`` is cancelled (done) as soon as it is invoked; an external event wait
  is completed by the newest open wait of its name, an event with no open wait is kept (in order) for
  the next wait (``DurableOrchestrationContext.WaitForExternalEvent`` / ``RaiseEvent``, names compared
  case-insensitively). The SDK leaves an already scheduled task out of a when-any's actions (a wait
  loop racing the same timer sends the new wait alone), so the SDK can go on where the extension waits;
- a ``TaskScheduled`` / ``TimerCreated`` of the history must match an action the replay invoked with
  that task id, of the same kind, an activity of the same name (``StringComparison.OrdinalIgnoreCase``;
  inputs and fire times are not compared), or the orchestration fails as non-deterministic
  (``TaskOrchestrationContext.HandleTaskScheduledEvent`` / ``HandleTimerCreatedEvent``);
- the orchestrator's end (output, error, ``ContinueAsNew``) takes effect only when the replay got through
  every action, and then only when no task is open: an activity without its result, a timer neither
  fired nor cancelled.

Not modelled: a new timer the replay reaches more than the storage provider's maximum (6 days) before it
fires. The extension's ``CreateTimer`` splits it itself (a timer at the replay's time plus the 3-day
interval, then more, each a task id the SDK does not know); it happens when the replay reaches a timer
earlier than the SDK made it (the when-any before it done at once in the extension's view: a timer in it
cancelled). ``ActionReplay.unmodelled`` names it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from localrun.durable.actions import COMPOUND_TYPES, SCHEDULING_TYPES, type_name
from localrun.durable.history import EventType, HistoryEvent, parse_timestamp


@dataclass(eq=False)
class _Task:
    kind: str
    task_id: int | None = None
    children: list[_Task] = field(default_factory=list)
    parent: _Task | None = None
    done: bool = False


@dataclass(frozen=True)
class ActionReplay:
    """The extension's replay of one episode's actions over the instance's history."""

    invoked: int  # scheduling actions reached: task ids 0 .. invoked - 1 (the SDK's task ids, in order)
    reached_end: bool  # every action invoked and the last one done: the orchestrator's end takes effect
    open_tasks: bool  # an invoked activity without its result, or an invoked timer neither fired nor cancelled
    cancelled_timers: frozenset[int]  # task ids of the invoked timers whose action says isCanceled
    non_determinism: str | None  # DurableTask.Core's NonDeterministicOrchestrationException, if any
    unmodelled: str | None = None  # what the extension does here that this replay does not model


def replay_actions(
    raw_actions: Iterable[Any], history: Iterable[HistoryEvent], *, maximum_timer: timedelta | None = None
) -> ActionReplay:
    """Replays ``raw_actions`` (the state's ``actions``, as the SDK sent them) over ``history`` (every
    event of the execution, this episode's new ones included), as the extension does. ``maximum_timer``:
    the storage provider's longest timer (the context's ``maximumShortTimerDuration``), if any."""
    return _Replay(_top_level(raw_actions), maximum_timer).run(history)


def parse_timespan(text: str) -> timedelta:
    """A .NET ``TimeSpan`` as the extension writes it in the context: ``[d.]hh:mm:ss[.fffffff]``."""
    head, _, rest = text.partition(":")
    days, _, hours = head.rpartition(".")
    minutes, seconds = rest.split(":")
    return timedelta(days=int(days or 0), hours=int(hours), minutes=int(minutes), seconds=float(seconds))


def _top_level(raw_actions: Iterable[Any]) -> list[Mapping[str, Any]]:
    """V2/V3 send one group holding the actions in yield order; groups are taken one after another."""
    actions: list[Mapping[str, Any]] = []
    for item in raw_actions:
        if isinstance(item, list):
            actions.extend(_top_level(item))
        else:
            actions.append(item)
    return actions


def _signature(kind: str, name: str | None) -> str:
    return f"CallActivity {name}" if kind.startswith("CallActivity") else kind


class _Replay:
    def __init__(self, actions: list[Mapping[str, Any]], maximum_timer: timedelta | None) -> None:
        self._actions = actions
        self._maximum_timer = maximum_timer
        self._now: datetime | None = None  # the replay's current time (the last OrchestratorStarted)
        self._timers_reached: dict[int, tuple[datetime, datetime]] = {}  # task id -> (reached at, fires at)
        self._next_action = 0
        self._awaited: _Task | None = None
        self._next_id = 0
        self._unmatched: dict[int, tuple[str, str | None]] = {}  # invoked, not yet in the history
        self._open: dict[int, _Task] = {}
        self._cancelled: set[int] = set()
        self._waits: dict[str, list[_Task]] = {}  # per event name, newest last
        self._kept: dict[str, deque[None]] = {}  # events no wait took yet, per name

    def run(self, history: Iterable[HistoryEvent]) -> ActionReplay:
        problem: str | None = None
        for event in history:
            problem = self._apply(event)
            if problem is not None:
                break
        reached_end = self._next_action == len(self._actions) and (self._awaited is None or self._awaited.done)
        return ActionReplay(
            invoked=self._next_id,
            reached_end=reached_end,
            open_tasks=bool(self._open),
            cancelled_timers=frozenset(self._cancelled),
            non_determinism=problem,
            unmodelled=None if problem is not None else self._split_by_the_extension(),
        )

    def _split_by_the_extension(self) -> str | None:
        """A new timer (not in the history) reached more than ``maximum_timer`` before it fires."""
        if not self._maximum_timer:  # none, or TimeSpan.Zero: the provider has no maximum
            return None
        for task_id in sorted(self._unmatched):
            reached = self._timers_reached.get(task_id)
            if reached is not None and reached[1] - reached[0] > self._maximum_timer:
                return (
                    f"The local runner does not model the extension splitting timer {task_id} itself: the "
                    f"replay reaches it at {reached[0].isoformat()}, more than {self._maximum_timer} before "
                    f"it fires at {reached[1].isoformat()}."
                )
        return None

    # --- the history, event by event ----------------------------------------------------------

    def _apply(self, event: HistoryEvent) -> str | None:
        kind = event.type
        if kind is EventType.ORCHESTRATOR_STARTED:
            self._now = event.timestamp
        elif kind is EventType.EXECUTION_STARTED:
            self._advance()
        elif kind is EventType.TASK_SCHEDULED:
            return self._match(event.event_id, _signature("CallActivity", event.fields.get("Name")))
        elif kind is EventType.TIMER_CREATED:
            return self._match(event.event_id, "CreateTimer")
        elif kind in (EventType.TASK_COMPLETED, EventType.TASK_FAILED):
            self._complete(self._open.pop(int(event.fields["TaskScheduledId"]), None))
        elif kind is EventType.TIMER_FIRED:
            self._complete(self._open.pop(int(event.fields["TimerId"]), None))
        elif kind is EventType.EVENT_RAISED:
            self._raise(str(event.fields.get("Name", "")))
        return None

    def _match(self, task_id: int, recorded: str) -> str | None:
        invoked = self._unmatched.pop(task_id, None)
        if invoked is None:
            return (
                f"Non-Deterministic workflow detected: task {task_id} is {recorded} in the history, "
                "but the orchestrator no longer asks for it."
            )
        asked = _signature(*invoked)
        if asked.casefold() != recorded.casefold():
            return (
                f"Non-Deterministic workflow detected: task {task_id} is {recorded} in the history, "
                f"but the orchestrator now asks for {asked}."
            )
        return None

    def _raise(self, name: str) -> None:
        key = name.upper()
        waits = self._waits.get(key)
        if waits:
            self._complete(waits.pop())
        else:
            self._kept.setdefault(key, deque()).append(None)

    # --- the extension's await chain ----------------------------------------------------------

    def _advance(self) -> None:
        while self._next_action < len(self._actions) and (self._awaited is None or self._awaited.done):
            action = self._actions[self._next_action]
            self._next_action += 1
            self._awaited = self._invoke(action, None)

    def _invoke(self, action: Mapping[str, Any], parent: _Task | None) -> _Task:
        kind = type_name(action)
        task = _Task(kind, parent=parent)
        if kind in COMPOUND_TYPES:
            task.children = [self._invoke(child, task) for child in action.get("compoundActions", [])]
            task.done = _compound_done(task)
        elif kind in SCHEDULING_TYPES:
            task.task_id = self._next_id
            self._next_id += 1
            self._unmatched[task.task_id] = (kind, action.get("functionName"))
            if kind == "CreateTimer" and action.get("isCanceled"):
                self._cancelled.add(task.task_id)
                task.done = True
            else:
                self._open[task.task_id] = task
                if kind == "CreateTimer" and self._now is not None:
                    self._timers_reached[task.task_id] = (self._now, parse_timestamp(action["fireAt"]))
        elif kind == "WaitForExternalEvent":
            key = str(action.get("externalEventName", "")).upper()
            self._waits.setdefault(key, []).append(task)
            kept = self._kept.get(key)
            if kept:
                kept.popleft()
                self._waits[key].pop()
                task.done = True
        else:  # ContinueAsNew and the fire-and-forget actions: done at once
            task.done = True
        return task

    def _complete(self, task: _Task | None) -> None:
        if task is None or task.done:
            return
        task.done = True
        parent = task.parent
        while parent is not None and not parent.done and _compound_done(parent):
            parent.done = True
            parent = parent.parent
        self._advance()


def _compound_done(task: _Task) -> bool:
    if task.kind == "WhenAny":
        return any(child.done for child in task.children)
    return all(child.done for child in task.children)
