"""Operator alerts: an ``OperatorAlert`` on the ``operator-alerts`` queue and an ERROR event
(``app_event``: a structured log line and the ``orders.events`` counter, for log-based alert rules).

The alert id is deterministic (kind + order + attempt), so a retried send collapses in Service
Bus duplicate detection instead of paging an operator twice. It is bounded (``domain.ids.bounded``)
to Service Bus's 128-character MessageId, and every field is cut to the contract's limits before the
alert is built: what an order id, a queue name or an error text holds can never make the alert
itself fail (a side channel must not crash the handler that raises it)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any, Literal

from adapters.servicebus.sender import MessageSender, OutgoingMessage
from contracts.messages import OperatorAlert
from contracts.names import OPERATOR_ALERTS_QUEUE, QUEUE_DUPLICATE_DETECTION_MINUTES
from domain.ids import bounded
from domain.text import carriable
from observability.events import app_event

Severity = Literal["warning", "error", "critical"]


SHORT_TEXT = 200  # contracts.messages.ShortText

# Service Bus drops a repeat of a MessageId within this long of the first (``operator-alerts``'s
# duplicate detection, infra/modules/servicebus.bicep; tests/infra checks they agree).
DUPLICATE_WINDOW = timedelta(minutes=QUEUE_DUPLICATE_DETECTION_MINUTES)
HOURLY = timedelta(hours=1)


def hourly_slice(since: datetime, now: datetime) -> int | None:
    """For an alert repeated "at most once an hour" by a caller that runs often (every supervisor run)
    and keeps no state: the hour since ``since`` (0, 1, ...) when ``now`` is in that hour's first
    ``DUPLICATE_WINDOW``, else None (send nothing). The caller puts the hour in the alert id: every
    send of one slice falls within the duplicate window of the slice's first, so Service Bus keeps one;
    the rest of the hour sends nothing. Duplicate detection alone (10 minutes) would let the same alert
    through six times an hour. The caller must run at least once per ``DUPLICATE_WINDOW`` (the
    supervisor: every 30 s by default) or it skips that hour's alert; settings.py refuses a
    ``SUPERVISOR_SCHEDULE`` that may wait longer between two runs."""
    if now < since:
        return None
    elapsed = now - since
    hour = elapsed // HOURLY
    return hour if elapsed - hour * HOURLY < DUPLICATE_WINDOW else None


def alert_id(kind: str, order_id: str | None, discriminator: str | int = "") -> str:
    return bounded(":".join(str(p) for p in ("alert", kind, order_id or "-", discriminator) if p != ""))


def _short(text: str) -> str:
    return (carriable(text).strip() or "-")[:SHORT_TEXT]


def build_alert(
    kind: str,
    summary: str,
    at: datetime,
    order_id: str | None,
    severity: Severity,
    discriminator: str | int,
    details: dict[str, Any],
) -> OperatorAlert:
    alert = OperatorAlert(
        alert_id=alert_id(kind, order_id, discriminator),
        kind=_short(kind),
        severity=severity,
        order_id=order_id,
        summary=_short(summary),
        details=details,
        at=at,
    )
    try:
        alert.to_json()
    except ValueError:  # a detail that does not serialise: keep the alert, say what it was
        alert = alert.model_copy(update={"details": {"unserialisable": repr(details)[:1000]}})
    return alert


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
    alert = build_alert(kind, summary, at, order_id, severity, discriminator, details or {})
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
    whatever happens here, so a failed send (or anything else going wrong with the alert) is logged
    (``AlertSendFailed``, ERROR, for log-based alert rules) instead of failing the caller and hiding
    that the write succeeded."""
    try:
        raise_alert(sender, **alert)
    except Exception as exc:  # a side channel: never fail the caller
        app_event(
            "AlertSendFailed",
            f"operator alert {alert.get('kind')} could not be sent: {exc}",
            logging.ERROR,
            orderId=alert.get("order_id"),
            alertKind=alert.get("kind"),
        )
        return False
    return True
