"""What each simulated service can do: its actions, the reference each returns, and how much of a
side effect each is (units reserved, cents charged, one shipment)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from adapters.remote.interface import RemoteError


def _units(payload: dict[str, Any]) -> int:
    lines = payload.get("lines")
    if lines is None:
        return 1
    try:
        return sum(int(line["quantity"]) for line in lines)
    except (TypeError, KeyError, ValueError):
        raise RemoteError("payload.lines must be a list of objects with an integer quantity", transient=False) from None


def _cents(payload: dict[str, Any]) -> int:
    value = payload.get("amountCents", payload.get("totalCents"))
    if type(value) is not int or value < 0:
        raise RemoteError("payload.amountCents must be a non-negative integer", transient=False)
    return value


def _captured_cents(payload: dict[str, Any]) -> int:
    reference = payload.get("providerReference")
    if not isinstance(reference, str) or not reference:
        raise RemoteError("a capture needs payload.providerReference (the payment notification's)", transient=False)
    return _cents(payload)


def _one(_payload: dict[str, Any]) -> int:
    return 1


@dataclass(frozen=True)
class ActionSpec:
    name: str
    reference_field: str  # the result field carrying the reference of the side effect
    reference_prefix: str
    amount_field: str | None  # the result field carrying the amount, if the result shows it
    amount: Callable[[dict[str, Any]], int] | None  # forward actions: the amount, from the payload
    undoes: str | None = None  # undo actions: the forward action whose outstanding amount they cancel


_PAYMENT: dict[str, ActionSpec] = {
    "charge": ActionSpec("charge", "chargeId", "ch", "amountCents", _cents),
    "refund": ActionSpec("refund", "refundId", "rf", "amountCents", None, undoes="charge"),
    # A prepaid order: take the money its payment notification announced (no new charge). The
    # reference is a chargeId too, so the refund that undoes the step needs nothing else.
    "capture": ActionSpec("capture", "chargeId", "cap", "amountCents", _captured_cents),
}

CATALOG: dict[str, dict[str, ActionSpec]] = {
    "inventory": {
        "reserve": ActionSpec("reserve", "reservationId", "res", "units", _units),
        "release": ActionSpec("release", "releaseId", "rel", "units", None, undoes="reserve"),
    },
    "payment": _PAYMENT,
    "shipping": {
        "ship": ActionSpec("ship", "shipmentId", "shp", None, _one),
    },
    "payment_backup": _PAYMENT,  # the second payment provider (the fallback agent's service)
}

# The order in which the fleet derives each simulator's random seed: a service added later goes
# last, so the seeds (and the fault draws) of the existing services never change.
SEED_ORDER: tuple[str, ...] = ("inventory", "payment", "shipping", "payment_backup")
