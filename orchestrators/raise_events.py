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

from adapters.durable_client import answer_codes
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
    """The extension answered a status read with an error, not a status (nor a 404): an error object, an empty
    body with a code but 404, a body that is no JSON, or JSON that is no status."""


class StatusClient(Protocol):
    """The part of ``DurableOrchestrationClient`` ``read_status`` uses."""

    async def get_status(
        self, instance_id: str, show_history: bool = False, show_history_output: bool = False, show_input: bool = False
    ) -> Any: ...


async def read_status(client: StatusClient, instance_id: str, **options: bool) -> Any:
    """``client.get_status`` of ``instance_id`` (escaped here), raising ``StatusUnreadable`` unless the extension
    answered with a status or a 404. A falsy status returned is an instance the backend does not know (a 404: never
    created, or purged; the extension answers it with no content).

    The SDK's ``get_status`` takes a 200, 202, 400, 404 and 500 alike and reads whatever JSON came as a status: an
    error (the extension's error object, ``Message`` and ``ExceptionMessage``, when its storage fails; or nothing at
    all: an empty 500, a 400) reads as an empty, falsy status, as a 404 does. So the HTTP status code is read too
    (``adapters.durable_client.answer_codes``): an empty status with any code but 404 is unreadable, whatever its
    body; so is an answer that is no JSON (the SDK raises ``JSONDecodeError``: a host's text or HTML error page), or
    JSON that is no status (a list, a number, a field of another type: the SDK raises ``TypeError``).
    A 500 that carries a status (an instance ``Failed`` with ``returnInternalServerErrorOnFailure``) is that status.
    A client whose codes cannot be read (a test's fake) is judged by the error object's fields alone."""
    with answer_codes(client) as codes:
        try:
            status = await client.get_status(url_instance_id(instance_id), **options)
        except (ValueError, TypeError) as exc:
            # json.JSONDecodeError: a body that is no JSON; a TypeError: JSON that is no status object (a list, a
            # number, a field of another type), which the SDK's ``from_json`` cannot read. A TypeError before any
            # answer came is no answer of the extension's: raised as it is.
            if isinstance(exc, TypeError) and not codes:
                raise
            raise StatusUnreadable(
                f"the Durable extension answered the status of {instance_id} with no status (no JSON, or none the "
                f"SDK reads): {type(exc).__name__}: {exc}"
            ) from exc
    if not status:
        said = getattr(status, "ExceptionMessage", None) or getattr(status, "Message", None)
        code = codes[-1] if codes else None
        if said is not None or (code is not None and code != 404):
            raise StatusUnreadable(
                f"the Durable extension answered the status of {instance_id} with an error "
                f"(HTTP {code if code is not None else '?'}): {said or 'no status in its body'}"
            )
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
