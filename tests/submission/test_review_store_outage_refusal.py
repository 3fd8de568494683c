"""Review of 425ac6a (store-outage copies): a refusal by the pending cap that could not be finished was carried
on the copy by the application property ``storeRetryRejected``, which a client can set on its own message
too: it refused another client's order id without the cap being full. That property means nothing now. A
refusal is written on the order's deferral document, naming the refused message by its sequence number, before
anyone is told, and a copy carries its original's number (``storeRetryOriginal``), which a client can set too:
it finishes only a refusal already written for that very message and order
(tests/deferral/test_refusal_written_first.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.states import ProcessState
from tests.contexts import context_with
from tests.fakes import FakeReceivedMessage, RecordingActions, RecordingClient
from tests.submission.corpus import order


def deliver(functions: dict[str, Any], message: FakeReceivedMessage) -> RecordingActions:
    actions = RecordingActions()
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=message, message_actions=actions, client=RecordingClient()))
    return actions


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
    forged.application_properties = {"storeRetryRejected": True}  # 425ac6a's note on a refused order's copy
    assert deliver(functions, forged).only[0] == "complete"

    # the property means nothing: the order is taken as any submission under the cap, nothing is refused
    record = app_context.states.get("victim")
    assert record is not None and record.process_state is ProcessState.PROCESSING
    assert "OrderRejected" not in [a["kind"] for a in sender.bodies(OPERATOR_ALERTS_QUEUE)]
    doc = app_context.deferrals.get("victim")
    assert doc is None or doc.rejected_at is None


@pytest.mark.cosmos
def test_a_client_set_original_sequence_number_refuses_nothing_that_was_not_refused(functions, app_context, sender):
    """Expected: ``storeRetryOriginal`` (with ``storeRetryRound``) on a client's own OrderSubmitted names the
    message as sent; it matters only to an order whose deferral document records the refusal of that very
    message. Naming another order's refused message refuses nothing; a later submission of the refused order
    itself is judged afresh."""
    from contracts.store_retry import ORIGINAL_PROPERTY, ROUND_PROPERTY
    from settings import Settings

    ctx = context_with(app_context, settings=Settings.from_env({}, MAX_PENDING="1", MAX_IN_FLIGHT="1"))
    deliver(functions, FakeReceivedMessage.of(order(orderId="a"), "a"))  # Processing (in flight 1 of 1)
    deliver(functions, FakeReceivedMessage.of(order(orderId="b"), "b"))  # Pending: the cap is full
    ctx.counts.clear()
    refused = FakeReceivedMessage.of(order(orderId="victim"), "victim")
    assert deliver(functions, refused).only[0] == "complete"
    marked = ctx.deferrals.get("victim")
    assert marked is not None and marked.refuses(refused.sequence_number)
    cancel = {"type": "CancelOrder", "schemaVersion": 1, "orderId": "b", "reason": "x"}
    deliver(functions, FakeReceivedMessage.of(cancel, "b:cancel"))  # the cap has room again
    ctx.counts.clear()

    forged = FakeReceivedMessage.of(order(orderId="other", replyTo="attacker-statuses"), "other")
    forged.application_properties = {ROUND_PROPERTY: 1, ORIGINAL_PROPERTY: refused.sequence_number}
    assert deliver(functions, forged).only[0] == "complete"
    assert ctx.states.get("other") is not None  # another order's refusal names nothing of this one

    roomy = context_with(ctx, settings=Settings.from_env({}, MAX_PENDING="5", MAX_IN_FLIGHT="1"))  # "other" waits
    again = FakeReceivedMessage.of(order(orderId="victim"), "victim")  # "submit again later"
    assert deliver(functions, again).only[0] == "complete"
    assert roomy.states.get("victim") is not None
