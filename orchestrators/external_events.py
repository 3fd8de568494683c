"""Waiting for an external event more than once under the same name, around a Durable SDK bug.

An ``EventRaised`` that arrives while no wait of its name is open is kept by the SDK
(``DurableOrchestrationContext.deferred_tasks``) and handed to the next ``wait_for_external_event``
of that name, as it should be, but never dropped: every later wait of the name gets the same event
again (azure-functions-durable 1.x, Azure/azure-functions-durable-python issue 507). An agent's
reply that is raised before its step's wait opens (a fast agent answers before the ``begin_step`` that
sent its request has answered), or a duplicate reply, would then answer the next step's wait too,
and a wait loop that skips replies to other requests would spin on it until ``RecursionError``.

``forget_delivered`` drops the kept event once a wait has received it. Call it right after the
``yield`` that a wait of ``name`` took part in: it is orchestrator code (deterministic: replay keeps
and drops the same events at the same points)."""

from __future__ import annotations

import azure.durable_functions as df


def forget_delivered(context: df.DurableOrchestrationContext, name: str) -> None:
    """The event a wait of ``name`` just received, if the SDK kept it for late waits, is not
    handed to any later wait of that name."""
    kept = getattr(context, "deferred_tasks", None)
    if isinstance(kept, dict):
        kept.pop(name, None)
