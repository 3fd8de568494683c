"""Red team around 10ee105 (pre-existing, not introduced by it): a cancellation while a review's answer
is noted but not acted on yet.

``cancellation_not_before`` makes a cancellation due now during a review pause ("an attempt paused for
review has no call in flight (its step already failed), and its completeBy is the review deadline, up to
a day away"), but it asks ``pending_review``, which is None once an answer is noted (the note is the last
write). The same paused attempt, with the same failed step and nothing in flight, is then treated as a
step in flight: the compensation a client's ``CancelOrder`` or an operator's cancel starts is due only at
``completeBy`` (the review deadline plus the start grace, up to a day away). That is exactly the state
10ee105 is about: an answer noted, the attempt gone before acting on it.

Expected: due now (None), as for the review pause without a note. On 10ee105: the review deadline + grace.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from domain import compensation, review
from domain import transitions as t

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
STEP = "charge-payment"


def test_a_cancellation_during_a_review_with_a_noted_answer_is_due_now():
    claimed = t.claim(t.new_record("o-1", "replies", NOW), NOW, timedelta(seconds=60))
    owner = str(claimed.locked_by)
    begun = t.begin_step(claimed, owner, STEP, "payment", "req-1", NOW + timedelta(minutes=2), NOW)
    review_id = f"{owner}:{STEP}:review:1"
    paused = compensation.await_review(
        begun, owner, STEP, review_id, NOW + timedelta(hours=24), NOW, keep_until=NOW + timedelta(hours=24, minutes=1)
    )
    assert compensation.cancellation_not_before(paused) is None  # the pause alone: due now
    noted = review.note_review_answer(paused, review_id, "ops-a", "retry", "try again", NOW + timedelta(minutes=5))
    assert compensation.cancellation_not_before(noted) is None, (
        f"a noted answer delays the cancellation to {compensation.cancellation_not_before(noted)}"
    )
