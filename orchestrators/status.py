"""Telling the submitter: status updates are sent by an activity after the fenced write that
made them true, never inside it. A failed send then cannot fail or undo the write; the
orchestration retries it on durable timers (the MessageId, order + status + attempt, collapses
any repeat) and, if Service Bus stays unreachable, gives up and records why in its output."""

from __future__ import annotations

from collections.abc import Generator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

from orchestrators import names

RETRY_DELAYS = (timedelta(seconds=5), timedelta(seconds=30), timedelta(minutes=2))


def tell_submitter(
    context: df.DurableOrchestrationContext,
    order_id: str,
    status: str,
    attempt: int,
    reason: Any = None,
    *,
    plan: dict[str, Any] | None = None,
) -> Generator[Any, Any, bool]:
    """Sends one status update; True once sent (or there is no reply queue), False if every try
    failed. ``plan`` is the load activity's result: its ``replyTo`` (the record's) saves the
    activity a read, and an order submitted without one costs no activity at all."""
    payload: dict[str, Any] = {"orderId": order_id, "status": status, "attempt": attempt}
    if plan is not None and "replyTo" in plan:
        if plan["replyTo"] is None:
            return True
        payload["replyTo"] = plan["replyTo"]
    if reason is not None:
        payload["reason"] = str(reason)[:500]
    for delay in (*RETRY_DELAYS, None):
        try:
            yield context.call_activity(names.PUBLISH_STATUS, payload)
            return True
        except Exception:
            if delay is None:
                return False
            yield context.create_timer(context.current_utc_datetime + delay)
    return False
