"""Calling a state activity (a fenced write, which may also send an agent request or a status) with a
short retry on durable timers.

These activities fail only when Cosmos DB or Service Bus is unavailable beyond the SDKs' own
retries (or on a bug). Without a retry here one such blip would end the whole attempt and cost
the order one of its ``MAX_FAILURES`` supervisor retries. Retrying is safe: each fenced write
re-checks ownership and is idempotent, and a re-sent agent request has the same MessageId, so
Service Bus duplicate detection collapses it (it never becomes a second call to a remote
service). Agents themselves are never retried here: they retry inside their own deadline."""

from __future__ import annotations

from collections.abc import Generator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

from orchestrators.status import FINAL_RETRY_DELAYS

RETRY_DELAYS = (timedelta(seconds=2), timedelta(seconds=10))
# The write that ends an order well (``Processed``, ``Compensated``) is retried as long as a final status
# (about six hours): once it lands the record is terminal, so no supervisor will ever look at it again,
# and if its first try landed unanswered only a later try's answer (the hand-over, found done) leads to
# the submitter's final status. Retrying is safe: it is fenced and idempotent. When every try failed, the
# orchestration alerts ``HandOverUnconfirmed`` before it fails (``orchestrators.fenced.hand_over``).
HAND_OVER_RETRY_DELAYS = FINAL_RETRY_DELAYS


def call_state_activity(
    context: df.DurableOrchestrationContext,
    name: str,
    data: Any,
    delays: tuple[timedelta, ...] = RETRY_DELAYS,
) -> Generator[Any, Any, Any]:
    """``yield from call_state_activity(context, name, data)``: the activity's result; its error
    once every retry (``delays`` apart) failed (the orchestration then fails and the supervisor
    recovers the order)."""
    for delay in (*delays, None):
        try:
            return (yield context.call_activity(name, data))
        except Exception:
            if delay is None:
                raise
            yield context.create_timer(context.current_utc_datetime + delay)
    raise AssertionError("unreachable")
