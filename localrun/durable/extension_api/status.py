"""What the status query answers for one instance: ``StatusResponsePayload`` built from the engine's
``Instance`` (``HttpApiHandler.ConvertFrom``), and the history as ``DurableClient.GetStatusAsync``
shows it with ``showHistory`` (event types by name, each activity's completion merged with its
scheduling, orchestrator-episode markers left out)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from azure.durable_functions import OrchestrationRuntimeStatus

from localrun.durable.history import EventType, HistoryEvent
from localrun.durable.instance import Instance

# The runtime statuses the status query answers with 202 and a Location header (still running).
IN_PROGRESS = frozenset(
    {
        OrchestrationRuntimeStatus.Running,
        OrchestrationRuntimeStatus.Pending,
        OrchestrationRuntimeStatus.ContinuedAsNew,
        OrchestrationRuntimeStatus.Suspended,
    }
)
_COMPLETIONS = (EventType.TASK_COMPLETED, EventType.TASK_FAILED)
_EPISODE_MARKERS = (EventType.ORCHESTRATOR_STARTED, EventType.ORCHESTRATOR_COMPLETED)


def status_time(moment: datetime) -> str:
    """``DateTime.ToString("s") + "Z"``: whole seconds, UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_token(text: str | None) -> Any:
    """``DurableClient.ParseToJToken``: JSON if it parses, else the raw (trimmed) text."""
    if text is None:
        return None
    text = text.strip()
    try:
        return json.loads(text) if text else ""
    except ValueError:
        return text


def status_payload(instance: Instance, *, show_input: bool, history: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The status body. The stored input is the start request's body, a JSON string token (the
    SDK posts ``df_dumps(input)`` as JSON), so the input comes back as that JSON *text*, as the
    real client sees it; output and custom status come back as JSON values."""
    payload: dict[str, Any] = {
        "name": instance.name,
        "instanceId": instance.instance_id,
        "runtimeStatus": instance.status.value,
        "input": instance.input_json if show_input else None,
        "customStatus": instance.custom_status,
        "output": instance.output,
        "createdTime": status_time(instance.created),
        "lastUpdatedTime": status_time(instance.last_updated),
    }
    if history is not None:  # DataMember(EmitDefaultValue = false): absent unless asked for
        payload["historyEvents"] = history
    return payload


def _type_name(kind: EventType) -> str:
    return "".join(part.capitalize() for part in kind.name.split("_"))


def history_events(events: list[HistoryEvent], *, show_input: bool, show_output: bool) -> list[dict[str, Any]]:
    scheduled: dict[int, tuple[int, dict[str, Any]]] = {}  # task id -> (index, TaskScheduled item)
    dropped: set[int] = set()
    items: list[dict[str, Any]] = []
    for index, event in enumerate(events):
        item = event.to_json(is_played=False)
        item["EventType"] = _type_name(event.type)
        if event.type is EventType.TASK_SCHEDULED:
            item.pop("Version", None)
            scheduled[event.event_id] = (index, dict(item))
        elif event.type in _COMPLETIONS:
            origin = scheduled.get(item.pop("TaskScheduledId"))
            if origin is not None:
                origin_index, origin_item = origin
                item["ScheduledTime"] = origin_item["Timestamp"]
                item["FunctionName"] = origin_item["Name"]
                if show_input:
                    item["Input"] = origin_item.get("Input")
                dropped.add(origin_index)
            if event.type is EventType.TASK_COMPLETED:
                _show_result(item, show_output)
        elif event.type is EventType.EXECUTION_STARTED:
            item["FunctionName"] = item.pop("Name")
            for key in ("OrchestrationInstance", "ParentInstance", "Version", "Tags"):
                item.pop(key, None)
        elif event.type is EventType.EXECUTION_COMPLETED:
            _show_result(item, show_output)
        elif event.type is EventType.TIMER_FIRED:
            item.pop("TimerId", None)
        elif event.type in _EPISODE_MARKERS:
            dropped.add(index)
        if not show_input:
            item.pop("Input", None)
        del item["EventId"], item["IsPlayed"]
        items.append(item)
    return [item for index, item in enumerate(items) if index not in dropped]


def _show_result(item: dict[str, Any], show_output: bool) -> None:
    if show_output:
        item["Result"] = parse_token(item.get("Result"))
    else:
        item.pop("Result", None)
