"""Status updates to a submitter's own ``replyTo`` queue.

``MessageId`` = order id + status + attempt, so repeats collapse in duplicate detection. A missing
or unauthorised reply queue never fails or blocks the order: it is logged and alerted once."""

from __future__ import annotations

import logging
from datetime import datetime

from adapters.servicebus.sender import MessageSender, OutgoingMessage, QueueNotFound, SendError
from contracts.messages import StatusName, StatusUpdate
from domain.ids import status_message_id
from notifications.alerts import raise_alert

log = logging.getLogger("status")


def publish_status(
    sender: MessageSender,
    *,
    reply_to: str | None,
    order_id: str,
    status: StatusName,
    attempt: int,
    at: datetime,
    reason: str | None = None,
) -> bool:
    """Sends the update; returns False when there is nowhere to send it or the queue refused it.
    Transient send errors propagate (the caller's retry sends the same MessageId again)."""
    log.info(
        "order %s status %s (attempt %s)",
        order_id,
        status,
        attempt,
        extra={"event": "StatusUpdate", "orderId": order_id, "status": status, "attempt": attempt},
    )
    if not reply_to:
        return False
    update = StatusUpdate(order_id=order_id, status=status, attempt=attempt, at=at, reason=reason)
    try:
        sender.send(
            reply_to,
            OutgoingMessage(
                body=update.to_json(),
                message_id=status_message_id(order_id, status, attempt),
                subject="StatusUpdate",
                correlation_id=order_id,
            ),
        )
    except QueueNotFound as exc:
        raise_alert(
            sender,
            kind="ReplyQueueUnavailable",
            summary=f"cannot send status updates of order {order_id} to {reply_to!r}",
            at=at,
            order_id=order_id,
            severity="warning",
            details={"replyTo": reply_to, "error": str(exc)},
        )
        return False
    except SendError:
        raise
    return True
