"""Finding the orchestrator functions an app registered, as the host does from their bindings.

Pass the list from ``app.get_functions()``: call that once per app and share it, because a second
call raises ``ValueError`` ("... does not have a unique function name") in azure-functions 1.26."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from localrun.durable.replay import OrchestratorCallable

ORCHESTRATION_TRIGGER = "orchestrationTrigger"


def registered_orchestrators(functions: Iterable[Any]) -> dict[str, OrchestratorCallable]:
    """Function name -> the registered function (the SDK's handle taking the context JSON string),
    for every function (``azure.functions.Function``) with an orchestration trigger."""
    found: dict[str, OrchestratorCallable] = {}
    for function in functions:
        if any(binding.type == ORCHESTRATION_TRIGGER for binding in function.get_bindings()):
            found[function.get_function_name()] = function.get_user_function()
    return found
