"""Red team: two operators answer the same review at once, through the real runtime. The attempt takes
the first ``ReviewDecision`` event only; the API must not tell the second operator that their decision
was taken."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from domain.review import PendingReview
from domain.states import ProcessState
from operations import actions
from tests.operations.harness import OpsHarness, first_review, paused_for_review

pytestmark = pytest.mark.cosmos


@pytest.fixture
def paused(cosmos_db) -> Iterator[OpsHarness]:
    made = paused_for_review(cosmos_db, "o-race", "600")
    yield made
    made.close()


def test_the_second_of_two_concurrent_review_answers_is_not_told_it_was_taken(paused, monkeypatch):
    """FINDING. ``ops_review`` (operations/blueprint.py) reads the pending review, raises the event, then
    notes the answer (operations/actions.py ``note_answer``). Operator B reads the pending review while
    it still waits; operator A's answer (``fail``) is raised and noted first; B's event is raised too (the
    instance is still running: 202) and B's note finds the review answered (``IllegalTransition``), which
    ``note_answer`` takes for "the attempt took the answer and wrote first" and answers 200 with B's
    decision. B is told ``compensate`` was decided; the attempt acts on A's ``fail``."""
    assert paused.ctx is not None
    read_before_a_answered = actions.review_to_answer(
        paused.ctx, "o-race", first_review("o-race"), "compensate", "operator-b"
    )
    assert isinstance(read_before_a_answered, actions.ReviewTarget)
    assert isinstance(read_before_a_answered.pending, PendingReview) and read_before_a_answered.noted is None

    status_a, body_a = paused.post(
        "/api/ops/orders/o-race/review", {"reviewId": first_review("o-race"), "action": "fail", "reason": "operator A"}
    )
    assert status_a == 200 and body_a["decision"] == "fail"

    # operator B's request read the record before A's answer was noted
    monkeypatch.setattr(actions, "review_to_answer", lambda *asked: read_before_a_answered)
    status_b, body_b = paused.post(
        "/api/ops/orders/o-race/review",
        {"reviewId": first_review("o-race"), "action": "compensate", "reason": "operator B"},
    )
    monkeypatch.undo()

    paused.run_until_idle()
    record = paused.ctx.states.get("o-race")
    assert record.process_state is ProcessState.ERROR  # the attempt took A's answer
    assert status_b == 409, (
        f"operator B was answered {status_b} {body_b!r} but the order went to {record.process_state}"
    )
