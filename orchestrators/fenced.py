"""The fenced-activity helper: a fenced write's "not owned any more" is one typed outcome, handled in
one place.

``call_fenced`` calls the activity (with ``call_state_activity``'s retries), parses its recorded
result with the activity's parser (``contracts.activities``) and raises ``OwnershipLost`` when it is
``NotOwned``. ``ends_quietly_when_fenced_out`` wraps an orchestration: it catches that exception
once and ends with ``{"result": "FencingLost", "at": ...}``, the instance touching nothing more.

Every fenced write goes out numbered by the orchestration's ``FencedWrites``: 1, 2, 3... in the order
it makes them. Replay runs the orchestrator from its start with a new ``FencedWrites``, so each write
gets the same number every time. The record refuses a number older than the owner's newest (``domain.write_order``):
a late second run of an activity whose orchestration has moved on."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator
from datetime import timedelta
from typing import Any, ClassVar, Protocol, TypeVar

import azure.durable_functions as df

from contracts.activities import NotOwned
from orchestrators.alert import alert_unconfirmed_hand_over
from orchestrators.result import OrchestrationResult, orchestration_result
from orchestrators.state_activity import HAND_OVER_RETRY_DELAYS, RETRY_DELAYS, call_state_activity

T = TypeVar("T")


class FencedInput(Protocol):
    """A fenced activity's input (``contracts.activities``): a dataclass with a ``write_number``."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def write_number(self) -> int | None: ...

    def to_json(self) -> dict[str, Any]: ...


class FencedWrites:
    """One orchestrator run's fenced writes, numbered in the order it makes them (orchestrator memory:
    built anew, and numbering the same writes the same way, on every replay)."""

    def __init__(self, context: df.DurableOrchestrationContext) -> None:
        self.context = context
        self._made = 0

    def numbered[I: FencedInput](self, data: I) -> I:
        """``data`` numbered as this run's next fenced write."""
        self._made += 1
        return dataclasses.replace(data, write_number=self._made)


class OwnershipLost(Exception):
    """This instance no longer holds the record; ``at`` says where the orchestration found out."""

    def __init__(self, at: str) -> None:
        super().__init__(f"fencing lost at {at}")
        self.at = at


def call_fenced[T](
    writes: FencedWrites,
    name: str,
    data: FencedInput,
    parse: Callable[[Any], T | NotOwned],
    *,
    at: str,
    delays: tuple[timedelta, ...] = RETRY_DELAYS,
) -> Generator[Any, Any, T]:
    """``yield from call_fenced(...)``: the fenced activity's typed result; ``OwnershipLost(at)`` if
    the instance lost the record. ``delays``: between retries (``orchestrators.state_activity``)."""
    payload = writes.numbered(data).to_json()
    result = parse((yield from call_state_activity(writes.context, name, payload, delays)))
    if isinstance(result, NotOwned):
        raise OwnershipLost(at)
    return result


def hand_over[T](
    writes: FencedWrites,
    name: str,
    data: FencedInput,
    parse: Callable[[Any], T | NotOwned],
    *,
    at: str,
    order_id: str,
    state: str,
    attempt: int,
) -> Generator[Any, Any, T]:
    """``call_fenced`` of the write that ends an order well (``state``), retried as long as a final status
    (``HAND_OVER_RETRY_DELAYS``). When every try failed, the order may be terminal with nobody to tell its
    submitter: ``alert_unconfirmed_hand_over``, then the error fails the orchestration as before."""
    try:
        return (yield from call_fenced(writes, name, data, parse, at=at, delays=HAND_OVER_RETRY_DELAYS))
    except OwnershipLost:
        raise
    except Exception as error:
        context = writes.context
        yield from alert_unconfirmed_hand_over(context, order_id=order_id, state=state, attempt=attempt, error=error)
        raise


def ends_quietly_when_fenced_out(
    body: Generator[Any, Any, OrchestrationResult],
) -> Generator[Any, Any, OrchestrationResult]:
    """Runs the orchestration ``body``; ``FencingLost`` (with where) when a fenced write found the
    record taken by another instance."""
    try:
        return (yield from body)
    except OwnershipLost as lost:
        return orchestration_result("FencingLost", at=lost.at)
