"""History events and the orchestration context JSON, in the wire shape the Durable extension sends
to the Python worker (checked against azure-functions-durable 1.7.0). Pure: no clock, no I/O."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import IntEnum
from functools import cached_property
from typing import Any

TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


@dataclass(frozen=True)
class ContextFields:
    """What the extension puts in every orchestration context beside the history and the instance
    (``OrchestrationTriggerAttributeBindingProvider.OrchestrationContextToString`` in
    Azure/azure-functions-durable-extension): the replay schemas it speaks, ``upperSchemaVersion`` V2
    (1) for SDKs 1.1.0-1.1.3 and ``upperSchemaVersionNew`` V3 (2), which azure-functions-durable 1.7
    takes; and its storage provider's timer limits as .NET ``TimeSpan`` text. On V3 with both limits
    set, the SDK splits a timer longer than ``maximum_short_timer`` into timers of at most
    ``long_timer_interval`` (``LongTimerTask``): more ``TimerCreated``/``TimerFired`` events and task
    ids than one timer, the history an orchestrator replays in Azure."""

    upper_schema_version: int = 1
    upper_schema_version_new: int | None = 2
    long_timer_interval: str | None = "3.00:00:00"
    maximum_short_timer: str | None = "6.00:00:00"
    http_async_sleep_ms: int = 30_000  # HttpOptions.DefaultAsyncRequestSleepTimeMilliseconds


# The Azure Storage provider (the app's default backend, host.json): AzureStorageDurabilityProvider's
# MaximumDelayTime (6 days) and LongRunningTimerIntervalLength (3 days). The Durable Task Scheduler's
# provider leaves both at TimeSpan.Zero ("00:00:00"), which the SDK reads as "no split".
AZURE_STORAGE_CONTEXT = ContextFields()
# What the runner sent before it sent the extension's fields: schema V2 only, no timer limits.
SCHEMA_V2_ONLY_CONTEXT = ContextFields(
    upper_schema_version_new=None, long_timer_interval=None, maximum_short_timer=None
)


class EventType(IntEnum):
    EXECUTION_STARTED = 0
    EXECUTION_COMPLETED = 1
    EXECUTION_FAILED = 2
    EXECUTION_TERMINATED = 3
    TASK_SCHEDULED = 4
    TASK_COMPLETED = 5
    TASK_FAILED = 6
    TIMER_CREATED = 10
    TIMER_FIRED = 11
    ORCHESTRATOR_STARTED = 12
    ORCHESTRATOR_COMPLETED = 13
    EVENT_RAISED = 15


def timestamp_text(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("history timestamps must be timezone-aware (UTC)")
    return moment.astimezone(UTC).strftime(TIMESTAMP_FORMAT)


def parse_timestamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


@dataclass(frozen=True)
class HistoryEvent:
    """One event. ``event_id`` is the task id for TaskScheduled/TimerCreated and -1 otherwise."""

    type: EventType
    timestamp: datetime
    event_id: int = -1
    fields: dict[str, Any] = field(default_factory=dict)

    def to_json(self, *, is_played: bool) -> dict[str, Any]:
        return {
            "EventType": int(self.type),
            "EventId": self.event_id,
            "IsPlayed": is_played,
            "Timestamp": timestamp_text(self.timestamp),
            **self.fields,
        }

    @cached_property
    def _json_texts(self) -> tuple[str, str]:
        """``to_json`` encoded, as (not played, played): an event is encoded once, not once per
        replay of its history (an event never changes after it is appended)."""
        return json.dumps(self.to_json(is_played=False)), json.dumps(self.to_json(is_played=True))

    def json_text(self, *, is_played: bool) -> str:
        return self._json_texts[is_played]

    def forget_json_texts(self) -> None:
        """Drops the cached encodings (an instance that finished is not replayed again; encoded on
        demand if something asks): a finished order's history then costs its events, not three
        copies of them."""
        self.__dict__.pop("_json_texts", None)


def orchestrator_started(at: datetime) -> HistoryEvent:
    return HistoryEvent(EventType.ORCHESTRATOR_STARTED, at)


def orchestrator_completed(at: datetime) -> HistoryEvent:
    return HistoryEvent(EventType.ORCHESTRATOR_COMPLETED, at)


def execution_started(at: datetime, name: str, input_json: str | None) -> HistoryEvent:
    return HistoryEvent(EventType.EXECUTION_STARTED, at, fields={"Name": name, "Version": "", "Input": input_json})


def task_scheduled(at: datetime, task_id: int, name: str, input_json: str | None) -> HistoryEvent:
    return HistoryEvent(EventType.TASK_SCHEDULED, at, task_id, {"Name": name, "Input": input_json})


def task_completed(at: datetime, task_id: int, result_json: str | None) -> HistoryEvent:
    return HistoryEvent(EventType.TASK_COMPLETED, at, fields={"TaskScheduledId": task_id, "Result": result_json})


def task_failed(at: datetime, task_id: int, reason: str, details: str = "") -> HistoryEvent:
    return HistoryEvent(
        EventType.TASK_FAILED, at, fields={"TaskScheduledId": task_id, "Reason": reason, "Details": details}
    )


def timer_created(at: datetime, task_id: int, fire_at: datetime) -> HistoryEvent:
    return HistoryEvent(EventType.TIMER_CREATED, at, task_id, {"FireAt": timestamp_text(fire_at)})


def timer_fired(at: datetime, task_id: int, fire_at: datetime) -> HistoryEvent:
    return HistoryEvent(EventType.TIMER_FIRED, at, fields={"TimerId": task_id, "FireAt": timestamp_text(fire_at)})


def event_raised(at: datetime, name: str, input_json: str | None) -> HistoryEvent:
    return HistoryEvent(EventType.EVENT_RAISED, at, fields={"Name": name, "Input": input_json})


def execution_terminated(at: datetime, reason: str) -> HistoryEvent:
    return HistoryEvent(EventType.EXECUTION_TERMINATED, at, fields={"Input": json.dumps(reason)})


def played_boundary(events: list[HistoryEvent]) -> int:
    """Index of the last OrchestratorStarted: events before it were played in earlier episodes."""
    starts = [i for i, e in enumerate(events) if e.type is EventType.ORCHESTRATOR_STARTED]
    return starts[-1] if starts else 0


def context_json(
    instance_id: str,
    input_json: str | None,
    events: list[HistoryEvent],
    *,
    fields: ContextFields = AZURE_STORAGE_CONTEXT,
) -> str:
    """The string an orchestrator function receives (``DurableOrchestrationContext.from_json``):
    exactly ``json.dumps`` of the context object, with each event's JSON text reused."""
    boundary = played_boundary(events)
    history = ", ".join(e.json_text(is_played=i < boundary) for i, e in enumerate(events))
    context: dict[str, Any] = {
        "instanceId": instance_id,
        "isReplaying": boundary > 0,
        "parentInstanceId": None,
        "input": input_json,
        "upperSchemaVersion": fields.upper_schema_version,
    }
    if fields.upper_schema_version_new is not None:
        context["upperSchemaVersionNew"] = fields.upper_schema_version_new
    if fields.long_timer_interval is not None:
        context["longRunningTimerIntervalDuration"] = fields.long_timer_interval
    if fields.maximum_short_timer is not None:
        context["maximumShortTimerDuration"] = fields.maximum_short_timer
    if fields.upper_schema_version_new is not None:
        context["defaultHttpAsyncRequestSleepTimeMillseconds"] = fields.http_async_sleep_ms
    rest = json.dumps(context)
    return '{"history": [' + history + "], " + rest[1:]
