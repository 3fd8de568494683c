"""An alert an ``orders`` message owes (its send failed) that Durable does not take either: the message is handled
again later as a store-retry copy whose handling raises the alert again (``submission/courier_retry.py``), as for a
status, never a failed trigger redelivered at once (``tests/deferral/test_refusal_alert_outlasts_the_delivery_count.py``
for the refusal's ``OrderRejected``). Here the other settlements and alerts:

* a message the handler dead-letters (``ConflictingOrderData``, ``PaymentAmountMismatch``) is not copied: it is
  dead-lettered as it came (its MessageId, its producer's application properties), and its alert, which nothing
  raises again then, is sent once more by the trigger, or logged ``AlertUndelivered`` (red team of 2d6ba31: its copy
  was the dead letter, the producer's properties gone);
* a message in its last store-retry round cannot be copied: its alert is sent once more by the trigger, or logged
  ``AlertUndelivered`` (ERROR: the alertsUndelivered rule pages), and the handler's settlement stands; abandoned, it
  was redelivered until Service Bus dead-lettered it ``MaxDeliveryCountExceeded``;
* an alert no handling of the message raises again is sent once more by the trigger (``raised_again`` False): the
  ``NotificationsForAcceptedOrder`` of a refusal withdrawn at once because another submission of the order was
  accepted meanwhile (the refused message handled again is completed naming nothing: a copy of it raised nothing);
* a message the handler abandons or defers keeps its settlement: it is handled again anyway.

Through the registered ``orders`` trigger, the in-process broker and the Cosmos protocol server; the Durable client is
the tests' stub, its starts of the alert courier failing and its status reads knowing of no instance."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage, PropertyValue
from adapters.servicebus.settlement import Settlement
from contracts.messages import OperatorAlert
from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE
from contracts.store_retry import retry_round
from notifications.alerts import OwedAlert
from submission.courier_retry import settlement_after_hand_over
from submission.result import IntakeResult
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import context_with
from tests.deferral.support import TOTAL, alerts, deliver, notification, order, send
from tests.deferral.test_refusal_alert_outlasts_the_delivery_count import DurableDown
from tests.deferral.test_refusal_and_acceptance_at_once import AcceptedBeforeTheMark
from tests.deferral.test_refusal_written_first import Cap, SendsFailing, submit, told
from tests.deferral.test_refused_notifications_flagged import flagged
from tests.deferral.test_submission_handed_over_at_its_last_round import LAST, submit_in_round

pytestmark = pytest.mark.cosmos


def _events(caplog: Any, name: str) -> list[Any]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


def _sent_once_more_or_paged(broker: Any, caplog: Any, sends_failing: int) -> str:
    """The id of the one alert the trigger sent once more (its sends failing once: the handler's), or, every send
    failing, logged ``AlertUndelivered`` (ERROR) for."""
    if sends_failing == 1:
        [alert] = alerts(broker)
        assert _events(caplog, "AlertUndelivered") == []
        return str(alert["alertId"])
    assert alerts(broker) == []
    [undelivered] = _events(caplog, "AlertUndelivered")
    assert undelivered.levelno == logging.ERROR
    return str(undelivered.alertId)


# The producer's own: a dead letter an operator resubmits or reads carries them as the producer sent them
PRODUCER_PROPERTIES: dict[str, PropertyValue] = {"producerTrace": "trace-42", "tenant": 7}


def _from_producer(broker: Any, body: dict[str, Any], message_id: str) -> None:
    broker.send_from_client(
        ORDERS_QUEUE,
        OutgoingMessage(
            body=json.dumps(body),
            message_id=message_id,
            subject=body["type"],
            application_properties=PRODUCER_PROPERTIES,
        ),
    )


@pytest.mark.parametrize("sends_failing", [1, 99])
@pytest.mark.parametrize(
    ("body", "reason"),  # the dead letter's reason, the alert's kind
    [(order(shipTo="2 Other St"), "ConflictingOrderData"), (notification(amount=TOTAL - 1), "PaymentAmountMismatch")],
)
def test_a_message_dead_lettered_whose_alert_durable_does_not_take_is_dead_lettered_as_it_came(
    functions: Any,
    ctx: Any,
    broker: Any,
    clock: Any,
    monkeypatch: Any,
    caplog: Any,
    body: dict[str, Any],
    reason: str,
    sends_failing: int,
) -> None:
    """Input: p1 accepted; then, from its producer (its MessageId, and application properties of its own), a second
    submission of p1 with other data, or a notification of p1 for another amount; the send of its alert failing (once;
    always) and Durable not taking the alert courier.

    Expected: the message is dead-lettered under its reason at once, as it came (its MessageId and the producer's
    application properties), no copy of it; the trigger sends the alert once more under its id, or, that send failing
    too, logs ``AlertUndelivered`` (ERROR: the alertsUndelivered rule pages) naming it.
    Before (2d6ba31): the message was completed with a store-retry copy (round 1, due in 10 s), and the copy, judged
    again, was the dead letter: under the copy's MessageId, only its round and original in its properties (the
    producer's gone). Before that (bb32f9b): the trigger failed, and the redelivery dead-lettered the message as it
    came, or ``MaxDeliveryCountExceeded`` once a Durable outage outlasted its five deliveries."""
    Cap(monkeypatch, full=False)
    send(broker, order())
    assert deliver(functions, broker)  # p1 accepted
    context_with(ctx, sender=SendsFailing(broker, OPERATOR_ALERTS_QUEUE, times=sends_failing))
    caplog.set_level(logging.INFO)
    _from_producer(broker, body, "p1:from-producer")

    assert deliver(functions, broker, DurableDown())

    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert (dead.reason, dead.message_id) == (reason, "p1:from-producer")
    assert dict(dead.application_properties) == PRODUCER_PROPERTIES and retry_round(dead.application_properties) == 0
    assert broker.peek(ORDERS_QUEUE, 10) == []  # no copy
    clock.advance(STORE_RETRY_DELAYS[0] + timedelta(seconds=1))
    assert not deliver(functions, broker)
    assert _sent_once_more_or_paged(broker, caplog, sends_failing).startswith(f"alert:{reason}:p1:")


@pytest.mark.parametrize("sends_failing", [1, 99])
def test_an_alert_durable_does_not_take_in_the_last_round_is_sent_by_the_trigger_or_paged(
    functions: Any, ctx: Any, broker: Any, monkeypatch: Any, caplog: Any, sends_failing: int
) -> None:
    """Input: p1 refused in its last store-retry round (round 61: no copy can follow), the send of its alert failing
    (once; always) and Durable not taking the courier.

    Expected: the message is completed (no copy, no redelivery); the trigger sends the alert once more under its id,
    or, that send failing too, logs ``AlertUndelivered`` (ERROR) naming it.
    Before: abandoned for a copy that cannot be made, it was redelivered at once until Service Bus dead-lettered it
    ``MaxDeliveryCountExceeded`` (before that, the trigger failed: the same)."""
    Cap(monkeypatch, full=True)
    context_with(ctx, sender=SendsFailing(broker, OPERATOR_ALERTS_QUEUE, times=sends_failing))
    submit_in_round(broker, order(), LAST, "p1:store-retry:61")
    caplog.set_level(logging.INFO)
    settled: list[str] = []

    class Actions:
        def complete(self, message: Any) -> None:
            settled.append("complete")
            broker.actions.complete(message)

        def abandon(self, message: Any) -> None:
            settled.append("abandon")
            broker.actions.abandon(message)

    message = broker.receive(ORDERS_QUEUE)
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=message, message_actions=Actions(), client=DurableDown()))

    assert settled == ["complete"] and broker.peek(ORDERS_QUEUE, 10) == []
    assert told(broker) == ["Rejected"]
    alert_id = f"alert:OrderRejected:p1:{message.sequence_number}"
    assert _sent_once_more_or_paged(broker, caplog, sends_failing) == alert_id


def test_the_alert_of_a_refusal_withdrawn_at_once_is_sent_by_the_trigger_not_left_to_a_copy(
    functions: Any, ctx: Any, broker: Any, monkeypatch: Any
) -> None:
    """Input: M1 (prepaid order p1) refused; notification n-1 dead-lettered ``OrderRejected`` under that refusal (listed
    to be named). M3 (p1 again) is judged with the cap full; before its mark is written, M2 (p1 again) is accepted by
    another instance (its own ``NotificationsForAcceptedOrder`` send fails: owed to its courier). M3 finds the record
    after its mark, withdraws it and names n-1: that send fails too, and Durable does not take M3's courier.

    Expected: M3's trigger sends the ``NotificationsForAcceptedOrder`` alert itself and completes M3 with no copy.
    Before: M3 was handed to a store-retry copy (the alert's ``raised_again``), and the copy, finding its refusal
    withdrawn, completed naming nothing (``RefusalSuperseded``): the alert left to a handling that never raises it."""
    cap = Cap(monkeypatch, full=True)
    submit(broker, order())
    assert deliver(functions, broker)  # M1 refused
    submit(broker, notification(), "n-1")
    assert deliver(functions, broker)  # n-1 dead-lettered under the refusal, listed
    assert [d.message_id for d in broker.dead_letters(ORDERS_QUEUE)] == ["n-1"]
    submit(broker, order(), "p1:m3")
    submit(broker, order(), "p1:m2")
    racing = AcceptedBeforeTheMark(ctx.deferrals, functions, broker, cap)
    failing = context_with(ctx, deferrals=racing, sender=SendsFailing(broker, OPERATOR_ALERTS_QUEUE, times=2))

    assert deliver(functions, broker, DurableDown())  # M3, and M2 in the middle

    assert racing.interleaved
    context_with(failing, deferrals=ctx.deferrals, sender=broker)
    assert ctx.states.get("p1") is not None and told(broker) == ["Rejected", "Received"]
    [alert] = flagged(broker)
    assert [n["notificationId"] for n in alert["details"]["notifications"]] == ["n-1"]
    assert broker.peek(ORDERS_QUEUE, 10) == []  # no copy of M3


def _owed_alert() -> OwedAlert:
    alert = OperatorAlert(
        alert_id="alert:ConflictingOrderData:p1:x",
        kind="ConflictingOrderData",
        severity="warning",
        order_id="p1",
        summary="conflict",
        details={},
        at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    return OwedAlert(alert)


@pytest.mark.parametrize(
    ("settlement", "copied"),
    [
        (Settlement.abandon("store down"), False),
        (Settlement.defer(), False),
        (Settlement.deadletter("ConflictingOrderData", "conflict"), False),
        (Settlement.complete(), True),
    ],
)
def test_a_message_is_copied_for_an_alert_durable_did_not_take_unless_it_is_handled_again_anyway(
    functions: Any, ctx: Any, broker: Any, settlement: Settlement, copied: bool
) -> None:
    """A message the handler abandons (redelivered) or defers (its look again fetches it) is handled again anyway and
    keeps the handler's settlement, nothing sent; one it dead-letters keeps its settlement too (dead-lettered as it
    came, its alert sent by the trigger); one it completes is handed to a copy (completed)."""
    send(broker, order(), "p1")
    message = broker.receive(ORDERS_QUEUE)
    context_with(ctx, sender=broker)
    result = IntakeResult(settlement, alerts=(_owed_alert(),), kind="OrderSubmitted")

    after = settlement_after_hand_over(ctx, message, result, (), (_owed_alert(),))

    copies = [m for m in broker.peek(ORDERS_QUEUE, 10) if m.sequence_number != message.sequence_number]
    if copied:
        assert after == Settlement.complete() and [retry_round(m.application_properties) for m in copies] == [1]
    else:
        assert after == settlement and copies == []
    assert settlement_after_hand_over(ctx, message, result, (), ()) == settlement  # every alert taken: as decided
