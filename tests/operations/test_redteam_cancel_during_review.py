"""Red team: an operator cancels an order whose attempt is paused for review, through the real runtime."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from domain.review import pending_review
from domain.states import ProcessState
from tests.operations.harness import OpsHarness, paused_for_review

pytestmark = pytest.mark.cosmos


@pytest.fixture
def paused(cosmos_db) -> Iterator[OpsHarness]:
    """A high-value order whose payment both providers decline: its attempt pauses for review (a day)."""
    made = paused_for_review(cosmos_db, "o-rv-cancel", "86400")
    yield made
    made.close()


def test_an_operator_cancel_during_a_review_pause_compensates_now_as_a_client_cancel_does(paused):
    """FINDING. 7fdb997 made a client's ``CancelOrder`` during a review pause compensate now
    (submission/cancellation.py: the paused attempt has no call in flight, and its ``completeBy`` is the
    review deadline, up to a day away). The operator's cancel (operations/actions.py ``_cancel_once``)
    still takes any Processing record with a ``currentStep`` as in flight and passes
    ``not_before=record.complete_by``: the compensation waits out the review deadline (here a day)."""
    assert paused.ctx is not None
    before = paused.ctx.states.get("o-rv-cancel")
    assert pending_review(before) is not None and before.current_step == "charge-payment"

    status, body = paused.post("/api/ops/orders/o-rv-cancel/cancel", {"reason": "customer withdrew"})
    assert status == 200, body
    record = paused.ctx.states.get("o-rv-cancel")
    assert record.process_state is ProcessState.COMPENSATING
    assert record.complete_by is not None and record.complete_by <= paused.clock.now(), (
        f"compensation due {record.complete_by} (the review deadline), not now ({paused.clock.now()})"
    )
