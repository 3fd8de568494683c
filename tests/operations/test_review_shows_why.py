"""An order paused for review says why on its page: the refused step's error is the record's ``lastError``
(before, it was only in the ``ReviewRequired`` alert, and the operator deciding saw an empty "Last error")."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.operations.harness import OpsHarness, paused_for_review

pytestmark = pytest.mark.cosmos


@pytest.fixture
def paused(cosmos_db) -> Iterator[OpsHarness]:
    made = paused_for_review(cosmos_db, "o-why", "600")
    yield made
    made.close()


def test_the_order_waiting_for_review_shows_why_its_step_failed(paused):
    status, body = paused.get("/api/ops/orders/o-why")

    assert status == 200, body
    assert body["review"] is not None and body["review"]["step"] == "charge-payment", body["review"]
    last_error = body["state"]["lastError"]
    assert last_error is not None and last_error.startswith("charge-payment: "), last_error
    assert "payment_backup rejected" in last_error, last_error  # the refusal that paused it, as the alert says
