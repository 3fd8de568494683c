"""Review of 425ac6a (store-outage copies): a refusal by the pending cap that cannot be finished is carried
on the copy by ``storeRetryRejected``; where no copy is made (abandon), or where the property is the client's
own, the refusal is lost or is forged."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE
from domain.states import ProcessState
from submission.store_outage import REJECTED_PROPERTY, ROUND_PROPERTY, STORE_RETRY_DELAYS
from tests.contexts import context_with
from tests.fakes import FakeReceivedMessage, RecordingActions, RecordingClient, StateStoreThatFails
from tests.submission.corpus import order


def deliver(functions: dict[str, Any], message: FakeReceivedMessage) -> RecordingActions:
    actions = RecordingActions()
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=message, message_actions=actions, client=RecordingClient()))
    return actions


def cap_full(functions: dict[str, Any], app_context: Any) -> Any:
    from settings import Settings

    ctx = context_with(app_context, settings=Settings.from_env({}, MAX_PENDING="1", MAX_IN_FLIGHT="1"))
    deliver(functions, FakeReceivedMessage.of(order(orderId="a"), "a"))  # Processing (in flight 1 of 1)
    deliver(functions, FakeReceivedMessage.of(order(orderId="b"), "b"))  # Pending: the cap is full
    ctx.counts.clear()
    return ctx


def make_room(functions: dict[str, Any]) -> None:
    cancel = {"type": "CancelOrder", "schemaVersion": 1, "orderId": "b", "reason": "x"}
    deliver(functions, FakeReceivedMessage.of(cancel, "b:cancel"))


def told_and_taken(sender: Any, ctx: Any, order_id: str) -> tuple[list[str], bool]:
    told = [b["status"] for b in sender.bodies("client-statuses") if b["orderId"] == order_id]
    record = ctx.states.get(order_id)
    return told, record is not None and record.process_state is not ProcessState.COMPENSATED


@pytest.mark.cosmos
@pytest.mark.parametrize("why", ["last round", "copy not sent"])
def test_review_store_outage_refusal_that_is_abandoned_is_accepted_by_its_redelivery(
    functions, app_context, sender, why
):
    """Expected (docs/deferral.md: a refused order "is never accepted later, even when the cap has room"):
    an order whose submitter was told ``Rejected`` is not created by a later delivery of the same message.
    At 425ac6a: ``_reject`` publishes ``Rejected``, its release fails (StoreUnavailable), and ``retry_later``
    cannot make the ``storeRetryRejected`` copy (the message is at the last round, or the copy's send
    fails): it abandons. The redelivery is the same message WITHOUT the property (intake.py:94 does not
    apply); by then the cap has room and the order is created: ``Rejected`` then ``Received``."""
    ctx = cap_full(functions, app_context)
    message = FakeReceivedMessage.of(order(orderId="c"), "c")
    if why == "last round":  # e.g. the 10th copy of an order that met a flapping store 10 times
        message.application_properties = {ROUND_PROPERTY: len(STORE_RETRY_DELAYS)}
    else:
        sender.missing.add(ORDERS_QUEUE)  # Service Bus refuses the copy

    down = context_with(ctx, deferrals=StateStoreThatFails(ctx.deferrals, "save"))  # type: ignore[arg-type]
    assert deliver(functions, message).only[0] == "abandon"
    back = context_with(down, deferrals=ctx.deferrals)
    sender.missing.discard(ORDERS_QUEUE)

    make_room(functions)
    back.counts.clear()
    message.delivery_count += 1
    deliver(functions, message)  # the redelivery of the abandoned message

    told, taken = told_and_taken(sender, back, "c")
    assert not ("Rejected" in told and taken), f"order c: told {told}, then taken"


@pytest.mark.cosmos
def test_review_store_outage_client_set_rejected_property_refuses_another_clients_order_without_cap_pressure(
    functions, app_context, sender
):
    """Expected: ``storeRetryRejected`` is the app's note on its own copy; a client's OrderSubmitted that
    sets it is handled like any submission (the pending cap is far from full here).
    At 425ac6a: ``rejected_copy`` trusts the client's property (intake.py:94, before the cap check): the
    order id is marked rejected in its deferral document (``rejectedAt``), an ``OrderRejected`` operator
    alert is raised, and the real submitter's payment notification that arrives before its order is
    dead-lettered ``OrderRejected``; its prepaid order is then accepted without its payment. Before
    425ac6a this needed the pending cap to be full."""
    forged = FakeReceivedMessage.of(order(orderId="victim", replyTo="attacker-statuses"), "forged")
    forged.application_properties = {REJECTED_PROPERTY: True}
    assert deliver(functions, forged).only[0] == "complete"

    note = {
        "type": "PaymentNotification",
        "schemaVersion": 1,
        "notificationId": "n-victim",
        "orderId": "victim",
        "amountCents": 2500,
        "currency": "EUR",
        "providerReference": "psp-n-victim",
    }
    paid = deliver(functions, FakeReceivedMessage.of(note, "n-victim")).only
    assert paid[0] != "deadletter", f"the victim's payment notification was dead-lettered: {paid}"
