"""The statuses the app was still trying to deliver when the run's horizon cut it (the report's
``statuses_in_flight_at_end``): read from the runner's Durable engine, never from the app's logs.

A status a submitter's queue refuses is tried on durable timers (``orchestrators.status``): about six hours of
tries, and twice that when the ``Received`` the record owes fails before it, then given up by name
(``StatusUndelivered``). A run cut by its horizon before that give-up leaves the status neither heard nor given
up, and ``missing_statuses`` counted it though the app was still trying it (fuzz seed 8325: a queue full for good
from 278 s, an order stored late, its ``Completed`` with a try left at the 8-hour horizon). Such a status is
named here and not counted missing. A failure's status (``Failed``, ``CompensationFailed``) is not: its record
owes it and the supervisor's owed sweep sends it (``owed_at_end``, counted)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from contracts.activities import StatusGivenUp, parse_publish_status
from localrun.durable.history import EventType, HistoryEvent
from localrun.durable.instance import Instance
from orchestrators import names
from orchestrators.status import NOT_AFTER_RECEIVED, OWED_BY_THE_RECORD, PROGRESS_STATUSES

# Tried once and dropped (progress), or owed on the record (``owed_at_end``'s): never in flight here
NOT_IN_FLIGHT = PROGRESS_STATUSES | OWED_BY_THE_RECORD
OUTCOMES = (EventType.TASK_COMPLETED, EventType.TASK_FAILED)


def statuses_in_flight(
    instances: Iterable[Instance], by_order: Mapping[str, Mapping[str, Any]]
) -> set[tuple[str, str]]:
    """(order, status) pairs an orchestration still running at the end is trying to deliver: its last activity
    scheduled is a ``publish_status`` try not answered yet, or one that failed (or was refused, or could not say
    the ``Received`` first) with a timer still pending for the next try; or a status courier (``deliver_status``)
    that has not run yet. A try of a status that says an owed ``Received`` first (``by_order``: the record still
    marks it ``receivedOwed``) is a try of that ``Received`` too. An instance finished (``Completed``, ``Failed``,
    ``Terminated``) tries nothing: what it did not deliver nor give up stays counted."""
    in_flight: set[tuple[str, str]] = set()
    for instance in instances:
        tried = None if instance.is_finished else _status_tried(instance)
        if tried is None or tried[1] in NOT_IN_FLIGHT:
            continue
        in_flight.add(tried)
        order_id, status = tried
        if status not in NOT_AFTER_RECEIVED and by_order.get(order_id, {}).get("receivedOwed"):
            in_flight.add((order_id, "Received"))
    return in_flight


def _status_tried(instance: Instance) -> tuple[str, str] | None:
    history = instance.history
    scheduled = next((e for e in reversed(history) if e.type is EventType.TASK_SCHEDULED), None)
    if scheduled is None:  # nothing scheduled yet: a courier's status is its input
        return _named(instance.input_json) if instance.name == names.DELIVER_STATUS else None
    if scheduled.fields.get("Name") != names.PUBLISH_STATUS:
        return None
    outcome = next((e for e in reversed(history) if e.type in OUTCOMES and _answers(e, scheduled)), None)
    if outcome is not None and (_delivered_or_given_up(outcome) or not instance.pending_timers):
        return None  # sent, given up, or no next try scheduled
    return _named(scheduled.fields.get("Input"))


def _answers(outcome: HistoryEvent, scheduled: HistoryEvent) -> bool:
    return str(outcome.fields.get("TaskScheduledId")) == str(scheduled.event_id)


def _delivered_or_given_up(outcome: HistoryEvent) -> bool:
    """Whether a try's answer ended the tries (sent, nothing to send, or given up and alerted): the timers stop. An
    answer that cannot be read counts as ended (nothing excused by it)."""
    if outcome.type is EventType.TASK_FAILED:
        return False
    try:
        answer = parse_publish_status(json.loads(str(outcome.fields.get("Result"))))
    except ValueError:
        return True
    return answer is None or isinstance(answer, StatusGivenUp)


def _named(input_json: Any) -> tuple[str, str] | None:
    try:
        data = json.loads(input_json) if isinstance(input_json, str) else None
    except ValueError:
        return None
    order_id = data.get("orderId") if isinstance(data, dict) else None
    status = data.get("status") if isinstance(data, dict) else None
    return (order_id, status) if isinstance(order_id, str) and isinstance(status, str) else None
