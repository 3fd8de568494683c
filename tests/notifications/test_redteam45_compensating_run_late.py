"""Red team (s45, Durable limits): a compensation round's ``Compensating`` run again after the order was compensated.

"Durable Functions ensures that each activity runs at least once" (durable-functions-code-constraints): on Azure
Storage a worker that dies after it sent an activity's result and before it deleted the work-item message leaves the
message to come back after the 5-minute visibility timeout, and so may the worker of that second run, and of the third:
nothing bounds when the last run happens. The round's ``publish_status`` of ``Compensating`` is a progress status, and
it read nothing: run again after the round's ``Compensated`` went out, and 10 minutes or more after its first send
(past the submitter's queue's duplicate detection, which collapses the same MessageId within 10 minutes), it told the
submitter ``Compensating`` after ``Compensated``. Found with the runner's late runs able to come back again
(``DurableEngine.rerun_after_completion``): ``late-activity-runs``, 100 orders, seed 11, ``ord-00037`` and
``ord-00099`` (``stale_final_statuses``, which now counts a progress status heard after the ending).

Now ``publish_status`` reads the record for ``Compensating`` (its ``Received`` check read it anyway: the round's order
has not ended) and sends nothing once the order moved past the round (``activities.scheduler_steps.round_moved_on``:
``StatusMovedOn``)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest

from activities import scheduler_steps
from adapters.clock import ManualClock
from adapters.remote.simulators.fleet import simulated_services
from adapters.remote.simulators.ledger import Ledger
from dependencies import AppContext
from domain.states import ProcessState
from tests.activity_calls import run
from tests.compensation.support import charge_declined, claim_round, compensation_round, stored_record
from tests.contexts import context_with
from tests.fakes import RecordingSender

pytestmark = pytest.mark.cosmos

CLIENT = "client-statuses"  # the sample order's replyTo


@pytest.fixture
def ctx(app_context: AppContext) -> AppContext:
    """The test's context, with the simulated agents (the forward steps and the undo call them)."""
    return context_with(app_context, remote=dict(simulated_services(app_context.clock, ledger=Ledger())))


def _heard(ctx: AppContext) -> list[str]:
    sender = ctx.sender
    assert isinstance(sender, RecordingSender)
    return [f"{s['status']}:{s['attempt']}" for s in sender.bodies(CLIENT)]


def _compensating(round_number: int) -> dict[str, Any]:
    """The round's ``publish_status`` input, as its orchestration records it (its plan knows ``replyTo``)."""
    return {"orderId": "o1", "status": "Compensating", "attempt": round_number, "replyTo": CLIENT, "replyToKnown": True}


def _round_claimed(ctx: AppContext) -> tuple[str, int]:
    """The reservation made, the charge declined, the order handed to compensation and round 2 claimed."""
    charge_declined(ctx)
    claimed = claim_round(ctx)
    assert claimed.locked_by is not None
    return claimed.locked_by, claimed.attempt


def _later(ctx: AppContext, minutes: int) -> None:
    clock = ctx.clock
    assert isinstance(clock, ManualClock)
    clock.advance(timedelta(minutes=minutes))


def test_a_compensating_run_again_after_the_order_was_compensated_is_not_sent(ctx: AppContext, caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="orders")
    owner, round_number = _round_claimed(ctx)
    assert run(scheduler_steps.publish_status, ctx, _compensating(round_number)) is None  # the round's first run
    compensation_round(ctx, owner, round_number)  # undone, Compensated written and told
    assert stored_record(ctx).process_state is ProcessState.COMPENSATED
    heard = _heard(ctx)
    assert heard[-2:] == [f"Compensating:{round_number}", f"Compensated:{round_number}"]

    _later(ctx, 15)  # the work item came back twice (5-minute visibility timeout each): past duplicate detection
    assert run(scheduler_steps.publish_status, ctx, _compensating(round_number)) is None  # done, as sent

    assert _heard(ctx) == heard  # the submitter's last word is still Compensated
    [moved_on] = [r for r in caplog.records if getattr(r, "event", None) == "StatusMovedOn"]
    assert "status Compensating not sent" in moved_on.getMessage()


def test_a_compensating_run_again_after_the_next_round_claimed_the_order_is_not_sent(ctx: AppContext) -> None:
    """The round was taken for stuck and the next one claimed the order (it says ``Compensating`` itself)."""
    _, round_number = _round_claimed(ctx)
    assert run(scheduler_steps.publish_status, ctx, _compensating(round_number)) is None
    _later(ctx, 15)  # past the round's completeBy: the supervisor's next claim counts it stuck
    claimed = claim_round(ctx)
    assert claimed.attempt == round_number + 1
    heard = _heard(ctx)

    assert run(scheduler_steps.publish_status, ctx, _compensating(round_number)) is None

    assert _heard(ctx) == heard


def test_the_rounds_compensating_is_sent_while_the_round_holds_the_order(ctx: AppContext) -> None:
    """The first run, and a run again while the round still runs, send it (the same MessageId: collapsed by duplicate
    detection within 10 minutes); ``Received`` is not owed (it was said at submission)."""
    _, round_number = _round_claimed(ctx)
    before = _heard(ctx)
    assert run(scheduler_steps.publish_status, ctx, _compensating(round_number)) is None
    assert _heard(ctx) == [*before, f"Compensating:{round_number}"]
