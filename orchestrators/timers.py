"""Cancelling a durable timer so that it no longer holds its instance.

The extension ends an orchestration only when no task is open: a timer neither fired nor cancelled
keeps the instance ``Running`` after its orchestrator returned (``IDurableOrchestrationContext.CreateTimer``'s
remarks; DurableTask.Core ``TaskOrchestrationExecutor``). A timer longer than the storage provider's
maximum (6 days on Azure Storage, e.g. ``REVIEW_TIMEOUT_SECONDS`` over that) is the SDK's
``LongTimerTask``: a chain of timers of at most 3 days, and its ``cancel()`` marks only the long timer,
not the 3-day timer it has pending (Azure/azure-functions-durable-python issue 573), which then holds
the instance for up to 3 days. ``cancel_timer`` cancels that one too."""

from __future__ import annotations

from typing import Any

from azure.durable_functions.models.Task import TimerTask


def cancel_timer(timer: Any) -> None:
    """``timer.cancel()``, and for a long timer, its pending timer as well. Only the cancelled flags of
    actions already scheduled change: nothing new is scheduled, so a replay stays the same."""
    timer.cancel()
    for pending in list(getattr(timer, "pending_tasks", ())):
        if isinstance(pending, TimerTask) and not pending.is_completed:
            pending.cancel()
