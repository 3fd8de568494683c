"""Red team (s51): the ``CompensationFailed`` alert of an undo whose outcome is unknown.

An undo whose tries were used up on transient failures (a call that timed out while the provider went on with it,
an agent that died after its call) may have been done; so may one whose rounds ran out waiting for its reply (the
agent could not send it: ``tests/localrun/test_redteam51_undo_reply_never_heard.py``). The alert's next step said
"undo the named entry by hand" (the supervisor's, when the rounds ran out, said nothing at all), and an operator who
did refunded the customer twice. Now it says the undo may have been done (``undoOutcomeUnknown``): ask the provider
first, or compensate again (the same undo key). An undo its provider refused for good was not done: no warning."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.activities import OWNED, tries_used_up
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.compensation import FAILED_NEXT_STEP, OUTCOME_UNKNOWN_WARNING
from tests.supervisor.test_outage_wait import health, with_health
from tests.supervisor.test_undo_tries_used_up_in_an_outage import _fail, _undoing_the_charge

pytestmark = pytest.mark.cosmos
__all__ = ["health"]  # the fixture, used by the tests below


def _alert(sender: Any) -> dict[str, Any]:
    [alert] = [a for a in sender.bodies(OPERATOR_ALERTS_QUEUE) if a["kind"] == "CompensationFailed"]
    return dict(alert)


def test_tries_used_up_on_timeouts_warn_that_the_refund_may_have_been_made(make_ctx, health, states, clock, sender):
    ctx = with_health(make_ctx, health, MAX_FAILURES="1", MAX_OUTAGE_WAIT_MINUTES="0")
    record = _undoing_the_charge(ctx, states, clock)
    error = "payment.refund order o1 key o1:charge-payment:undo timed out after 10.0s (the service goes on with it)"

    assert _fail(ctx, record, tries_used_up(error, 1)) == OWNED

    details = _alert(sender)["details"]
    assert details["undoOutcomeUnknown"] is True
    assert details["nextStep"].startswith(OUTCOME_UNKNOWN_WARNING)


def test_a_refund_refused_for_good_gives_the_next_step_as_before(make_ctx, health, states, clock, sender):
    ctx = with_health(make_ctx, health, MAX_FAILURES="1")
    record = _undoing_the_charge(ctx, states, clock)

    assert _fail(ctx, record, "refund refused: charge disputed", used_up_tries=False) == OWNED

    details = _alert(sender)["details"]
    assert (details["undoOutcomeUnknown"], details["nextStep"]) == (False, FAILED_NEXT_STEP)
