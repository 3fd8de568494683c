"""The record of every side effect the simulated services performed."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime

# The undo action of each forward action: their amounts cancel out in the net effect.
UNDO_OF: dict[str, str] = {"reserve": "release", "charge": "refund"}
# Forward actions with the same kind of effect: a prepaid order's capture takes money like a charge
# (a refund undoes either; the net effect counts both as charged).
SAME_EFFECT: dict[str, tuple[str, ...]] = {"charge": ("charge", "capture")}


@dataclass(frozen=True)
class Effect:
    service: str
    action: str
    order_id: str
    idempotency_key: str
    amount: int  # units reserved/released, cents charged/refunded, 1 per shipment
    reference: str  # reservationId, chargeId, refundId, shipmentId ...
    at: datetime


@dataclass(frozen=True)
class NetEffect:
    """What an order is left with: reserved - released units, charged - refunded cents, shipments."""

    reserved_units: int = 0
    charged_cents: int = 0
    shipments: int = 0


class Ledger:
    """Thread-safe, append-only list of side effects, shared by the simulated services."""

    def __init__(self) -> None:
        self._effects: list[Effect] = []
        self._lock = threading.Lock()

    def record(self, effect: Effect) -> None:
        with self._lock:
            self._effects.append(effect)

    def effects(
        self, order_id: str | None = None, action: str | None = None, service: str | None = None
    ) -> list[Effect]:
        with self._lock:
            return [
                e
                for e in self._effects
                if (order_id is None or e.order_id == order_id)
                and (action is None or e.action == action)
                and (service is None or e.service == service)
            ]

    def outstanding(self, order_id: str, action: str, service: str | None = None) -> int:
        """The amount of ``action`` not yet undone for this order (e.g. cents charged and not
        refunded), at one service or (``service=None``) summed over all of them."""
        undo = UNDO_OF.get(action)
        kinds = SAME_EFFECT.get(action, (action,))
        done = sum(e.amount for kind in kinds for e in self.effects(order_id, kind, service))
        undone = sum(e.amount for e in self.effects(order_id, undo, service)) if undo else 0
        return done - undone

    def net(self, order_id: str, service: str | None = None) -> NetEffect:
        return NetEffect(
            reserved_units=self.outstanding(order_id, "reserve", service),
            charged_cents=self.outstanding(order_id, "charge", service),
            shipments=self.outstanding(order_id, "ship", service),
        )

    def net_by_service(self, order_id: str) -> dict[str, NetEffect]:
        """What the order is left with at each service that did anything for it."""
        services = sorted({e.service for e in self.effects(order_id)})
        return {service: self.net(order_id, service) for service in services}

    def order_ids(self) -> list[str]:
        with self._lock:
            return sorted({e.order_id for e in self._effects})
