"""Operator alerts: an ``OperatorAlert`` on the ``operator-alerts`` queue and an ERROR event
(``app_event``: a structured log line and the ``orders.events`` counter, for log-based alert rules).

The alert id is deterministic (kind + order + attempt), so a retried send collapses in Service
Bus duplicate detection instead of paging an operator twice."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Literal

from adapters.servicebus.sender import MessageSender, OutgoingMessage
from contracts.messages import OperatorAlert
from contracts.names import OPERATOR_ALERTS_QUEUE
from observability.events import app_event

Severity = Literal["warning", "error", "critical"]


def alert_id(kind: str, order_id: str | None, discriminator: str | int = "") -> str:
    return ":".join(str(p) for p in ("alert", kind, order_id or "-", discriminator) if p != "")


def raise_alert(
    sender: MessageSender,
    *,
    kind: str,
    summary: str,
    at: datetime,
    order_id: str | None = None,
    severity: Severity = "error",
    discriminator: str | int = "",
    details: dict[str, Any] | None = None,
) -> OperatorAlert:
    alert = OperatorAlert(
        alert_id=alert_id(kind, order_id, discriminator),
        kind=kind,
        severity=severity,
        order_id=order_id,
        summary=summary[:200],
        details=details or {},
        at=at,
    )
    app_event(
        "OperatorAlert",
        f"operator alert {kind}: {summary}",
        logging.ERROR,
        alertId=alert.alert_id,
        orderId=order_id,
        alertKind=kind,
    )
    sender.send(
        OPERATOR_ALERTS_QUEUE,
        OutgoingMessage(body=alert.to_json(), message_id=alert.alert_id, subject="OperatorAlert"),
    )
    return alert


def raise_alert_after_write(sender: MessageSender, **alert: Any) -> bool:
    """``raise_alert`` for the moment after a state write made the alert true: the record is safe
    whatever happens here, so a failed send is logged (``AlertSendFailed``, ERROR, for log-based
    alert rules) instead of failing the caller and hiding that the write succeeded."""
    from adapters.servicebus.sender import SendError

    try:
        raise_alert(sender, **alert)
    except SendError as exc:
        app_event(
            "AlertSendFailed",
            f"operator alert {alert.get('kind')} could not be sent: {exc}",
            logging.ERROR,
            orderId=alert.get("order_id"),
            alertKind=alert.get("kind"),
        )
        return False
    return True
