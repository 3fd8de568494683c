"""An ``orders`` message whose owed status Durable did not take is handled again later, not completed with the
status lost.

A status the intake could not send (a pending-cap refusal's ``Rejected``, a ``Received``, a
``CancellationRejected``) is handed to its courier orchestration before the message is settled
(``notifications.status.hand_to_courier``). When Durable cannot take it either (an outage of the backend, an
error answer), nothing else would say it: the message was completed and the status was logged lost. Handling the
message again says it again (the refusal written by an earlier delivery is finished, the creating message says
``Received`` again, a cancellation is decided again), so the message goes back on ``orders`` as a copy due after a
delay, as a store outage sends it (``submission.store_outage.retry_later``: 10 s, 30 s, then once a minute, about
an hour in all; abandoned, so redelivered, when the copy cannot be sent or the rounds are used up), never
redelivered at once: an outage would use up its deliveries in seconds and dead-letter it. Only for a message the
handler completed: one it abandons or defers is handled again anyway, one it dead-letters is not handled again.
A copy handled within duplicate detection's 10 minutes sends its statuses under the same MessageIds (a status sent
twice collapses).

Never for a ``Received``: the order's state record owes it whenever its send failed (``receivedOwed``, said by the
record's next writer; the mark given up, the order's first attempt says it first), so the courier was a second
messenger only. A copy for it cost rounds, and in a submission's last round (``retry_later`` abandons a message
whose rounds are used up) it was redelivered until Service Bus dead-lettered it ``MaxDeliveryCountExceeded``,
paging an operator for the submission of an order that exists and runs (red team of 6ed7d51:
``tests/deferral/test_received_not_handed_over_in_the_last_round.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from adapters.servicebus.settlement import ReceivedMessage, Settlement
from dependencies import AppContext
from notifications.status import OwedStatus
from submission.result import IntakeResult
from submission.store_outage import retry_later


def settlement_after_hand_over(
    ctx: AppContext, message: ReceivedMessage, result: IntakeResult, not_taken: Sequence[OwedStatus]
) -> Settlement:
    """The settlement of ``message``: the handler's, or, when Durable did not take some of its owed statuses other
    than ``Received`` (``not_taken``) and the handler completed it, the store-retry copy's (complete, the copy sent;
    abandon)."""
    if not not_taken or result.settlement.kind != "complete" or result.kind is None:
        return result.settlement
    needed = [item for item in not_taken if item.status != "Received"]  # the record owes a Received
    if not needed:
        return result.settlement
    statuses = ", ".join(f"{item.status} of {item.order_id}" for item in needed)
    why = f"Durable did not take the courier of its status {statuses}"
    return retry_later(ctx, message, result.kind, why, store_down=False).settlement
