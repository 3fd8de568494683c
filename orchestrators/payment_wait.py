"""A prepaid order's payment step: it does not charge, it captures against the provider's
``PaymentNotification``. The notification is either already on the state record (``begin_step``
returns it) or the step waits for the ``PaymentNotified`` event until the step's deadline; the
timer winning ends the attempt like any missed deadline (the supervisor retries it, and the next
attempt finds the notification on the record if it arrived meanwhile). Orchestrator code: no I/O."""

from __future__ import annotations

from collections.abc import Generator
from datetime import datetime
from typing import Any

import azure.durable_functions as df

from contracts.activities import StepBegun
from contracts.messages import AgentRequest
from contracts.names import PAYMENT_NOTIFIED_EVENT
from orchestrators.external_events import abandon_wait, forget_delivered
from orchestrators.timers import cancel_open_timers, next_round_timer


def await_payment(
    context: df.DurableOrchestrationContext, began: StepBegun, deadline: datetime, *, detach: Any = None
) -> Generator[Any, Any, dict[str, Any] | None]:
    """The payment notification (from ``begin_step``'s result or the event), or None if the
    deadline came first. ``detach``: the context ``cancel_timer`` takes the cancelled timer out of the
    SDK's open tasks with (an instance started with ``timerPerRound``), or None."""
    known = began.payment
    if known is not None:
        return known
    timer = context.create_timer(deadline)
    timers = [timer]
    while True:
        event = context.wait_for_external_event(PAYMENT_NOTIFIED_EVENT)
        winner = yield context.task_any([event, timer])
        forget_delivered(context, PAYMENT_NOTIFIED_EVENT)  # taken: a later wait of the name gets the next one
        if winner == timer:
            abandon_wait(context, PAYMENT_NOTIFIED_EVENT, event)
            return None
        if is_notification(event.result):
            cancel_open_timers(timers, context=detach)
            payment: dict[str, Any] = event.result
            return payment
        # No notification (raised from outside intake: the Durable HTTP API's raiseEvent takes any JSON):
        # skipped, as the reply and review waits skip what they cannot read; the wait goes on to the same deadline.
        timer = next_round_timer(context, timers, deadline, timer_per_round=detach is not None)


def is_notification(data: Any) -> bool:
    """Whether ``data`` is a payment as intake raises it (``domain.payments``): what ``capture_request`` reads."""
    return isinstance(data, dict) and all(isinstance(data.get(k), str) for k in ("notificationId", "providerReference"))


def capture_request(request: AgentRequest, action: str, payment: dict[str, Any]) -> AgentRequest:
    """The agent request of a prepaid payment step: the step's prepaid action, against the notification."""
    payload = {
        **request.payload,
        "notificationId": payment["notificationId"],
        "providerReference": payment["providerReference"],
    }
    return request.model_copy(update={"action": action, "payload": payload})
