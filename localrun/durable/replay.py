"""One replay of an orchestrator over a history, through the Durable SDK's own engine, exactly as the
host invokes the worker: the registered function receives the context JSON and returns state JSON."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from localrun.durable.actions import OrchestratorState, parse_state, state_from_orchestrator_exception

# Either the registered function (the SDK's ``handle`` wrapper taking the context JSON string) or a
# plain orchestrator generator function, which is wrapped in ``Orchestrator(fn)`` here.
OrchestratorCallable = Callable[..., Any]


def replay(orchestrator: OrchestratorCallable, context: str) -> OrchestratorState:
    """Run one episode. An orchestrator that raised comes back as a state with ``error`` set."""
    try:
        state_json = _invoke(orchestrator, context)
    except Exception as error:
        state = state_from_orchestrator_exception(error)
        if state is None:
            raise
        return state
    return parse_state(state_json)


def _invoke(orchestrator: OrchestratorCallable, context: str) -> str:
    if inspect.isgeneratorfunction(orchestrator):
        import azure.durable_functions as df

        handle = df.Orchestrator.create(orchestrator)
        return str(handle(context))
    return str(orchestrator(context))
