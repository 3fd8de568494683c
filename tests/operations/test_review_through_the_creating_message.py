"""The two rules together, through the real runtime: the message that created the record, handled again
while the attempt is paused for an operator's review (``submittedAs``: it says ``Received`` whatever the
order did since), finds the submitter's status queue refusing and marks ``Received`` owed on the record, a
side note (``domain.records.SIDE_NOTES``). The review still waits: the ops API lists it and takes an
answer, the paused attempt acts on it, and its next fenced write says the owed ``Received`` and clears
the mark."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage, SendError
from domain.records import RECEIVED_OWED
from domain.review import answer_acted_on, pending_review
from submission.intake import handle_orders_message
from tests.contexts import while_using
from tests.fakes import FakeReceivedMessage
from tests.operations.harness import OpsHarness, first_review, paused_for_review
from tests.runtime.harness import CLIENT_QUEUE
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos

ORDER = "o-made-paused"


class StatusesRefused:
    """The broker, with the submitter's status queue refusing every send."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue == CLIENT_QUEUE:
            raise SendError(f"send to {queue!r} failed")
        self._inner.send(queue, message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def paused(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = paused_for_review(cosmos_db, ORDER, "86400")
    yield made
    made.close()


def test_the_creating_message_again_during_a_review_owes_received_beside_the_pause(paused: OpsHarness) -> None:
    assert paused.ctx is not None
    review_id = first_review(ORDER)
    record = paused.ctx.states.get(ORDER)
    assert record is not None and record.submitted_as is not None
    waiting = pending_review(record)
    assert waiting is not None and waiting.review_id == review_id
    body = json.dumps(order(orderId=ORDER, lines=[{"sku": "SKU-9", "quantity": 1, "unitPriceCents": 150000}]))
    again = replace(FakeReceivedMessage.of(body, message_id=ORDER), sequence_number=record.submitted_as)

    with while_using(paused.ctx, sender=StatusesRefused(paused.ctx.sender)) as refusing:
        result = handle_orders_message(refusing, again)

    assert result.settlement.kind == "complete"
    assert [owed.status for owed in result.owed] == ["Received"]  # said, refused: owed
    noted = paused.ctx.states.get(ORDER)
    assert noted is not None and noted.received_owed is not None and noted.history[-1].event == RECEIVED_OWED
    assert pending_review(noted) == waiting  # the pause is still the attempt's last word

    status, answered = paused.post(
        f"/api/ops/orders/{ORDER}/review", {"reviewId": review_id, "action": "fail", "reason": "cannot pay"}
    )
    assert status in (200, 202), answered
    paused.run_until_idle()

    after = paused.ctx.states.get(ORDER)
    assert after is not None
    assert after.process_state.value == "Error", [h.event for h in after.history]
    acted = answer_acted_on(after, review_id)
    assert acted is not None and (acted.operator, acted.action) == ("ops@contoso.example", "fail")
    assert after.received_owed is None  # said by the attempt's write that acted on the answer
