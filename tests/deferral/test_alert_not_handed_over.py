"""An alert an ``orders`` message owes (its send failed) that Durable does not take either: the message is handled
again later as a store-retry copy whose handling raises the alert again (``submission/courier_retry.py``), as for a
status, never a failed trigger redelivered at once (``tests/deferral/test_refusal_alert_outlasts_the_delivery_count.py``
for the refusal's ``OrderRejected``). Here the other settlements and alerts:

* a message the handler dead-letters (``ConflictingOrderData``) is copied too: dead-lettered now, nothing would raise
  its alert again; the copy is judged again and dead-lettered under the same reason, its alert sent;
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

from adapters.servicebus.settlement import Settlement
from contracts.messages import OperatorAlert
from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE
from contracts.store_retry import retry_round
from notifications.alerts import OwedAlert
from submission.courier_retry import settlement_after_hand_over
from submission.result import IntakeResult
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import context_with
from tests.deferral.support import alerts, deliver, notification, order, send
from tests.deferral.test_refusal_alert_outlasts_the_delivery_count import DurableDown
from tests.deferral.test_refusal_and_acceptance_at_once import AcceptedBeforeTheMark
from tests.deferral.test_refusal_written_first import Cap, SendsFailing, submit, told
from tests.deferral.test_refused_notifications_flagged import flagged
from tests.deferral.test_submission_handed_over_at_its_last_round import LAST, submit_in_round

pytestmark = pytest.mark.cosmos


def _events(caplog: Any, name: str) -> list[Any]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


def test_a_conflicting_submission_whose_alert_durable_does_not_take_is_dead_lettered_by_its_copy(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    """Input: p1 accepted; a second submission of p1 with other data, the send of its ``ConflictingOrderData`` alert
    failing once and Durable not taking the alert courier.

    Expected: the delivery completes the message with a copy of it (round 1, due in 10 s), nothing dead-lettered yet;
    the copy, handled once Durable is back, is dead-lettered ``ConflictingOrderData`` and sends the alert.
    Before: the trigger failed (``AlertHandOverFailed``) and the message was redelivered at once: a Durable outage of
    more than a few seconds dead-lettered it ``MaxDeliveryCountExceeded``, the alert never sent."""
    Cap(monkeypatch, full=False)
    send(broker, order())
    assert deliver(functions, broker)  # p1 accepted
    context_with(ctx, sender=SendsFailing(broker, OPERATOR_ALERTS_QUEUE, times=1))
    send(broker, order(shipTo="2 Other St"), "p1:conflicting")

    assert deliver(functions, broker, DurableDown())

    [copy] = broker.peek(ORDERS_QUEUE, 10)
    assert retry_round(copy.application_properties) == 1 and json.loads(copy.body)["shipTo"] == "2 Other St"
    assert broker.dead_letters(ORDERS_QUEUE) == [] and alerts(broker) == []

    clock.advance(STORE_RETRY_DELAYS[0] + timedelta(seconds=1))
    assert deliver(functions, broker)

    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert dead.reason == "ConflictingOrderData" and dead.message_id == copy.message_id
    assert [a["kind"] for a in alerts(broker)] == ["ConflictingOrderData"]
    assert broker.peek(ORDERS_QUEUE, 10) == []


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
    if sends_failing == 1:
        assert [a["alertId"] for a in alerts(broker)] == [alert_id]
        assert _events(caplog, "AlertUndelivered") == []
    else:
        assert alerts(broker) == []
        [undelivered] = _events(caplog, "AlertUndelivered")
        assert undelivered.levelno == logging.ERROR and undelivered.alertId == alert_id


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
        (Settlement.deadletter("ConflictingOrderData", "conflict"), True),
        (Settlement.complete(), True),
    ],
)
def test_a_message_is_copied_for_an_alert_durable_did_not_take_unless_it_is_handled_again_anyway(
    functions: Any, ctx: Any, broker: Any, settlement: Settlement, copied: bool
) -> None:
    """A message the handler abandons (redelivered) or defers (its look again fetches it) is handled again anyway and
    keeps the handler's settlement, nothing sent; one it completes or dead-letters is handed to a copy (completed)."""
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
