"""An ``orders`` message whose owed status or owed alert Durable did not take is handled again later, not completed
with the status lost nor redelivered at once for the alert.

A status the intake could not send (a pending-cap refusal's ``Rejected``, a ``Received``, a
``CancellationRejected``) is handed to its courier orchestration before the message is settled
(``notifications.status.hand_to_courier``), and so is an alert it could not send (``OrderRejected``,
``ConflictingOrderData``, a rejected payment notification's, ``NotificationsForAcceptedOrder``:
``notifications.alerts.hand_alerts_to_courier``). When Durable cannot take one either (an outage of the backend, an
error answer), nothing else would say it: the status was logged lost, and the alert's hand-over raised, so the
message was redelivered at once, its five deliveries used up in seconds by an outage and the message dead-lettered
``MaxDeliveryCountExceeded`` (a page for a message whose handling was fine, the alert never sent, the handler's work
redone on each delivery). Handling the message again says it again (the refusal written by an earlier delivery is
finished, the creating message says ``Received`` again, a cancellation is decided again, the notifications named
to an operator stay listed until their alert went out: the same alert, under the same id), so the message goes back
on ``orders`` as a copy due after a delay, as a store outage sends it (``submission.store_outage.retry_later``: 10 s,
30 s, then once a minute, about an hour in all; abandoned, so redelivered, when the copy cannot be sent), never
redelivered at once. Only for a message the handler completed. One it dead-letters (``ConflictingOrderData``, a
rejected payment notification's reason) is dead-lettered as decided, and its alert, which nothing raises again then,
is sent once more by the trigger, or logged ``AlertUndelivered`` (ERROR: a log alert rule pages), as in the last
round below: a copy judged again would be the dead letter an operator sees, under the copy's MessageId and with only
its round and original in its application properties, the producer's own properties lost (red team of 2d6ba31:
``tests/deferral/test_alert_not_handed_over.py``). One the handler abandons or defers is handled again anyway (a
redelivery, its deferral's look again), and raises the alert again then: its settlement stands. A copy handled
within duplicate detection's 10 minutes sends its statuses and alerts under the same MessageIds (one sent twice
collapses).

Never for a ``Received``: the order's state record owes it whenever its send failed (``receivedOwed``, said by the
record's next writer; the mark given up, the order's first attempt says it first), so the courier was a second
messenger only. A copy for it cost rounds, and in a submission's last round (``retry_later`` abandons a message
whose rounds are used up) it was redelivered until Service Bus dead-lettered it ``MaxDeliveryCountExceeded``,
paging an operator for the submission of an order that exists and runs (red team of 6ed7d51:
``tests/deferral/test_received_not_handed_over_in_the_last_round.py``). For the same reason an alert owed by a
message in its last round (``rounds_used_up``) is not copied: it is sent once more now, or logged
``AlertUndelivered`` (ERROR: a log alert rule pages), as an alert no handling raises again is
(``notifications.alerts.send_or_page``), and the handler's settlement stands."""

from __future__ import annotations

from collections.abc import Sequence

from adapters.servicebus.settlement import ReceivedMessage, Settlement
from dependencies import AppContext
from notifications.alerts import OwedAlert, send_or_page
from notifications.status import OwedStatus
from submission.result import IntakeResult
from submission.store_outage import retry_later, rounds_used_up


def settlement_after_hand_over(
    ctx: AppContext,
    message: ReceivedMessage,
    result: IntakeResult,
    not_taken: Sequence[OwedStatus],
    alerts_not_taken: Sequence[OwedAlert] = (),
) -> Settlement:
    """The settlement of ``message``: the handler's, or the store-retry copy's (complete, the copy sent; abandon) when
    the handler completed it and Durable did not take some of its owed statuses other than ``Received``
    (``not_taken``) or some of its owed alerts that handling it again raises again (``alerts_not_taken``). Those
    alerts of a message the handler dead-lettered, or of one in its last store-retry round, are sent once more or
    logged ``AlertUndelivered`` instead, the handler's settlement kept (unless a status still needs the copy)."""
    kind = result.settlement.kind
    if result.kind is None:
        return result.settlement
    statuses = [item for item in not_taken if item.status != "Received"] if kind == "complete" else []
    alerts = list(alerts_not_taken) if kind in ("complete", "deadletter") else []
    if not statuses and not alerts:
        return result.settlement
    owed = [f"status {item.status} of {item.order_id}" for item in statuses]
    owed += [f"alert {item.alert.alert_id}" for item in alerts]
    why = f"Durable did not take the courier of its {', '.join(owed)}"
    if kind == "deadletter" or (not statuses and rounds_used_up(message)):
        where = "dead-lettered as decided" if kind == "deadletter" else "in its last store-retry round"
        for item in alerts:
            send_or_page(ctx.sender, item, f"{why}, {where}")
        return result.settlement
    return retry_later(ctx, message, result.kind, why, store_down=False).settlement
