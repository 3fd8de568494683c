"""Payment notifications dead-lettered ``OrderRejected`` while a refusal of their order stood are named to an
operator when a later submission of the order is accepted: the payment is then for a live order, but sits in
the ``orders`` dead-letter queue, and the alerts sent so far (``OrderRejected``, ``NotificationForRejectedOrder``)
said the order was refused. The order's deferral document lists them (``refusedNotifications``) in the write
that resolves each one's entry, before it is dead-lettered; the accepted submission raises a
``NotificationsForAcceptedOrder`` alert naming them, then takes them off (deferral/recovery.py
``flag_refused_notifications``). A failure or crash anywhere in between leaves them listed, and the message
handled again sends the alert again under the same id.

Through the registered trigger, the in-process broker and Cosmos, as tests/deferral/test_refusal_written_first.py;
the list's rules on the pure document (domain/deferral.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adapters.cosmos.errors import StoreUnavailable
from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE
from domain.deferral import (
    REFUSED_NOTIFICATIONS_KEPT,
    DeferralDocument,
    DeferralReason,
    DeferredEntry,
    EntryStatus,
    notifications_flagged,
    refused_notification,
    rejected,
    with_entry,
    with_status,
)
from orchestrators.names import DELIVER_ALERT
from tests.contexts import context_with
from tests.deferral.support import (
    DurableClientStub,
    alerts,
    deferred_sequence_numbers,
    deliver,
    notification,
    order,
)
from tests.deferral.test_refusal_written_first import Cap, SendsFailing, alert_kinds, submit, told

T = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
FLAG = "NotificationsForAcceptedOrder"


def flagged(broker: Any) -> list[dict[str, Any]]:
    return [a for a in alerts(broker) if a["kind"] == FLAG]


def refused_with_two_notifications(functions: Any, ctx: Any, broker: Any, cap: Cap) -> list[int]:
    """n-1 waits for order p1; M1 (p1) is refused by the pending cap (n-1 released: dead-lettered); n-2 arrives
    while the refusal stands (dead-lettered at once). Returns their sequence numbers."""
    submit(broker, notification(), "n-1")
    assert deliver(functions, broker)
    [n1] = deferred_sequence_numbers(broker)
    cap.full = True
    submit(broker, order())
    assert deliver(functions, broker)
    submit(broker, notification(notification_id="n-2"), "n-2")
    assert deliver(functions, broker)
    dead = broker.dead_letters(ORDERS_QUEUE)
    assert [d.reason for d in dead] == ["OrderRejected", "OrderRejected"]
    numbers = [d.sequence_number for d in dead]
    assert numbers[0] == n1  # the one waiting when the order was refused, then the one after
    return numbers


@pytest.mark.cosmos
def test_an_accepted_submission_names_the_notifications_dead_lettered_while_its_order_was_refused(
    functions, ctx, broker, monkeypatch
):
    """Input: prepaid order p1's payment notification n-1 waits for it; M1 is refused (cap full), which
    dead-letters n-1; n-2 arrives and is dead-lettered too. The cap has room again and the submitter submits
    again (M2, p1:again): accepted.

    Expected (docs/deferral.md, "When a message is deferred"): an operator is told that the order is live after
    all and which notifications to resubmit from the dead-letter queue (their sequence numbers and ids), once;
    the document no longer lists them.
    Before: nothing was raised on acceptance; the last word operators had was that the order was refused, and
    the prepaid order waited for a payment that was in the dead-letter queue until its attempts failed."""
    cap = Cap(monkeypatch, full=False)
    n1, n2 = refused_with_two_notifications(functions, ctx, broker, cap)
    assert [r.sequence_number for r in ctx.deferrals.get("p1").refused_notifications] == [n1, n2]

    cap.full = False
    submit(broker, order(), "p1:again")
    assert deliver(functions, broker)
    assert ctx.states.get("p1") is not None and told(broker) == ["Rejected", "Received"]
    [alert] = flagged(broker)
    assert alert["orderId"] == "p1"
    assert alert["details"]["notifications"] == [
        {"sequenceNumber": n1, "notificationId": "n-1"},
        {"sequenceNumber": n2, "notificationId": "n-2"},
    ]
    assert not ctx.deferrals.get("p1").to_flag()

    submit(broker, order(), "p1:duplicate")  # a later duplicate submission flags nothing again
    assert deliver(functions, broker)
    assert len(flagged(broker)) == 1


@pytest.mark.cosmos
def test_an_alert_that_cannot_be_sent_is_handed_to_the_courier_and_the_message_completed(
    functions, ctx, broker, monkeypatch
):
    """The state record is written, then the alert's send fails (Service Bus send fault).

    Expected: the alert is handed to the alert courier (``deliver_alert_v1``) under its id, before the message is
    completed (none of its deliveries spent on the alert); the notifications stay listed (the document is the
    only other record of them until an alert naming them went out here), so a later submission of the order,
    Service Bus taking sends again, names them again under the same id.
    Before: the failed send abandoned the message, and five in a row dead-lettered it
    ``MaxDeliveryCountExceeded`` (the fast path's attempt started all the same), the alert never sent."""
    cap = Cap(monkeypatch, full=False)
    n1, n2 = refused_with_two_notifications(functions, ctx, broker, cap)
    cap.full = False
    failing = context_with(ctx, sender=SendsFailing(broker, OPERATOR_ALERTS_QUEUE))
    submit(broker, order(), "p1:again")
    client = DurableClientStub()
    assert deliver(functions, broker, client)
    assert ctx.states.get("p1") is not None and flagged(broker) == []
    assert not [m for m in broker.peek(ORDERS_QUEUE, 10) if m.message_id.startswith("p1:again")]  # completed
    assert [d.reason for d in broker.dead_letters(ORDERS_QUEUE)] == ["OrderRejected", "OrderRejected"]
    alert_id = f"alert:{FLAG}:p1:{n1}-{n2}"
    [(_, instance, handed)] = [s for s in client.started if s[0] == DELIVER_ALERT]
    assert instance == alert_id
    assert handed["alert"]["alertId"] == alert_id
    assert [n["sequenceNumber"] for n in handed["alert"]["details"]["notifications"]] == [n1, n2]
    assert ctx.deferrals.get("p1").to_flag()
    context_with(failing, sender=broker)

    submit(broker, order(), "p1:duplicate")  # a later submission of the order, sends working again
    assert deliver(functions, broker)
    [alert] = flagged(broker)
    assert alert["alertId"] == alert_id
    assert not ctx.deferrals.get("p1").to_flag()


class ClearingFails:
    """The deferral log, whose write taking notifications off the list fails (503) while ``failing`` is set: a
    crash after the alert was sent, before the document says so."""

    def __init__(self, log: Any) -> None:
        self._log, self.failing = log, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def save(self, doc: DeferralDocument) -> DeferralDocument:
        stored = self._log.get(doc.order_id)
        if self.failing and stored is not None and stored.to_flag() and not doc.to_flag():
            raise StoreUnavailable("state container: 503 on replace")
        saved: DeferralDocument = self._log.save(doc)
        return saved


@pytest.mark.cosmos
def test_an_alert_sent_whose_write_failed_is_sent_again_under_the_same_id(functions, ctx, broker, monkeypatch):
    """The alert is sent, then the write that takes the notifications off fails: the message is handled again
    and sends the alert again, under the same id (Service Bus keeps one), then takes them off."""
    cap = Cap(monkeypatch, full=False)
    refused_with_two_notifications(functions, ctx, broker, cap)
    cap.full = False
    clearing = ClearingFails(ctx.deferrals)
    failing = context_with(ctx, deferrals=clearing)
    submit(broker, order(), "p1:again")
    assert deliver(functions, broker)
    assert len(flagged(broker)) == 1 and ctx.deferrals.get("p1").to_flag()
    clearing.failing = False

    assert deliver(functions, broker)  # abandoned: redelivered
    context_with(failing, deferrals=ctx.deferrals)
    assert len(flagged(broker)) == 1 and broker.counters(OPERATOR_ALERTS_QUEUE).duplicates_dropped == 1
    assert not ctx.deferrals.get("p1").to_flag()
    assert alert_kinds(broker).count("OrderRejected") == 1


def waiting(doc: DeferralDocument, seq: int) -> DeferralDocument:
    entry = DeferredEntry(
        sequence_number=seq,
        message_id=f"n-{seq}",
        message_type="PaymentNotification",
        reason=DeferralReason.ORDER_NOT_SUBMITTED,
        deferred_at=T,
        recorded_by="submission",
        updated_at=T,
        notification_id=f"n-{seq}",
    )
    return with_entry(doc, entry, T)


def test_the_list_is_bounded_and_each_notification_is_listed_once() -> None:
    doc = rejected(DeferralDocument.empty("p1", T), T, 7)  # a refusal stands
    for seq in range(1, REFUSED_NOTIFICATIONS_KEPT + 4):
        doc = refused_notification(waiting(doc, seq), seq, T, "OrderRejected: refused")
    doc = refused_notification(doc, 1, T, "OrderRejected: refused")  # decided again (its redelivery)
    doc = refused_notification(doc, REFUSED_NOTIFICATIONS_KEPT + 3, T, "OrderRejected: refused")
    assert [r.sequence_number for r in doc.refused_notifications] == list(range(1, REFUSED_NOTIFICATIONS_KEPT + 1))
    assert doc.refused_notifications[0].notification_id == "n-1"
    assert doc.refused_notifications_unlisted == 3


def test_a_listed_notification_applied_after_all_is_taken_off_and_later_ones_stay_after_the_alert() -> None:
    doc = rejected(DeferralDocument.empty("p1", T), T, 7)  # a refusal stands
    for seq in (1, 2):
        doc = refused_notification(waiting(doc, seq), seq, T, "OrderRejected: refused")
    doc = with_status(doc, 1, EntryStatus.APPLIED, T)  # its redelivery found the order
    assert [r.sequence_number for r in doc.refused_notifications] == [2]

    alerted = list(doc.refused_notifications)
    doc = refused_notification(waiting(doc, 3), 3, T + timedelta(seconds=1), "OrderRejected: refused again")
    doc = notifications_flagged(doc, alerted, 0, T + timedelta(seconds=2))
    assert [r.sequence_number for r in doc.refused_notifications] == [3]  # listed after the alert was built
