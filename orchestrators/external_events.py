"""Waiting for external events that may arrive before their wait opens, around two Durable SDK behaviours.

An ``EventRaised`` that arrives while no wait of its name is open is kept by the SDK
(``DurableOrchestrationContext.deferred_tasks``, azure-functions-durable 1.x) and handed to the next
``wait_for_external_event`` of that name. Two things go wrong with it as shipped:

- it keeps ONE event per name: a second early event of the name overwrites the first. An agent's reply
  raised before the completion of the ``begin_step`` that sent its request, then a re-raised copy of the
  previous step's reply in the same gap, left the wait with the copy: skipped, and the real reply was
  gone (the step timed out though its agent answered). ``keep_early_events`` replaces that storage, at
  the orchestration's start, with ``EarlyEvents``: a queue per name, so every early event of a name is
  kept, in the order the history holds them, and each wait takes the oldest one not yet taken;
- a wait that lost to its timer stays open: the next event of its name completes it, unseen, instead
  of being kept for the wait that follows (an operator's early answer to an attempt's second review
  went to its first review's abandoned wait, and the second waited out its whole timeout).
  ``abandon_wait``, called when the timer wins, closes it;
- it never drops a kept event: every later wait of the name gets the same event again
  (Azure/azure-functions-durable-python issue 507), and a wait loop that skips replies to other requests
  would spin on it until ``RecursionError``. ``forget_delivered``, called right after the ``yield`` a
  wait of the name took part in, takes the event that wait received off its queue (the next early one,
  if any, is what the next wait receives).

Both are orchestrator code over what the SDK replays: the queues are rebuilt from the history on every
replay, in history order, and taken from at the same points, so replay is deterministic. Until two
events of one name wait at once, a queue behaves exactly as the SDK's one slot did: a history recorded
before the queues replays to the same actions (docs/design.md, "Scheduler")."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import azure.durable_functions as df

# What the SDK keeps for an early event: a call that completes the wait it is handed to.
Deliver = Callable[[], Any]


class EarlyEvents(dict[Any, Deliver]):
    """``DurableOrchestrationContext.deferred_tasks`` with a queue per event name (a ``str`` key).

    The dict itself holds, for a name, the OLDEST early event not yet taken (what the SDK reads and hands
    to the next wait: ``name in kept``, ``kept[name]``); the later ones wait in ``_later``, in arrival
    order. Storing under a name that holds one already queues the new one instead of replacing it;
    ``pop(name)`` takes the oldest and brings the next one forward. Other keys (the SDK keeps a duplicate
    task completion under its task id, an ``int``) keep plain dict behaviour."""

    def __init__(self, kept: Mapping[Any, Deliver] | None = None) -> None:
        super().__init__()
        self._later: dict[str, list[Deliver]] = {}
        for key, deliver in (kept or {}).items():
            self[key] = deliver

    def __setitem__(self, key: Any, deliver: Deliver) -> None:
        if isinstance(key, str) and key in self:
            self._later.setdefault(key, []).append(deliver)
            return
        super().__setitem__(key, deliver)

    def __delitem__(self, key: Any) -> None:
        self.pop(key)

    def pop(self, key: Any, *default: Any) -> Any:
        """Takes the oldest event kept under ``key`` (the next one, if any, is now the oldest)."""
        if key not in self:
            return super().pop(key, *default)
        taken = super().pop(key)
        later = self._later.get(key)
        if later:
            super().__setitem__(key, later.pop(0))
            if not later:
                del self._later[key]
        return taken

    def waiting(self, name: str) -> int:
        """How many early events of ``name`` no wait has taken yet."""
        return (1 if name in self else 0) + len(self._later.get(name, ()))


def keep_early_events(context: df.DurableOrchestrationContext) -> None:
    """Every early event is kept, per name in history order (``EarlyEvents``). Call it first in an
    orchestration that waits for events, before its first ``yield``: its body starts at the history's
    ``ExecutionStarted``, before any ``EventRaised`` is replayed. Calling it again changes nothing."""
    kept = getattr(context, "deferred_tasks", None)
    if isinstance(kept, dict) and not isinstance(kept, EarlyEvents):
        context.deferred_tasks = EarlyEvents(kept)


def forget_delivered(context: df.DurableOrchestrationContext, name: str) -> None:
    """The event a wait of ``name`` just received, if it was an early one kept for it, is taken off the
    name's queue: no later wait of that name gets it again, and the next early one is handed to the
    next wait. Nothing is taken when the wait was answered by a live event or lost to its timer (no
    early event of its name was waiting when it opened, or it would have received it)."""
    kept = getattr(context, "deferred_tasks", None)
    if isinstance(kept, dict):
        kept.pop(name, None)


def abandon_wait(context: df.DurableOrchestrationContext, name: str, wait: Any) -> None:
    """``wait`` (a ``wait_for_external_event`` of ``name``) lost to its timer and nobody will read it:
    it is taken out of the SDK's open tasks, so the next event of ``name`` is kept for the next wait
    (``EarlyEvents``) instead of completing this one. The same on every replay (the timer wins at the
    same point)."""
    open_tasks = getattr(context, "open_tasks", None)
    if not isinstance(open_tasks, dict) or name not in open_tasks:
        return
    waiting = open_tasks[name]
    if isinstance(waiting, list):
        if wait in waiting:
            waiting.remove(wait)
        if not waiting:
            del open_tasks[name]
    elif waiting is wait:
        del open_tasks[name]
