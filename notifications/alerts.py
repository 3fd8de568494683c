"""Operator alerts: an ``OperatorAlert`` on the ``operator-alerts`` queue and an ERROR event
(``app_event``: a structured log line and the ``orders.events`` counter, for log-based alert rules).

The alert id is deterministic (kind + order + attempt), so a retried send collapses in Service
Bus duplicate detection instead of paging an operator twice. It is bounded (``domain.ids.bounded``)
to Service Bus's 128-character MessageId, and every field is cut to the contract's limits before the
alert is built: what an order id, a queue name or an error text holds can never make the alert
itself fail (a side channel must not crash the handler that raises it).

An alert raised by a trigger with a message in hand (``submit_order`` on the ``orders`` queue, whatever the
message: a submission's refusal or conflict, a payment notification's rejection where it is delivered or when it
is fetched again deferred, the notifications flagged for an accepted order) must not be lost when its send
fails, nor spend the message's deliveries on it: ``raise_alert_or_owe`` returns it as owed (``OwedAlert``;
``raise_alert_owing`` adds it to the message's list), and the trigger hands it to the alert courier
orchestration (``deliver_alert_v1``, ``hand_alerts_to_courier``) before it settles the message; the courier
sends it under the same id on durable timers, as the status courier does a status (``orchestrators/alert.py``).
One Durable does not take either has the message handled again later, a store-retry copy whose handling raises it
again (``submission.courier_retry``), as a status has; never a failed trigger redelivered at once."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from adapters.servicebus.sender import MessageSender, OutgoingMessage, SendError
from contracts.activities import AlertGivenUp, SendAlertInput
from contracts.messages import OperatorAlert
from contracts.names import OPERATOR_ALERTS_QUEUE, QUEUE_DUPLICATE_DETECTION_MINUTES
from domain.ids import alert_id, bounded_instance_id, url_instance_id
from domain.text import carriable
from observability.events import app_event
from orchestrators.names import DELIVER_ALERT

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
    alert = _built(kind, summary, at, order_id, severity, discriminator, details)
    send_alert(sender, alert)
    return alert


def _built(
    kind: str,
    summary: str,
    at: datetime,
    order_id: str | None,
    severity: Severity,
    discriminator: str | int,
    details: dict[str, Any] | None,
) -> OperatorAlert:
    """The alert, built, and logged as raised (``OperatorAlert``, ERROR), before anything sends it."""
    alert = build_alert(kind, summary, at, order_id, severity, discriminator, details or {})
    app_event(
        "OperatorAlert",
        f"operator alert {kind}: {summary}",
        logging.ERROR,
        alertId=alert.alert_id,
        orderId=order_id,
        alertKind=kind,
    )
    return alert


def send_alert(sender: MessageSender, alert: OperatorAlert) -> None:
    """Sends ``alert`` to ``operator-alerts`` under its id (a repeat collapses in duplicate detection)."""
    sender.send(
        OPERATOR_ALERTS_QUEUE,
        OutgoingMessage(body=alert.to_json(), message_id=alert.alert_id, subject="OperatorAlert"),
    )


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
            summary=alert.get("summary"),  # what the alert said: the alertsUndelivered rule sends operators here
        )
        return False
    return True


# What an orchestration instance id may hold as it is (``domain.ids.url_instance_id`` leaves it unescaped,
# and the Durable extension refuses none of it).
_INSTANCE_SAFE = re.compile(r"[A-Za-z0-9_:-]+")
_INSTANCE_LIMIT = 100


def courier_instance_id(alert_id: str) -> str:
    """The alert courier's instance for the alert ``alert_id``: the id itself (``alert:<kind>:<order>...``),
    bounded to 100 characters with ``:`` before a digest (``bounded_instance_id``, never ``#``). An id with
    anything else in it (a ``#`` a bounded alert id holds, or what a discriminator brought) keeps its safe
    characters and gets the digest of the whole, so two alerts never share a courier."""
    instance = bounded_instance_id(alert_id, _INSTANCE_LIMIT)
    if _INSTANCE_SAFE.fullmatch(instance):
        return instance
    digest = hashlib.sha256(alert_id.encode("utf-8")).hexdigest()[:32]
    head = re.sub(r"[^A-Za-z0-9_:-]", "-", alert_id)[: _INSTANCE_LIMIT - len(digest) - 1]
    return f"{head}:{digest}"


@dataclass(frozen=True)
class OwedAlert:
    """An alert whose send failed where it was raised, for the alert courier (``deliver_alert_v1``) to send
    under the same id: one courier per alert (``instance_id``), so repeats of the same alert share it.
    ``raised_again``: whether handling the message in hand again (a redelivery, its store-retry copy) raises it
    again (False: the alert of another message, settled while this one was handled, such as a deferred notification
    it fetched and dead-lettered; or one the handling itself made untrue to raise again, a refusal's withdrawal:
    ``deferral.recovery``); ``hand_alerts_to_courier`` cannot leave such an alert to the message handled again)."""

    alert: OperatorAlert
    raised_again: bool = True

    @property
    def instance_id(self) -> str:
        return courier_instance_id(self.alert.alert_id)

    def courier_input(self) -> dict[str, Any]:
        """The courier's input: the alert, and ``answersGiveUp`` (its last try answers its give-up, and one that fails
        without answering is repeated: ``orchestrators.alert``)."""
        return SendAlertInput(alert=json.loads(self.alert.to_json()), answers_give_up=True).to_json()


def raise_alert_or_owe(
    sender: MessageSender,
    *,
    kind: str,
    summary: str,
    at: datetime,
    order_id: str | None = None,
    severity: Severity = "error",
    discriminator: str | int = "",
    details: dict[str, Any] | None = None,
) -> OwedAlert | None:
    """``raise_alert`` for a trigger with a message in hand: a send that fails is returned as owed (hand it to
    ``hand_alerts_to_courier`` before the message is settled), never raised, so the message is not abandoned
    and redelivered for its alert."""
    alert = _built(kind, summary, at, order_id, severity, discriminator, details)
    try:
        send_alert(sender, alert)
    except SendError as exc:
        app_event(
            "AlertOwed",
            f"operator alert {kind} not sent now ({exc}); handed to the alert courier",
            logging.WARNING,
            alertId=alert.alert_id,
            orderId=order_id,
            alertKind=kind,
        )
        return OwedAlert(alert)
    return None


def raise_alert_owing(owed: list[OwedAlert] | None, sender: MessageSender, **alert: Any) -> None:
    """``raise_alert`` for code that runs under a trigger with a message in hand and under one without: ``owed``,
    the list the message's trigger hands to ``hand_alerts_to_courier`` before it settles the message, gets the
    alert if its send fails (``raise_alert_or_owe``); None (a caller with no message to spend, the peek sweep's
    timer: it runs again) sends it or raises, as ``raise_alert``. Every caller says which it is."""
    if owed is None:
        raise_alert(sender, **alert)
        return
    item = raise_alert_or_owe(sender, **alert)
    if item is not None:
        owed.append(item)


def send_owed_alert(sender: MessageSender, data: SendAlertInput) -> AlertGivenUp | None:
    """The ``send_alert`` activity (the alert courier's): the owed alert, as built where it was raised, sent
    under its id. A send that fails raises (the courier tries again on its timers); on the courier's last
    try it is also logged ``AlertUndelivered`` (ERROR, for a log-based alert rule: the alert queue itself
    has refused it for about six hours), and answered ``AlertGivenUp`` instead of raised when the try asks for it
    (``answers_give_up``): the courier repeats a last try that fails, which did not log it."""
    alert = OperatorAlert.model_validate(data.alert)
    try:
        send_alert(sender, alert)
    except SendError as exc:
        if not data.last_try:
            raise
        alert_undelivered(alert, f"given up after the courier's last try: {exc}")
        if data.answers_give_up:
            return AlertGivenUp(error=str(exc)[:500])
        raise
    return None


def alert_undelivered(alert: OperatorAlert, why: str) -> None:
    """Logs ``AlertUndelivered`` (ERROR, the event the alertsUndelivered log rule pages on): nothing will send
    ``alert`` any more."""
    app_event(
        "AlertUndelivered",
        f"operator alert {alert.kind} {why}",
        logging.ERROR,
        alertId=alert.alert_id,
        orderId=alert.order_id,
        alertKind=alert.kind,
        summary=alert.summary,
    )


class CourierClient(Protocol):
    """The part of ``DurableOrchestrationClient`` the couriers' hand-overs use (alerts here, statuses in
    ``notifications.status``)."""

    async def start_new(
        self, orchestration_function_name: str, instance_id: str | None = None, client_input: Any | None = None
    ) -> str: ...

    async def get_status(self, instance_id: str) -> Any: ...


# Runtime statuses of a courier still delivering (``OrchestrationRuntimeStatus`` names).
_DELIVERING = frozenset({"Running", "Pending", "Suspended", "ContinuedAsNew"})


async def hand_alerts_to_courier(
    client: CourierClient, owed: Sequence[OwedAlert], sender: MessageSender | None = None
) -> tuple[OwedAlert, ...]:
    """Starts the alert courier for each owed alert (a start refused because the courier of that very alert is still
    delivering it is fine: a redelivery whose first hand-over went through). Returns the alerts Durable did not take
    that handling the message again raises again (``raised_again``), logged ``AlertNotHandedOver`` (WARNING); never
    raises: the trigger has the message handled again later for them (``submission.courier_retry``: a store-retry
    copy, whose handling raises them again under the same ids), or, for a message its handler dead-lettered or in its
    last round, sends them once more (``send_or_page``). Before, such a failure raised: the trigger failed,
    the message was redelivered at once, and a Durable outage of more than a few seconds used up its deliveries and
    dead-lettered it ``MaxDeliveryCountExceeded``. An alert no handling of the message raises again (``raised_again``
    False: a deferred notification the message fetched and dead-lettered is gone) is sent once more through
    ``sender`` instead, and when that fails too logged ``AlertUndelivered`` (``send_or_page``)."""
    again: list[OwedAlert] = []
    for item in owed:
        instance = url_instance_id(item.instance_id)
        try:
            await client.start_new(DELIVER_ALERT, instance, item.courier_input())
        except Exception as exc:
            if await courier_delivering(client, instance):
                pass
            elif item.raised_again:
                app_event(
                    "AlertNotHandedOver",
                    f"operator alert {item.alert.kind}: could not be handed to the alert courier "
                    f"({start_error(exc)}); its message is handled again, which raises it again",
                    logging.WARNING,
                    alertId=item.alert.alert_id,
                    orderId=item.alert.order_id,
                    alertKind=item.alert.kind,
                    instanceId=item.instance_id,
                )
                again.append(item)
                continue
            else:
                await asyncio.to_thread(send_or_page, sender, item, exc)
                continue
        app_event(
            "AlertHandedOver",
            f"operator alert {item.alert.kind}: handed to the alert courier {item.instance_id}",
            alertId=item.alert.alert_id,
            orderId=item.alert.order_id,
            instanceId=item.instance_id,
        )
    return tuple(again)


def start_error(exc: Exception) -> str:
    """What a failed start said: the Durable SDK raises ``Exception(body)``, ``None`` for an error answer without a
    body (an empty 500)."""
    text = str(exc)
    return f"{type(exc).__name__}: an error answer with no body" if text in ("", "None") else text


def send_or_page(sender: MessageSender | None, item: OwedAlert, hand_over: Exception | str) -> None:
    """The last chance of an owed alert that Durable did not take and that no handling of its message raises again
    (a deferred notification's, dead-lettered; one whose message its handler dead-lettered, or is in its last
    store-retry round): sent now, or
    logged ``AlertUndelivered`` (ERROR), the event a log alert rule pages on."""
    if sender is not None:
        try:
            send_alert(sender, item.alert)
        except SendError as exc:
            hand_over = exc
        else:
            return
    alert_undelivered(item.alert, f"neither sent nor handed to the courier, and nothing raises it again: {hand_over}")


async def courier_runtime(client: CourierClient, instance: str) -> str | None:
    """The runtime status of the courier orchestration ``instance`` (an ``OrchestrationRuntimeStatus`` name),
    or None when it cannot be read or the instance is unknown."""
    try:
        status = await client.get_status(instance)
    except Exception:
        return None
    runtime = getattr(status, "runtime_status", None)
    return None if runtime is None else str(getattr(runtime, "name", runtime))


def delivering(runtime: str | None) -> bool:
    """Whether a courier in ``runtime`` is still delivering (so a start of it was refused because it exists)."""
    return runtime in _DELIVERING


async def courier_delivering(client: CourierClient, instance: str) -> bool:
    """Whether the courier orchestration ``instance`` is still delivering; False when its status cannot be read."""
    return delivering(await courier_runtime(client, instance))
