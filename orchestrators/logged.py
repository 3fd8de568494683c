"""Events an orchestration logs itself: once, when its code first runs past the point, never again while the
instance replays that point (``context.is_replaying``). The one module of orchestrator code that logs
(tests/orchestrators/test_orchestrator_rules.py): an event here must be one no activity can log for it (the
activity did not run, or died before it could). An episode whose commit is lost runs again unreplayed and logs
it again: at least once, never silently none."""

from __future__ import annotations

import logging
from typing import Any

import azure.durable_functions as df

from observability.events import app_event


def log_error_once(context: df.DurableOrchestrationContext, name: str, message: str, **fields: Any) -> None:
    """Logs the event ``name`` (ERROR, ``observability.events.app_event``, with the instance's id) unless the instance
    is replaying: the code past this point ran before, and logged it then."""
    if context.is_replaying:
        return
    app_event(name, message, logging.ERROR, instanceId=context.instance_id, **fields)
