"""Red team (deadlines): an answer posted again once its paused attempt is gone stands, and the supervisor carries it
out when it recovers the attempt: the reply says when (``notBefore``). The record is still in the gone attempt's
name, so the supervisor takes it ``SUPERVISOR_GRACE_SECONDS`` after its ``completeBy`` (``transitions.past_due``);
the reply said ``completeBy`` itself, 15 s early as deployed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from domain.timefmt import to_text
from tests.operations.harness import OpsHarness, paused_for_review
from tests.operations.test_review_decision_after_attempt_died import answered_then_attempt_lost

pytestmark = pytest.mark.cosmos


@pytest.fixture
def paused(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = paused_for_review(cosmos_db, "o-died", "600", SUPERVISOR_GRACE_SECONDS="15")
    yield made
    made.close()


def test_the_answer_left_to_the_supervisor_says_when_the_supervisor_takes_it(
    paused: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert paused.ctx is not None
    answer, _ = answered_then_attempt_lost(paused, monkeypatch)

    status, again = paused.post("/api/ops/orders/o-died/review", answer)
    noted = paused.ctx.states.get("o-died")
    assert noted is not None and noted.locked_by is not None and noted.complete_by is not None
    assert status == 200 and again["carriedOutBy"] == "supervisor", again
    assert again["notBefore"] == to_text(noted.complete_by + paused.ctx.settings.supervisor_grace)
