"""Raising Durable events decided by message handling (e.g. ``PaymentNotified``), best effort.

The event's content is already on the state record when it is raised, so a lost event delays, never
loses, the order: an instance that is gone (404/410: the durable client raises a plain ``Exception``)
or never hears it reaches its step deadline, and the supervisor's retry finds the payment on the
record. Nothing is retried here. Also what the SDK's client answers says of an instance: ``said_gone`` (a
failed raise) and ``read_status`` (a status read)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from domain.ids import url_instance_id
from observability.events import app_event


@dataclass(frozen=True)
class RaiseEvent:
    """A Durable external event for a running orchestration instance (best effort: a missing or
    finished instance is logged, never retried; the step's deadline and the supervisor cover it)."""

    instance_id: str
    name: str
    data: dict[str, Any]


class EventClient(Protocol):
    """The part of ``DurableOrchestrationClient`` used here."""

    async def raise_event(self, instance_id: str, event_name: str, event_data: Any = None) -> None: ...


# ``DurableOrchestrationClient.raise_event`` raises a plain Exception for every status but 202; these are its texts
# for the two that say the event was NOT queued: 404 (no such instance) and 410 (gone).
_GONE_TEXTS = (("No instance with ID ", " found."), ("Instance with ID ", " is gone: either completed or failed"))


def said_gone(failure: Exception) -> bool:
    """Whether a failed ``raise_event`` was the extension's 404 or 410: the event was not queued. Anything else (a
    timeout, a 5xx, a reset connection) is ambiguous; and ``get_status`` cannot settle it alone, as the SDK answers
    the same empty status for a 404 and a 500."""
    text = str(failure)
    return any(text.startswith(head) and text.endswith(tail) for head, tail in _GONE_TEXTS)


class StatusUnreadable(Exception):
    """The extension answered a status read with an error, not a status (nor a 404)."""


class StatusClient(Protocol):
    """The part of ``DurableOrchestrationClient`` ``read_status`` uses."""

    async def get_status(
        self, instance_id: str, show_history: bool = False, show_history_output: bool = False, show_input: bool = False
    ) -> Any: ...


async def read_status(client: StatusClient, instance_id: str, **options: bool) -> Any:
    """``client.get_status`` of ``instance_id`` (escaped here), raising ``StatusUnreadable`` when the extension
    answered with an error. The SDK accepts a 500 and reads the extension's error object (``Message``,
    ``ExceptionMessage``: its storage failing) as a status, empty and falsy, as the empty body of a 404 (no such
    instance, or purged) is read: only the error object's fields, which the SDK keeps as attributes, tell them
    apart. A falsy status returned is an instance the backend does not know."""
    status = await client.get_status(url_instance_id(instance_id), **options)
    if not status:
        said = getattr(status, "ExceptionMessage", None) or getattr(status, "Message", None)
        if said is not None:
            raise StatusUnreadable(f"the Durable extension answered the status of {instance_id} with an error: {said}")
    return status


async def raise_events(client: EventClient, events: Iterable[RaiseEvent]) -> int:
    """Raises each event; returns how many were accepted."""
    raised = 0
    for event in events:
        try:
            await client.raise_event(url_instance_id(event.instance_id), event.name, event.data)
        except Exception as exc:
            app_event(
                "EventNotRaised",
                f"{event.name} to {event.instance_id} not raised: {exc}; the step deadline covers it",
                logging.WARNING,
                instanceId=event.instance_id,
                eventName=event.name,
            )
            continue
        raised += 1
        app_event("EventRaised", f"{event.name} raised to {event.instance_id}", instanceId=event.instance_id)
    return raised
