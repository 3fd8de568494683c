"""Cancelling a durable timer so that it no longer holds its instance; the timer a wait loop's next
round races (``next_round_timer``).

The extension ends an orchestration only when no task is open: a timer neither fired nor cancelled
keeps the instance ``Running`` after its orchestrator returned (``IDurableOrchestrationContext.CreateTimer``'s
remarks; DurableTask.Core ``TaskOrchestrationExecutor``). A timer longer than the storage provider's
maximum (6 days on Azure Storage, e.g. ``REVIEW_TIMEOUT_SECONDS`` over that) is the SDK's
``LongTimerTask``: a chain of timers of at most 3 days, and its ``cancel()`` marks only the long timer,
not the 3-day timer it has pending (Azure/azure-functions-durable-python issue 573), which then holds
the instance for up to 3 days. ``cancel_timer`` cancels that one too."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from azure.durable_functions.models.Task import TimerTask

# The input key of the compensation rounds started since a wait loop's round after a skipped event races
# a timer of its own (``next_round_timer``; the scheduler's is ``AttemptInput.timer_per_round``); an
# instance whose input lacks it replays with the one timer its history holds.
TIMER_PER_ROUND_INPUT = "timerPerRound"
# The input key of the compensation rounds started since a round holds its record through the backoff after an
# undo's transient failure (``hold_undo``, a fenced write before the timer); an instance whose input lacks it
# replays with the timer alone, as its history holds.
HOLDS_BACKOFF_INPUT = "holdsBackoff"
# The input key of the compensation rounds started since a round whose undo meets an open circuit releases its record
# to the supervisor at once (``release_undo``, a fenced write before it ends); an instance whose input lacks it ends
# without a write, as its history holds, and the supervisor takes it once the undo's deadline passed.
RELEASES_OPEN_CIRCUIT_INPUT = "releasesOpenCircuit"
# The input key of the attempts and compensation rounds started since a step's (an undo's) deadline is its
# ``begin_step``'s (``begin_undo``'s) time plus the timeout, answered by the activity; an instance whose input lacks
# it keeps its replay time plus the timeout, the deadline its timers were created with (``AttemptInput`` reads it
# for the scheduler).
DEADLINE_AT_BEGIN_INPUT = "deadlineAtBegin"


def cancel_timer(timer: Any, *, context: Any = None) -> None:
    """``timer.cancel()``, and for a long timer, its pending timer as well. Only the cancelled flags of
    actions already scheduled change: nothing new is scheduled, so a replay stays the same.

    With ``context`` (instances started with ``timerPerRound``), the cancelled timers are also taken out
    of the SDK's open tasks, as DurableTask.Core takes a cancelled timer out of its own: Azure still
    delivers the ``TimerFired`` of a cancelled timer to an instance that runs on, and the SDK, not the
    extension, read it. For a long timer's pending timer that was the worst case: the ``LongTimerTask``
    took it as its next interval and scheduled another timer, uncancelled, up to the long timer's end,
    which the extension, replaying the actions one by one, waited on before anything the orchestrator
    did after it (an attempt's second review, answered, handed over days later). Taken out, the SDK
    logs the ``TimerFired`` as a duplicate completion and keeps it under the task id, which no later
    task has. Without ``context`` (an instance started before), the timer stays open in the SDK, as its
    history was recorded."""
    timer.cancel()
    cancelled: list[TimerTask] = [timer] if isinstance(timer, TimerTask) else []
    for pending in list(getattr(timer, "pending_tasks", ())):
        if isinstance(pending, TimerTask) and not pending.is_completed:
            pending.cancel()
            cancelled.append(pending)
    open_tasks = getattr(context, "open_tasks", None)
    if isinstance(open_tasks, dict):
        for task in cancelled:
            task_id = task.id
            if open_tasks.get(task_id) is task:
                del open_tasks[task_id]


def next_round_timer(context: Any, timers: list[Any], deadline: datetime, *, timer_per_round: bool) -> Any:
    """The timer the next round of a wait loop races (an event skipped, a new wait until the same
    deadline); ``timers`` holds the loop's timers, the first round's first. The SDK leaves a task it
    already scheduled out of a when-any's actions, and the extension replays the actions one after
    another (``OutOfProcOrchestrationShim``): a next round racing the same timer is, for the extension,
    the new wait alone, so when the timer wins, the orchestrator goes on and the extension waits for an
    event, scheduling nothing after it (an attempt left Running for good, a review never closed). With
    ``timer_per_round`` the round gets a timer of its own (the deadline's), added to ``timers``. The
    earlier ones stay until the loop ends (``cancel_open_timers``): one cancelled now would make the
    extension's replay go through its round at once and reach the new timer from the first round's
    time, and the extension splits a timer more than 6 days from then itself (a review over 6 days:
    other task ids than the SDK's). Without it (an instance started before: its history holds no
    such timer), the same timer, as before."""
    if timer_per_round:
        timers.append(context.create_timer(deadline))
    return timers[-1]


def cancel_open_timers(timers: list[Any], *, context: Any = None) -> None:
    """``cancel_timer`` for each of a wait loop's timers not yet fired: the loop is over."""
    for timer in timers:
        if not timer.is_completed:
            cancel_timer(timer, context=context)
