"""Best-effort termination of expired orchestration instances, after their records are safe.

Fencing already makes a stale attempt harmless (every write it makes checks ``lockedBy``); this
only keeps the task hub clean and stops a stale attempt from sending further agent requests.
Every error is logged and swallowed: a failed terminate changes nothing about the order."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from domain.ids import url_instance_id
from observability.events import app_event

# Runtime statuses (``OrchestrationRuntimeStatus`` names) of an instance that may still act. ContinuedAsNew
# is the transient status between an execution's ``continue_as_new`` and the new execution's first episode
# (Azure Storage reports it; durable-functions-instance-management): its new execution still runs.
STILL_ACTIVE = frozenset({"Running", "Pending", "Suspended", "ContinuedAsNew"})
TERMINATE_REASON = "deadline missed; the supervisor recovered the order"


class InstanceClient(Protocol):
    """The part of ``DurableOrchestrationClient`` the supervisor uses."""

    async def get_status(self, instance_id: str) -> Any: ...

    async def terminate(self, instance_id: str, reason: str) -> None: ...


def _status_name(status: Any) -> str | None:
    runtime = getattr(status, "runtime_status", None)
    if runtime is None:
        return None
    return str(getattr(runtime, "name", runtime))


async def terminate_expired(client: InstanceClient, instance_ids: list[str]) -> list[str]:
    """Terminates each instance that is still active; returns the ids it terminated."""
    terminated: list[str] = []
    for instance in instance_ids:
        try:
            status = _status_name(await client.get_status(url_instance_id(instance)))
            if status not in STILL_ACTIVE:
                app_event(
                    "SupervisorTerminateSkipped",
                    f"instance {instance} is {status or 'unknown'}: nothing to terminate",
                    instanceId=instance,
                    runtimeStatus=status,
                )
                continue
            await client.terminate(url_instance_id(instance), TERMINATE_REASON)
        except Exception as exc:
            app_event(
                "SupervisorTerminateFailed",
                f"could not terminate {instance} (harmless: its writes are fenced): {exc}",
                logging.WARNING,
                instanceId=instance,
            )
            continue
        terminated.append(instance)
        app_event("SupervisorTerminated", f"terminated expired instance {instance}", instanceId=instance)
    return terminated
