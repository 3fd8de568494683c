"""What handling one ``orders`` message decides: its settlement, an attempt to start right away, statuses
and alerts for the couriers, and Durable events to raise (applied by the thin trigger: the start and the
hand-overs, then the settlement, then the events)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from adapters.servicebus.settlement import ReceivedMessage, Settlement
from orchestrators.raise_events import RaiseEvent

if TYPE_CHECKING:
    from dependencies import AppContext
    from notifications.alerts import OwedAlert
    from notifications.status import OwedStatus
    from orchestrators.starter import Claim


@dataclass(frozen=True)
class IntakeResult:
    settlement: Settlement
    claim: Claim | None = None  # the fast path: start this attempt right away
    events: tuple[RaiseEvent, ...] = ()
    owed: tuple[OwedStatus, ...] = ()  # statuses whose send failed: handed to the courier orchestration
    # alerts whose send failed: handed to the alert courier before settling; one Durable does not take has the
    # message handled again later (submission/courier_retry.py)
    alerts: tuple[OwedAlert, ...] = ()
    kind: str | None = None  # the message's type (``handle_orders_message``): a copy of it is sent as one


# (context, contract, message, the message's alerts owed: ``notifications.alerts.raise_alert_owing``)
Handler = Callable[["AppContext", Any, ReceivedMessage, list["OwedAlert"]], IntakeResult]
