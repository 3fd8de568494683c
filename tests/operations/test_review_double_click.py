"""The same answer to a review posted twice at once (a double click, two tabs): both requests are told 200
with that answer, as when it is posted again after the first came back, and the attempt acts on it once.
Before, the request whose conditional note found the other's note already written was told 409 "already
answered: fail by <the same operator>" (the README promises 409 only for a second, *different* answer).
A different answer at once is still 409 with the first."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from domain.review import review_answer
from domain.states import ProcessState
from operations import actions
from tests.operations.harness import OpsHarness, first_review, paused_for_review

pytestmark = pytest.mark.cosmos

OPERATOR = "ops@contoso.example"


@pytest.fixture
def paused(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = paused_for_review(cosmos_db, "o-dbl", "600")
    yield made
    made.close()


def _other_request_notes_first(monkeypatch: pytest.MonkeyPatch, action: str) -> list[Any]:
    """The other request's note is written between this request's read of the review and its own note."""
    real = actions.claim_answer
    claims: list[Any] = []

    def other_first(ctx: Any, order_id: str, pending: Any, operator: str, mine: str, reason: str) -> Any:
        if not claims:
            claims.append(real(ctx, order_id, pending, operator, action, "the other tab"))
        claims.append(real(ctx, order_id, pending, operator, mine, reason))
        return claims[-1]

    monkeypatch.setattr(actions, "claim_answer", other_first)
    return claims


def test_the_same_answer_posted_twice_at_once_is_200_and_the_attempt_takes_it(
    paused: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims = _other_request_notes_first(monkeypatch, "fail")
    review = first_review("o-dbl")

    status, body = paused.post("/api/ops/orders/o-dbl/review", {"reviewId": review, "action": "fail", "reason": "x"})
    monkeypatch.undo()

    assert isinstance(claims[-1], actions.NotedMeanwhile), claims  # the race happened as meant
    assert status == 200, body
    assert body["decision"] == "fail" and body["reviewId"] == review, body
    paused.run_until_idle()
    record = paused.ctx.states.get("o-dbl") if paused.ctx else None
    assert record is not None and record.process_state is ProcessState.ERROR, record
    answer = review_answer(record, review)
    assert answer is not None and (answer.operator, answer.action) == (OPERATOR, "fail"), answer


def test_a_different_answer_at_once_is_still_409_with_the_first(
    paused: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    _other_request_notes_first(monkeypatch, "compensate")
    review = first_review("o-dbl")

    status, body = paused.post("/api/ops/orders/o-dbl/review", {"reviewId": review, "action": "fail", "reason": "x"})
    monkeypatch.undo()

    assert status == 409, body
    assert body["decision"] == "compensate" and body["by"] == OPERATOR, body
