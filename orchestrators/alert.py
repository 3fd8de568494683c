"""The alert courier: an operator alert whose send failed where it was raised by a trigger with a message
in hand (the intake's ``OrderRejected`` and ``ConflictingOrderData``) is
handed to this orchestration before the message is settled (``notifications.alerts.hand_alerts_to_courier``),
instead of abandoning the message for its alert: abandoned on each failure, an alert queue failing on five
deliveries in a row dead-lettered the message ``MaxDeliveryCountExceeded``, the alert never sent. The
courier sends it through the ``send_alert`` activity under its own id (a repeat collapses in duplicate
detection), retried on durable timers as a final status is (``FINAL_RETRY_DELAYS``, about six hours): the
instance is the outbox, kept by Durable across restarts, and Service Bus need not be up right now. Its last
try says so (``last_try``): a failure then is logged ``AlertUndelivered``, since nothing tries again."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import replace
from typing import Any

import azure.durable_functions as df

from contracts.activities import SendAlertInput
from orchestrators import names
from orchestrators.status import FINAL_RETRY_DELAYS, call_on_timers


def deliver_alert(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    """Sends the alert in its input (``SendAlertInput``: the ``OperatorAlert`` as built where it was raised)
    through ``send_alert``, on durable timers while the send fails."""
    payload = SendAlertInput.from_json(context.get_input())
    last = replace(payload, last_try=True).to_json()
    tried = yield from call_on_timers(context, names.SEND_ALERT, payload.to_json(), FINAL_RETRY_DELAYS, last=last)
    return {"result": "Sent" if tried == "done" else "GaveUp", "alertId": payload.alert.get("alertId")}
