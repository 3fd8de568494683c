"""Review of 425ac6a (store-outage copies): a refusal by the pending cap that could not be finished was carried
on the copy by the application property ``storeRetryRejected``, which a client can set on its own message
too: it refused another client's order id without the cap being full. The refusal is now dead-lettered
``OrderRejected`` instead (tests/submission/test_redteam_store_outage_intake.py) and the property means
nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.states import ProcessState
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
