"""Retired orchestrator versions: what an instance of an earlier scheduler version does when it
replays after an upgrade.

Its history was recorded by code that no longer exists, so it cannot be replayed step by step. It
settles what it left and ends: a record it still holds is released to the supervisor at once
(``completeBy`` = now), which retries the order under the current version on its next run, like any
attempt that stopped; an order it had already written ``Processed`` gets its ``Completed`` status
(the old version sent it after that write). An upgrade costs each order caught mid-attempt one
counted retry; disabling the two functions that claim and letting in-flight attempts finish first
avoids that (docs/design.md "Versions")."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import azure.durable_functions as df

from contracts.activities import SettleRetiredInput, parse_retired_settled
from orchestrators import names
from orchestrators.result import OrchestrationResult, orchestration_result
from orchestrators.state_activity import call_state_activity
from orchestrators.status import call_publish_status

# The input key that marks the new execution of a retired instance (after ``continue_as_new``).
RETIRING = "retiring"


def retire(context: df.DurableOrchestrationContext, version: str) -> Generator[Any, Any, OrchestrationResult]:
    """Settles an instance of the retired ``version`` and ends it with ``Superseded``.

    Its recorded history belongs to the old code: any task scheduled here would be matched against it
    (the extension reports a non-deterministic workflow). So the first replay only continues the
    instance as new, with a marked input and an empty history; that run settles (one activity)."""
    started = context.get_input() or {}
    if not started.get(RETIRING):
        context.continue_as_new({**started, RETIRING: True})
        return orchestration_result("Superseded", version=version)
    order_id, attempt = str(started.get("orderId", "")), int(started.get("attempt", 0))
    settle = SettleRetiredInput(order_id=order_id, instance_id=context.instance_id, attempt=attempt)
    answer = yield from call_state_activity(context, names.SETTLE_RETIRED_ATTEMPT, settle.to_json())
    settled = parse_retired_settled(answer)
    if settled.completed_status is False:  # its one try failed: a final status is retried on durable timers
        yield from call_publish_status(context, order_id, "Completed", attempt)
    return orchestration_result("Superseded", version=version, released=settled.released)
