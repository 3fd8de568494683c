"""The fenced-activity helper: a fenced write's "not owned any more" is one typed outcome, handled in
one place.

``call_fenced`` calls the activity (with ``call_state_activity``'s retries), parses its recorded
result with the activity's parser (``contracts.activities``) and raises ``OwnershipLost`` when it is
``NotOwned``. ``ends_quietly_when_fenced_out`` wraps an orchestration: it catches that exception
once and ends with ``{"result": "FencingLost", "at": ...}``, the instance touching nothing more."""

from __future__ import annotations

from collections.abc import Callable, Generator
from datetime import timedelta
from typing import Any, Protocol, TypeVar

import azure.durable_functions as df

from contracts.activities import NotOwned
from orchestrators.result import OrchestrationResult, orchestration_result
from orchestrators.state_activity import RETRY_DELAYS, call_state_activity

T = TypeVar("T")


class ActivityInput(Protocol):
    def to_json(self) -> dict[str, Any]: ...


class OwnershipLost(Exception):
    """This instance no longer holds the record; ``at`` says where the orchestration found out."""

    def __init__(self, at: str) -> None:
        super().__init__(f"fencing lost at {at}")
        self.at = at


def call_fenced[T](
    context: df.DurableOrchestrationContext,
    name: str,
    data: ActivityInput,
    parse: Callable[[Any], T | NotOwned],
    *,
    at: str,
    delays: tuple[timedelta, ...] = RETRY_DELAYS,
) -> Generator[Any, Any, T]:
    """``yield from call_fenced(...)``: the fenced activity's typed result; ``OwnershipLost(at)`` if
    the instance lost the record. ``delays``: between retries (``orchestrators.state_activity``)."""
    result = parse((yield from call_state_activity(context, name, data.to_json(), delays)))
    if isinstance(result, NotOwned):
        raise OwnershipLost(at)
    return result


def ends_quietly_when_fenced_out(
    body: Generator[Any, Any, OrchestrationResult],
) -> Generator[Any, Any, OrchestrationResult]:
    """Runs the orchestration ``body``; ``FencingLost`` (with where) when a fenced write found the
    record taken by another instance."""
    try:
        return (yield from body)
    except OwnershipLost as lost:
        return orchestration_result("FencingLost", at=lost.at)
