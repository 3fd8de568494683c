"""Red team (compensation): what a ``CompensationFailed`` order says when its rounds kept dying.

Every round missed its deadline (its orchestration lost, its agent's reply never back), so the supervisor counted
each one and, at ``MAX_FAILURES``, failed the compensation "did not finish in N rounds; last: <lastError>". No round
had written an error, so ``lastError`` was still why the order was being compensated, and the operator read "last:
cancelled by the client: customer changed mind" (the local runner, 2 rounds, 20 s undo deadlines: 6 of 13 such
alerts read as a cancel, an operator's compensate or a review's default): the cause, as if it were what the rounds
met. Now a ``lastError`` that is only the cause (the newest ``CompensationRequested``'s reason) is no round's error:
"last: deadline missed". The real supervisor claims over the Cosmos protocol server."""

from __future__ import annotations

import pytest

from adapters.cosmos.state_store import update_once
from domain.compensation import enter_compensation
from domain.states import ProcessState
from supervisor.compensation_rounds import claim_due_compensations
from tests.compensation.support import stored_record, submitted_and_claimed

pytestmark = pytest.mark.cosmos

CAUSE = "cancelled by the client: customer changed mind"


@pytest.mark.parametrize("cause", [CAUSE, "x" * 3000])  # a cause longer than lastError and history keep
def test_rounds_that_kept_dying_say_so_not_the_cause(ctx, clock, cause):
    submitted_and_claimed(ctx)
    update_once(ctx.states, stored_record(ctx), lambda r: enter_compensation(r, "client", cause, clock.now()))
    for _ in range(4 * ctx.settings.max_failures):  # each round claimed, never started, its deadline missed
        claim_due_compensations(ctx)
        if stored_record(ctx).process_state is ProcessState.COMPENSATION_FAILED:
            break
        clock.advance(ctx.settings.retry_backoff_max + ctx.settings.start_grace + ctx.settings.supervisor_grace * 2)
    record = stored_record(ctx)
    assert record.process_state is ProcessState.COMPENSATION_FAILED
    assert (
        record.last_error == f"compensation did not finish in {ctx.settings.max_failures} rounds; last: deadline missed"
    )


@pytest.mark.parametrize("cause", ["payment", "p"])  # a short operator's reason, the round's error beginning with it
def test_a_round_error_beginning_with_the_cause_is_still_named(ctx, clock, cause):
    """Red team 2: a round's error that began with the cause's text (or was the start of it) was taken for the cause
    and the order failed "last: deadline missed", hiding what the rounds met."""
    from dataclasses import replace

    from domain.compensation import _round_error

    submitted_and_claimed(ctx)
    record = enter_compensation(stored_record(ctx), "ops@contoso.example", cause, clock.now())
    met = "payment is still working on an earlier call: refund ch-1"
    assert _round_error(replace(record, last_error=met)) == met
    assert _round_error(record) is None
