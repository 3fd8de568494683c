"""The ``TypedData`` the Functions host sends for each trigger and input binding this app uses, and
how it reads a return value. Service Bus messages are encoded in ``localrun.servicebus.wire``."""

from __future__ import annotations

import json
from datetime import datetime
from types import ModuleType
from typing import Any

from localrun.durable.history import timestamp_text


def timer_data(protos: ModuleType, *, last: datetime | None, next_fire: datetime, past_due: bool) -> Any:
    """What the timer extension sends (``TimerInfo`` as JSON; ``azure.functions.TimerRequest`` reads it)."""
    status = {"Last": timestamp_text(last) if last else "0001-01-01T00:00:00", "Next": timestamp_text(next_fire)}
    body = {"Schedule": {"AdjustForDST": True}, "ScheduleStatus": status, "IsPastDue": past_due}
    return protos.TypedData(json=json.dumps(body))


def activity_input(protos: ModuleType, input_json: str | None) -> Any:
    """The Durable extension passes an activity its input as the JSON the orchestrator scheduled."""
    return protos.TypedData(json=input_json if input_json is not None else "null")


def orchestration_context(protos: ModuleType, context_json: str) -> Any:
    """The orchestration trigger receives the context (history, input, instance id) as a JSON string."""
    return protos.TypedData(string=context_json)


def durable_client(protos: ModuleType, binding_json: str) -> Any:
    """A ``durableClient`` input binding is the extension's client settings as a JSON string."""
    return protos.TypedData(string=binding_json)


def return_text(data: Any) -> str | None:
    """A return value's text, for the bindings whose return is JSON (activities, orchestrators)."""
    if data is None:
        return None
    kind = data.WhichOneof("data")
    if kind in ("json", "string"):
        return str(getattr(data, kind))
    if kind is None:
        return None
    raise ValueError(f"unexpected return value type {kind!r}")
