"""Best-effort termination of expired orchestration instances, after their records are safe.

Fencing already makes a stale attempt harmless (every write it makes checks ``lockedBy``); this
only keeps the task hub clean and stops a stale attempt from sending further agent requests.
Every error is logged and swallowed: a failed terminate changes nothing about the order. The run's terminations
come after its starts and run ``PARALLEL_CALLS`` at a time within ``TERMINATE_BUDGET`` (``adapters.durable_client
.each_within``): one left is harmless, as a failed one."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any, Protocol

from adapters.durable_client import CallBudget, each_within
from domain.ids import url_instance_id
from observability.events import app_event
from orchestrators.raise_events import read_status

# Runtime statuses (``OrchestrationRuntimeStatus`` names) of an instance that may still act. ContinuedAsNew
# is the transient status between an execution's ``continue_as_new`` and the new execution's first episode
# (Azure Storage reports it; durable-functions-instance-management): its new execution still runs.
STILL_ACTIVE = frozenset({"Running", "Pending", "Suspended", "ContinuedAsNew"})
TERMINATE_REASON = "deadline missed; the supervisor recovered the order"
# The time a run gives its terminations (a status read and a terminate each): the supervisor's default cadence.
TERMINATE_BUDGET = timedelta(seconds=30)


class InstanceClient(Protocol):
    """The part of ``DurableOrchestrationClient`` the supervisor uses."""

    async def get_status(
        self, instance_id: str, show_history: bool = False, show_history_output: bool = False, show_input: bool = False
    ) -> Any: ...

    async def terminate(self, instance_id: str, reason: str) -> None: ...


def _status_name(status: Any) -> str | None:
    runtime = getattr(status, "runtime_status", None)
    if runtime is None:
        return None
    return str(getattr(runtime, "name", runtime))


async def terminate_expired(
    client: InstanceClient, instance_ids: list[str], length: timedelta = TERMINATE_BUDGET
) -> list[str]:
    """Terminates each instance that is still active, within ``length`` (``TERMINATE_BUDGET``, or what is left of
    the run's budget if less; one wave at least); returns the ids it terminated."""
    terminated: list[str] = []
    budget = CallBudget(min(length, TERMINATE_BUDGET))

    async def terminate(instance: str) -> bool:
        try:
            status = _status_name(await read_status(client, instance))
            if status not in STILL_ACTIVE:
                app_event(
                    "SupervisorTerminateSkipped",
                    f"instance {instance} is {status or 'unknown'}: nothing to terminate",
                    instanceId=instance,
                    runtimeStatus=status,
                )
                return True
            if not budget.fits():
                return False
            await client.terminate(url_instance_id(instance), TERMINATE_REASON)
        except Exception as exc:
            app_event(
                "SupervisorTerminateFailed",
                f"could not terminate {instance} (harmless: its writes are fenced): {exc}",
                logging.WARNING,
                instanceId=instance,
            )
            return True
        terminated.append(instance)
        app_event("SupervisorTerminated", f"terminated expired instance {instance}", instanceId=instance)
        return True

    await each_within("terminations", instance_ids, terminate, budget)
    return terminated
