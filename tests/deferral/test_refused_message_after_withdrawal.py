"""A refused message handled again after a later submission of the order was accepted is never accepted
(domain/deferral.py ``was_refused``; submission/intake.py ``submit_order``): its submitter heard
``Rejected``. It is told again (the same status MessageId and alert id), and nothing is written: not the
order with the refused message's data, and not the refusal again, which would dead-letter the payment
notification waiting for the accepted submission. Found by a red team: withdrawing the refusal erased
which message was refused, so its redelivery was judged afresh.

Through the registered trigger, the in-process broker and Cosmos, as tests/deferral/test_refusal_written_first.py."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.errors import StoreUnavailable
from contracts.names import ORDERS_QUEUE
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import context_with
from tests.deferral.support import DurableClientStub, deferred_sequence_numbers, deliver, notification, order
from tests.deferral.test_refusal_written_first import Cap, SettlementLost, alert_kinds, submit, told

pytestmark = pytest.mark.cosmos


class OrderCreateFails:
    """The order database whose ``create_or_verify`` fails (503) while ``failing`` is set."""

    def __init__(self, store: Any) -> None:
        self._store, self.failing = store, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def create_or_verify(self, doc: dict[str, Any]) -> Any:
        if self.failing:
            raise StoreUnavailable("orders container: 503 on create")
        return self._store.create_or_verify(doc)


def refused_and_told_with_settlement_lost(functions: Any, broker: Any) -> int:
    """M1 refused (cap full): alert raised, ``Rejected`` told, then its settlement lost (host stopped / lock
    lost), so Service Bus will redeliver it after its lock expires. Returns its sequence number."""
    submit(broker, order())
    message = broker.receive(ORDERS_QUEUE)
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=message, message_actions=SettlementLost(), client=DurableClientStub()))
    assert told(broker) == ["Rejected"] and alert_kinds(broker) == ["OrderRejected"]
    return int(message.sequence_number)


def test_a_refused_and_told_message_handled_again_after_a_withdrawal_is_never_accepted(
    functions, ctx, broker, clock, monkeypatch
):
    """Input: M1 (order p1, 2 x SKU-1) refused by the pending cap, its submitter told ``Rejected``, settlement
    lost. The submitter "submits again later" with corrected data, M2 (3 x SKU-1, MessageId p1:again): the
    cap has room, M2 withdraws the refusal, then its order write meets a 503 (store-retry copy due in 10 s).
    Meanwhile M1's lock expires and Service Bus redelivers it.

    Expected (docs/design.md MAX_PENDING row: "Once the mark is written, the same message handled again (a
    redelivery ...) finishes the refusal instead of being judged afresh"; product rule: an order a submitter
    heard was Rejected is never processed): M1's redelivery finishes its refusal; M2 (its copy) is accepted
    with M2's data.
    Actual: the withdrawal cleared ``rejectedSequenceNumber``, so M1's redelivery is judged afresh and
    ACCEPTED: the order is written and processed with M1's refused data, M1's submitter hears ``Received``
    after ``Rejected``, and M2's copy is dead-lettered ``ConflictingOrderData``."""
    cap = Cap(monkeypatch, full=True)
    refused_and_told_with_settlement_lost(functions, broker)

    cap.full = False
    orders = OrderCreateFails(ctx.orders)
    failing = context_with(ctx, orders=orders)
    corrected = order(lines=[{"sku": "SKU-1", "quantity": 3, "unitPriceCents": 1250}])
    submit(broker, corrected, "p1:again")
    assert deliver(functions, broker)  # M2: withdraws the refusal, its order write fails: copied for later
    assert ctx.deferrals.get("p1").rejected_at is None  # withdrawn
    orders.failing = False
    context_with(failing, orders=ctx.orders)

    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))  # M1's lock has expired
    while deliver(functions, broker):  # M1's redelivery (lowest sequence number first), then M2's copy
        pass

    stored = ctx.orders.get("p1")
    dead = [(d.reason, json.loads(d.body)["lines"][0]["quantity"]) for d in broker.dead_letters(ORDERS_QUEUE)]
    assert stored["lines"][0]["quantity"] == 3, (
        f"the order was processed with the refused message's data; dead letters: {dead}; told: {told(broker)}"
    )


