"""An accepted order's ``Received`` that Durable did not take, met in its submission's last store-retry round: the
message is completed, the status owed on the order's state record, not abandoned into a dead letter.

Red team of 6ed7d51 (an ``orders`` message whose owed status Durable did not take is handled again as a copy,
``submission/courier_retry.py``): the copy goes through ``store_outage.retry_later``, which abandons a message whose
rounds are used up. A submission that wrote its order in its last round (after an hour of Cosmos DB failures, or
of Durable outages with its ``Received`` failing each time), whose ``Received`` send failed and whose courier Durable
did not take, was abandoned on every delivery until Service Bus dead-lettered it ``MaxDeliveryCountExceeded``: the
dead-letter watch paged an operator for the submission of an order that exists and runs (the case
``SubmissionHandedOver`` settles, seed 6050), while nothing was lost: ``Received`` is marked owed on the record
(``receivedOwed``), for whoever writes it next, or the first attempt says it (the mark given up). Before 6ed7d51 the
message was completed.

Through the registered ``orders`` trigger, the in-process broker and the Cosmos protocol server; the Durable client
is the tests' stub, down for the status courier."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE
from tests.contexts import context_with
from tests.deferral.support import deliver, order
from tests.deferral.test_refusal_status_outlasts_a_durable_outage import DurableDown
from tests.deferral.test_refusal_written_first import Cap, SendsFailing, told
from tests.deferral.test_submission_handed_over_at_its_last_round import LAST, dead_letter_reasons, submit_in_round

pytestmark = pytest.mark.cosmos


def test_a_last_round_submission_whose_received_durable_did_not_take_is_completed_with_received_owed(
    functions: Any, ctx: Any, broker: Any, monkeypatch: Any, caplog: Any
) -> None:
    """Input: p1's submission arrives as its last store-retry copy and is accepted; every send of its ``Received``
    fails, and Durable does not take the status courier, on every delivery Service Bus would make (five).

    Expected: the first delivery completes the message: no dead letter, nothing left on ``orders``, no copy; the
    record owes ``Received`` (``receivedOwed``), which its next writer says.
    Before: abandoned on each delivery (its rounds used up), dead-lettered ``MaxDeliveryCountExceeded``."""
    Cap(monkeypatch, full=False)
    context_with(ctx, sender=SendsFailing(broker, "client-statuses", times=100))
    submit_in_round(broker, order(), LAST, f"p1:store-retry:{LAST}")
    caplog.set_level(logging.INFO)

    deliveries = 0
    while deliveries < 5 and deliver(functions, broker, DurableDown()):  # Service Bus's max delivery count
        deliveries += 1

    assert deliveries == 1
    assert dead_letter_reasons(broker) == []
    assert broker.peek(ORDERS_QUEUE, 10) == []
    assert told(broker) == []
    assert ctx.states.get("p1").received_owed is not None  # said by the record's next writer
    assert [r for r in caplog.records if getattr(r, "event", None) == "StatusNotHandedOver"]
