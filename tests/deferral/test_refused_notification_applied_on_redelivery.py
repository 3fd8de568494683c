"""A payment notification dead-lettered ``OrderRejected`` on delivery while a refusal of its order stood is listed
on the order's deferral document (``refusedNotifications``), to be named to an operator once a submission of the
order is accepted. If its dead-letter settlement never reached Service Bus (the host stopped, the lock was lost),
the message comes back; once the order was accepted it is applied to the order, and it is not in the dead-letter
queue: it is taken off the list (docs/deferral.md, "When a message is deferred": "one applied after all (its
redelivery found the order) is taken off"), so no alert asks an operator to resubmit a payment that was applied.

Through the registered trigger, the in-process broker and Cosmos, as
tests/deferral/test_refused_notifications_flagged.py."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE
from domain.deferral import EntryStatus
from tests.contexts import context_with
from tests.deferral.support import DurableClientStub, deliver, notification, order
from tests.deferral.test_refusal_alert_outlasts_the_delivery_count import DurableDown
from tests.deferral.test_refusal_written_first import Cap, SendsFailing, SettlementLost, alert_kinds, submit, told
from tests.deferral.test_refused_notifications_flagged import flagged

pytestmark = pytest.mark.cosmos


def test_a_listed_notification_applied_by_its_redelivery_is_not_named_to_an_operator(
    functions, ctx, broker, clock, monkeypatch
):
    """Input: M1 (prepaid order p1) is refused by the pending cap; notification n-1 is delivered, found for a
    refused order and dead-lettered ``OrderRejected``, but its settlement is lost. The cap has room: M2 (p1 again)
    is accepted, its state record written, but the ``NotificationsForAcceptedOrder`` alert's send fails and the
    alert courier cannot take it either (Durable unreachable: M2 is completed, a copy of it due later). n-1's
    lock expires and Service Bus delivers it again before M2's copy: the order exists, the payment is applied. Then
    M2's copy.

    Expected: n-1's entry says ``Applied``, the document lists nothing to flag, and no alert asks for n-1 to be
    resubmitted (it is on the order, not in the dead-letter queue).
    Before: the entry stayed ``DeadLettered`` (a decision on delivery settles only an entry still waiting) and
    listed, and M2's redelivery raised ``NotificationsForAcceptedOrder`` naming it."""
    cap = Cap(monkeypatch, full=True)
    submit(broker, order())
    assert deliver(functions, broker)  # M1 refused
    submit(broker, notification(), "n-1")
    note = broker.receive(ORDERS_QUEUE)
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=note, message_actions=SettlementLost(), client=DurableClientStub()))
    assert [r.sequence_number for r in ctx.deferrals.get("p1").refused_notifications] == [note.sequence_number]

    cap.full = False
    failing = context_with(ctx, sender=SendsFailing(broker, OPERATOR_ALERTS_QUEUE))
    submit(broker, order(), "p1:again")
    m2 = broker.receive(ORDERS_QUEUE)
    # M2: accepted, its alert neither sent nor handed over: completed, a copy of it handled again later
    asyncio.run(fn(message=m2, message_actions=broker.actions, client=DurableDown()))
    context_with(failing, sender=broker)
    assert ctx.states.get("p1") is not None and flagged(broker) == []

    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))
    redelivered = broker.receive(ORDERS_QUEUE)
    assert redelivered is not None and redelivered.sequence_number == note.sequence_number
    asyncio.run(fn(message=redelivered, message_actions=broker.actions, client=DurableClientStub()))
    assert ctx.states.get("p1").payment.sequence_number == note.sequence_number  # applied
    assert deliver(functions, broker)  # M2 again (its copy)
    assert told(broker) == ["Rejected", "Received"]

    doc = ctx.deferrals.get("p1")
    assert doc.entry(note.sequence_number).status is EntryStatus.APPLIED
    assert not doc.to_flag()
    assert flagged(broker) == []
    assert broker.dead_letters(ORDERS_QUEUE) == []
    assert "NotificationForRejectedOrder" in alert_kinds(broker)