def test_a_refused_message_handled_again_after_a_withdrawal_leaves_the_accepted_orders_payment_waiting(
    functions, ctx, broker, clock, monkeypatch
):
    """Input: prepaid order p1. M1 refused (cap full), told ``Rejected``, settlement lost. M2 ("submit again
    later", p1:again) finds room, withdraws the refusal, its order write meets a 503 (copy due in 10 s). The
    payment notification n-1 arrives: the refusal withdrawn, it waits for the order (as bb588f7 intends).
    M1's lock expires while the cap is full again: its redelivery, the refusal withdrawn, is judged afresh and
    refused again, which writes the mark again and dead-letters the waiting n-1. Then the cap has room and
    M2's copy is accepted.

    Expected (bb588f7: "Notifications from then on wait for the order and are applied to it"; product rule:
    no payment notification lost): n-1 is applied to the accepted order.
    Actual: n-1 is dead-lettered ``OrderRejected`` and the accepted prepaid order has no payment (it waits
    for one that is in the dead-letter queue; no alert says the order was accepted after all)."""
    cap = Cap(monkeypatch, full=True)
    m1 = refused_and_told_with_settlement_lost(functions, broker)

    cap.full = False
    orders = OrderCreateFails(ctx.orders)
    failing = context_with(ctx, orders=orders)
    submit(broker, order(), "p1:again")
    assert deliver(functions, broker)  # M2: refusal withdrawn, order write failed: copy due in 10 s
    orders.failing = False
    context_with(failing, orders=ctx.orders)
    assert ctx.deferrals.get("p1").rejected_at is None

    submit(broker, notification(), "n-1")
    assert deliver(functions, broker)  # waits for the order: the refusal is withdrawn
    assert broker.dead_letters(ORDERS_QUEUE) == [] and len(deferred_sequence_numbers(broker)) == 1

    cap.full = True
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))
    redelivered = broker.receive(ORDERS_QUEUE)
    assert redelivered.sequence_number == m1  # M1's redelivery: lowest sequence number first
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=redelivered, message_actions=broker.actions, client=DurableClientStub()))

    cap.full = False
    for _ in range(5):
        while deliver(functions, broker):
            pass
        clock.advance(STORE_RETRY_DELAYS[1])

    record = ctx.states.get("p1")
    assert record is not None, "M2 was never accepted"
    dead = [d.reason for d in broker.dead_letters(ORDERS_QUEUE)]
    assert record.payment is not None, (
        f"accepted prepaid order p1 has no payment; orders dead letters: {dead}; alerts: {alert_kinds(broker)}; "
        f"told: {told(broker)}; still deferred: {deferred_sequence_numbers(broker)}"
    )


def test_a_refused_message_handled_again_after_an_accepted_submission_says_nothing(ctx) -> None:
    """Once a later submission of the order was accepted, that one speaks for the order: the refused
    message handled again (long after its status's duplicate-detection window) is completed, writing
    nothing and telling nothing (a late ``Rejected`` would contradict the accepted order's ``Received``).
    While a refusal of the order stands, it is told again instead (the tests above)."""
    from dataclasses import replace as replaced

    from domain.deferral import DeferralDocument, accepted, rejected
    from submission.intake import handle_orders_message
    from tests.fakes import FakeReceivedMessage, RecordingSender

    quiet = context_with(ctx, sender=RecordingSender())
    refused = FakeReceivedMessage.of(order())
    now = ctx.clock.now()
    doc = accepted(rejected(DeferralDocument.empty("p1", now), now, refused.sequence_number), now)
    ctx.deferrals.save(replaced(doc, version=None))

    result = handle_orders_message(quiet, refused)
    assert result.settlement.kind == "complete" and result.owed == ()
    assert isinstance(quiet.sender, RecordingSender) and quiet.sender.sent == []
    assert ctx.orders.get("p1") is None and ctx.states.get("p1") is None
