"""Status updates to a submitter's own ``replyTo`` queue.

``MessageId`` = order id + status + attempt (+ a variant: a second update of the same status and attempt,
such as the ``Rejected`` of each refused message), so repeats collapse in duplicate detection. A missing,
disabled or unauthorised reply queue never fails or blocks the order: it is logged (every status) and alerted
once per queue: the alert's id is derived from the queue name alone, so every order and status of
that submitter collapses into one alert per duplicate-detection window of ``operator-alerts``. Such a
refusal (``Delivery.REFUSED``) may not last (a role assignment still propagating, a queue deleted and
created again): every status but a progress one is tried again by its caller for
``orchestrators.status.REFUSED_RETRY_WINDOW``, then dropped (the queue's alert stands for it, never a
per-order alert). A refusal the app's own ``operator-alerts`` shares (the queue's alert refused too) is the app's
identity refused by the namespace (its role propagating, or removed), not the submitter's queue: a ``SendError``,
tried again as any failed send, never dropped past that window. A message Service Bus refuses as such
(``MessageRejected``) is logged and never retried.

A status is never worth failing an order for: code that sends one directly (the intake) uses
``publish_status_or_owe``, and a status whose send failed (or that its reply queue refused) is handed to the
courier orchestration (``deliver_status_v1``, ``hand_to_courier``), which retries it on durable timers until it
is sent or refused past the window (a
pending-cap refusal's ``Rejected``: until then, or until a later submission of the order is accepted,
``activities.scheduler_steps.refusal_superseded``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from adapters.cosmos.alert_mark_store import AlertMarks
from adapters.servicebus.sender import MessageRejected, MessageSender, OutgoingMessage, QueueNotFound, SendError
from contracts.messages import StatusName, StatusUpdate
from contracts.names import OPERATOR_ALERTS_QUEUE, is_app_queue
from domain.ids import bounded, bounded_instance_id, status_message_id
from domain.text import carriable
from notifications.alerts import (
    CourierClient,
    courier_runtime,
    delivering,
    raise_alert,
    start_error,
)
from notifications.repeats import raise_once_per_problem
from observability.events import app_event

log = logging.getLogger("status")


class Delivery(StrEnum):
    """What became of one status update: ``SENT``; ``REFUSED``, its reply queue refuses this app (missing, disabled,
    or no role on it: maybe only for a while); ``DROPPED``, nowhere to send it (no ``replyTo``, one of the app's own
    queues) or Service Bus refuses the message as such: trying again would change nothing."""

    SENT = "sent"
    REFUSED = "refused"
    DROPPED = "dropped"


def publish_status(
    sender: MessageSender,
    *,
    reply_to: str | None,
    order_id: str,
    status: StatusName,
    attempt: int,
    at: datetime,
    reason: str | None = None,
    variant: str | None = None,
) -> Delivery:
    """Sends one status update to the submitter's ``reply_to`` queue: the one way the app sends a
    status (an orchestration calls it through the ``publish_status`` activity,
    ``orchestrators.status.call_publish_status``). Returns what became of it (``Delivery``): a refusal is
    logged ``ReplyQueueUnavailable`` and alerted once per queue here, and the caller decides whether to try
    again. Transient send errors propagate (the caller's retry sends the same
    MessageId again; ``publish_status_or_owe`` turns them into an owed status instead). ``variant``:
    a second update of the same status and attempt (the supervisor's "waiting for <dependency>"),
    with a MessageId of its own so duplicate detection does not take it for the first."""
    app_event(
        "StatusUpdate",
        f"order {order_id} status {status} (attempt {attempt})",
        orderId=order_id,
        status=status,
        attempt=attempt,
    )
    if not reply_to:
        return Delivery.DROPPED
    if is_app_queue(reply_to):  # a record from before the contract refused such a replyTo: never there
        log.error("order %s: status %s not sent: replyTo %r is one of the app's own queues", order_id, status, reply_to)
        return Delivery.DROPPED
    carried = None if reason is None else carriable(reason)  # a reason from an older record, whatever it holds
    update = StatusUpdate(order_id=order_id, status=status, attempt=attempt, at=at, reason=carried)
    try:
        sender.send(
            reply_to,
            OutgoingMessage(
                body=update.to_json(),
                message_id=status_message_id(order_id, status, attempt)
                if variant is None
                else bounded(f"{order_id}:{status}:{attempt}:{variant}"),
                subject="StatusUpdate",
                correlation_id=order_id,
            ),
        )
    except QueueNotFound as exc:
        try:
            _alert_reply_queue(sender, reply_to, order_id, at, exc)
        except QueueNotFound as alert_error:
            # The app's own queue refuses the app too: its identity has no role on the namespace (still propagating
            # after a deployment, or removed), not the submitter's queue. A failure for a while, tried again as any
            # failed send is (owed, the courier's timers), never dropped past the refusal window as a queue's is.
            raise SendError(
                f"status {status} for {reply_to!r} not sent: the app's own {OPERATOR_ALERTS_QUEUE!r} refuses it too, "
                f"its identity refused by the namespace: {alert_error}"
            ) from exc
        except SendError as alert_error:  # the status is a side channel: never fail the order for it
            log.error("reply-queue alert for %r not sent: %s", reply_to, alert_error)
        app_event(
            "ReplyQueueUnavailable",
            f"order {order_id}: status {status} not sent, reply queue {reply_to!r} unavailable: {exc}",
            logging.WARNING,
            orderId=order_id,
            replyTo=reply_to,
        )
        return Delivery.REFUSED
    except MessageRejected as exc:
        app_event(
            "StatusSendFailed",
            f"order {order_id}: status {status} refused by Service Bus, not retried: {exc}",
            logging.ERROR,
            orderId=order_id,
            status=status,
        )
        return Delivery.DROPPED
    return Delivery.SENT


@dataclass(frozen=True)
class OwedStatus:
    """A status whose send failed, for the courier orchestration to deliver. ``variant`` as for
    ``publish_status``: the courier sends it under the same MessageId, and has an instance of its own
    (a courier still delivering the first update must not swallow the second)."""

    order_id: str
    status: StatusName
    attempt: int
    reply_to: str
    reason: str | None = None
    variant: str | None = None

    @property
    def instance_id(self) -> str:
        suffix = "" if self.variant is None else f":{self.variant}"
        return bounded_instance_id(f"status:{self.order_id}:{self.status}:{self.attempt}{suffix}", 100)

    def courier_input(self) -> dict[str, Any]:
        """The courier's input (``PublishStatusInput``'s JSON), with ``answersGiveUp``: its last try answers its
        give-up, and one that fails without answering is repeated (``orchestrators.status``)."""
        payload: dict[str, Any] = {
            "orderId": self.order_id,
            "status": self.status,
            "attempt": self.attempt,
            "replyTo": self.reply_to,
            "answersGiveUp": True,
        }
        if self.reason is not None:
            payload["reason"] = self.reason[:500]
        if self.variant is not None:
            payload["variant"] = self.variant
        return payload


def publish_status_or_owe(
    sender: MessageSender,
    *,
    reply_to: str | None,
    order_id: str,
    status: StatusName,
    attempt: int,
    at: datetime,
    reason: str | None = None,
    variant: str | None = None,
) -> OwedStatus | None:
    """``publish_status`` for code that must not fail or wait because of a status: a send that fails, or
    that the reply queue refuses (a status of the intake is never a progress status: it answers the
    submitter's message), is returned as owed (hand it to ``hand_to_courier``), never raised."""
    try:
        delivery = publish_status(
            sender,
            reply_to=reply_to,
            order_id=order_id,
            status=status,
            attempt=attempt,
            at=at,
            reason=reason,
            variant=variant,
        )
    except SendError as exc:
        why = str(exc)
    else:
        if delivery is not Delivery.REFUSED:
            return None
        why = "its reply queue refuses this app"
    if not reply_to:
        return None
    app_event(
        "StatusOwed",
        f"order {order_id}: status {status} not sent now ({why}); handed to the courier",
        logging.WARNING,
        orderId=order_id,
        status=status,
        replyTo=reply_to,
    )
    return OwedStatus(order_id, status, attempt, reply_to, reason, variant)


async def hand_to_courier(client: CourierClient, owed: Sequence[OwedStatus]) -> tuple[OwedStatus, ...]:
    """Starts the courier for each owed status. A courier already running for the same status is
    fine (the start is refused, that one delivers it: ``StatusCourierRunning``), and so is one that
    completed (a start whose answer was lost after it landed, or an earlier hand-over of the same status,
    whose courier sent it or said it could not: ``StatusCourierDone``). Returns the statuses Durable did not
    take (it cannot be reached, or answered an error: ``StatusNotHandedOver``, WARNING), never raises: the
    trigger handles its message again later for them (``submission.courier_retry``), whose handling says the
    status again. Before, such a status was logged lost (``StatusSendFailed``): a pending-cap refusal's
    ``Rejected`` whose send failed during a Durable outage never reached its submitter (fuzz seed 7985)."""
    from orchestrators.names import DELIVER_STATUS

    failed: list[OwedStatus] = []
    for item in owed:
        try:
            await client.start_new(DELIVER_STATUS, item.instance_id, item.courier_input())
        except Exception as exc:
            taken = await _courier_has_it(client, item.instance_id)
            if taken is not None:
                event, how = taken
                app_event(
                    event,
                    f"order {item.order_id}: status {item.status} {how} {item.instance_id}",
                    orderId=item.order_id,
                    status=item.status,
                    instanceId=item.instance_id,
                )
                continue
            app_event(
                "StatusNotHandedOver",
                f"order {item.order_id}: status {item.status} could not be handed to the courier "
                f"({start_error(exc)}); "
                + ("the order's record owes it" if item.status == "Received" else "its message is handled again later"),
                logging.WARNING,
                orderId=item.order_id,
                status=item.status,
                instanceId=item.instance_id,
            )
            failed.append(item)
    return tuple(failed)


async def _courier_has_it(client: CourierClient, instance: str) -> tuple[str, str] | None:
    """The event and words for a status whose start failed but whose courier has it: still delivering it, or
    completed (it sent the status, or gave up and said so); None when neither can be told. One status read."""
    runtime = await courier_runtime(client, instance)
    if delivering(runtime):
        return "StatusCourierRunning", "is already being delivered by"
    if runtime == "Completed":
        return "StatusCourierDone", "was handled by its courier"
    return None


def give_up(
    sender: MessageSender,
    *,
    order_id: str,
    status: StatusName,
    attempt: int,
    variant: str | None,
    reply_to: str | None,
    at: datetime,
    error: Exception,
    marks: AlertMarks | None = None,
    waited_for: tuple[StatusName, ...] = (),
) -> None:
    """A final status whose last try on the courier's (or the scheduler's) durable timers failed, after
    about six hours: the submitter will not hear it from this app. Logged ``StatusUndelivered`` (ERROR) and
    alerted ``StatusUndelivered`` (a failed alert send is only logged: the caller is failing already), so an
    operator can tell the submitter another way.

    ``waited_for``: statuses the submitter has not heard either, which this one waited for (a ``Received`` the
    state record still owed, ``notifications.received``: each try said it first and failed there; or may still owe,
    when the last try failed reading the record for it: ``error`` a store's, said so in the summary). Each is given up
    with it: logged ``StatusUndelivered`` of its own (attempt 0) before this status's, and named in the one alert
    (``details.undeliveredBefore``), so the operator tells the submitter both.

    One alert per reply queue and send error while that lasts, not one per status (``marks``, an alert mark:
    ``notifications/repeats.py``): a submitter's queue full for good gave up every status of its orders, one alert
    and one page each (50 for 100 orders of ``status-queue-full-for-good``); the first names its order and the
    queue, the rest are logged ``StatusUndelivered`` (each order and status) and ``AlertRepeatHeld``. A give-up for
    any other reason (the record could not be read) is alerted on its own."""
    # a try that failed reading the record cannot tell whether it still owed them: named all the same
    maybe = "" if isinstance(error, SendError) else ", if the record still owed it"
    for before in waited_for:
        app_event(
            "StatusUndelivered",
            f"order {order_id}: status {before} (attempt 0) given up with the {status} "
            f"that waited for it{maybe}: {error}",
            logging.ERROR,
            orderId=order_id,
            status=before,
            attempt=0,
            replyTo=reply_to,
        )
    app_event(
        "StatusUndelivered",
        f"order {order_id}: status {status} (attempt {attempt}) given up after its last try: {error}",
        logging.ERROR,
        orderId=order_id,
        status=status,
        attempt=attempt,
        replyTo=reply_to,
    )
    problem = (
        f"StatusUndelivered:{reply_to}:{type(error).__name__}" if reply_to and isinstance(error, SendError) else ""
    )
    raise_once_per_problem(
        marks if problem else None,  # a give-up that is no queue's problem: alerted on its own
        sender,
        problem,
        kind="StatusUndelivered",
        summary=f"order {order_id}: status {status}"
        + "".join(f" (and the {before} before it{maybe})" for before in waited_for)
        + " could not be sent to "
        + (f"{reply_to!r}" if reply_to else "its replyTo (the record could not be read)")
        # the status's own tries span about six hours, once a late Received is out (hours later, at most)
        + (" for about six hours" if waited_for else " on every try of its own (about six hours)")
        + ("; the statuses given up for that queue while it stays so are logged StatusUndelivered" if problem else ""),
        at=at,
        order_id=order_id,
        severity="warning",
        discriminator=f"{status}:{attempt}" + ("" if variant is None else f":{variant}"),
        details={
            "status": status,
            "attempt": attempt,
            "replyTo": reply_to,
            "error": str(error)[:500],
            **({"undeliveredBefore": list(waited_for)} if waited_for else {}),
        },
    )


def _alert_reply_queue(sender: MessageSender, reply_to: str, order_id: str, at: datetime, exc: Exception) -> None:
    raise_alert(
        sender,
        kind="ReplyQueueUnavailable",
        summary=f"cannot send status updates to {reply_to!r} (first seen for order {order_id})",
        at=at,
        severity="warning",
        discriminator=reply_to,
        details={"replyTo": reply_to, "orderId": order_id, "error": str(exc)},
    )
