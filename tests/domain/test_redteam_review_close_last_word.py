"""Red team (aa957f3), pure domain: what ``domain.review.close_review`` takes from the record; both
findings are fixed and these tests hold them.

1. (latent) It took a noted answer only while the note was the record's LAST word. A write that is
   neither the ops API's nor the attempt's (``domain.payments.with_payment``: ``PaymentNotified``, not
   fenced), landing between the note and the close, buried the note. Now the close takes the answer
   noted since the review was last requested, whatever unrelated writes came after it.
2. It wrote whatever action the note held; the scheduler takes only ``REVIEW_CHOICES``. Now a note
   outside them is no answer: the close writes the default, as the attempt does.
"""

from __future__ import annotations

from datetime import timedelta

from domain import review
from domain.compensation_policy import REVIEW_CHOICES
from domain.payments import received, with_payment
from domain.review import ClosedReview
from tests.domain.test_review_answers import NOW, UNTIL, paused


class _Note:
    order_id = "o-1"
    notification_id = "n-1"
    amount_cents = 150000
    currency = "EUR"
    provider_reference = "psp-n-1"


def test_a_write_by_a_third_party_after_the_note_makes_the_close_drop_the_answer() -> None:
    record = paused()
    owner = str(record.locked_by)
    review_id = f"{owner}:charge-payment:review:1"
    answered = review.note_review_answer(record, review_id, "ops-a", "fail", "card stolen", NOW)
    paid = with_payment(answered, received(_Note(), 7, NOW), NOW + timedelta(seconds=1))  # not fenced: any time
    closed = review.close_review(paid, owner, review_id, "compensate", UNTIL)
    # the operator was told 200 "fail" before the deadline; the close must take it
    assert review.review_closed(closed, review_id) == ClosedReview(review_id, "fail", "ops-a")


def test_the_close_never_writes_an_action_the_attempt_will_not_take() -> None:
    record = paused()
    owner = str(record.locked_by)
    review_id = f"{owner}:charge-payment:review:1"
    answered = review.note_review_answer(record, review_id, "bob", "ship-anyway", "no", NOW)
    closed = review.review_closed(review.close_review(answered, owner, review_id, "compensate", UNTIL), review_id)
    assert closed is not None
    assert closed.action in REVIEW_CHOICES, f"the record says {closed}; the attempt takes the default compensate"
