"""The alert courier: an operator alert whose send failed where it was raised by a trigger with a message
in hand (the intake's ``OrderRejected``, ``ConflictingOrderData``, a rejected payment notification's,
``NotificationsForAcceptedOrder``) is
handed to this orchestration before the message is settled (``notifications.alerts.hand_alerts_to_courier``),
instead of abandoning the message for its alert: abandoned on each failure, an alert queue failing on five
deliveries in a row dead-lettered the message ``MaxDeliveryCountExceeded``, the alert never sent. The
courier sends it through the ``send_alert`` activity under its own id (a repeat collapses in duplicate
detection), retried on durable timers as a final status is (``FINAL_RETRY_DELAYS``, about six hours): the
instance is the outbox, kept by Durable across restarts, and Service Bus need not be up right now. Its last
try says so (``last_try``): a failure then is logged ``AlertUndelivered``, since nothing tries again; on a courier
started since (``answersGiveUp``) that try answers so (``AlertGivenUp``), and one that fails without answering (its
worker killed at ``functionTimeout``, a crash) is repeated, then logged ``LastTryLost`` by the courier itself
(``orchestrators.status.LAST_TRY_REPEATS``, ``last_try_lost``); one started before replays as recorded. When Durable
cannot take the courier either (its start fails), the message is handled again later as a store-retry copy whose
handling raises the alert again (``submission.courier_retry``; for a message dead-lettered or in its last round, or
an alert no handling raises again, the trigger sends it once more or logs ``AlertUndelivered``), not redelivered at
once: a Durable outage used up its deliveries in seconds and dead-lettered it ``MaxDeliveryCountExceeded``."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

from contracts.activities import SendAlertInput, parse_send_alert
from contracts.messages import OperatorAlert
from domain.ids import alert_id
from orchestrators import names
from orchestrators.state_activity import RETRY_DELAYS
from orchestrators.status import FINAL_RETRY_DELAYS, Tried, answers_give_up, call_on_timers, last_try_lost

HAND_OVER_UNCONFIRMED = "HandOverUnconfirmed"


def deliver_alert(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    """Sends the alert in its input (``SendAlertInput``: the ``OperatorAlert`` as built where it was raised)
    through ``send_alert``, on durable timers while the send fails."""
    payload = replace(SendAlertInput.from_json(context.get_input()), answers_give_up=None)  # the instance's: below
    tried = yield from _send_on_timers(context, payload, FINAL_RETRY_DELAYS)
    return {"result": "Sent" if tried == "done" else "GaveUp", "alertId": payload.alert.get("alertId")}


def _send_on_timers(
    context: df.DurableOrchestrationContext, payload: SendAlertInput, delays: tuple[timedelta, ...]
) -> Generator[Any, Any, Tried]:
    """``send_alert`` on durable timers, its last try saying so; on an instance started with ``answersGiveUp`` that
    try answers its give-up, and one that fails is repeated, then logged ``LastTryLost``."""
    answers = answers_give_up(context)
    last = replace(payload, last_try=True, answers_give_up=True if answers else None).to_json()
    gave_up = (lambda answer: parse_send_alert(answer) is not None) if answers else None
    tried = yield from call_on_timers(context, names.SEND_ALERT, payload.to_json(), delays, last=last, gave_up=gave_up)
    if tried != "lost":
        return tried
    alert = payload.alert
    last_try_lost(
        context,
        names.SEND_ALERT,
        f"operator alert {alert.get('kind')} {alert.get('alertId')} not sent nor logged AlertUndelivered",
        orderId=alert.get("orderId"),
        alertId=alert.get("alertId"),
        alertKind=alert.get("kind"),
        summary=alert.get("summary"),
    )
    return "failed"


def alert_unconfirmed_hand_over(
    context: df.DurableOrchestrationContext, *, order_id: str, state: str, attempt: int, error: Exception
) -> Generator[Any, Any]:
    """The write that ends an order (``state``: ``Processed``, ``Compensated``) failed on every try, about six
    hours of them (``orchestrators.fenced.hand_over``). One of them may have committed unanswered: the record
    is then terminal, no supervisor looks at it again and the submitter was never told. Alerted
    ``HandOverUnconfirmed`` (through ``send_alert``: Service Bus, not the store that failed; a few tries on
    durable timers, the last one logged ``AlertUndelivered`` if it fails too, or ``LastTryLost`` if it dies)."""
    alert = OperatorAlert(
        alert_id=alert_id(HAND_OVER_UNCONFIRMED, order_id, f"{state}:{attempt}"),
        kind=HAND_OVER_UNCONFIRMED,
        severity="error",
        order_id=order_id,
        summary=f"order {order_id}: its {state} write failed on every try for about six hours",
        details={"state": state, "attempt": attempt, "instanceId": context.instance_id, "error": str(error)[:500]},
        at=context.current_utc_datetime,
    )
    payload = SendAlertInput(alert=alert.model_dump(mode="json", by_alias=True))
    yield from _send_on_timers(context, payload, RETRY_DELAYS)
