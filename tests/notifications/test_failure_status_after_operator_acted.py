"""A ``Failed`` or ``CompensationFailed`` the orchestration is still retrying on its durable timers (about six hours:
its send failed: Service Bus down, the submitter's queue full) after an operator moved the order on: resubmitted it
(``Error -> Pending``, the next attempt) or compensated it (``-> Compensating``, the next round).

Red team: a later try still delivered the old failure while the order was being processed again, after the new
attempt's ``Processing`` (or the new round's ``Compensating``): the submitter heard the order failed last. Now the
``publish_status`` activity, for a failure status only, reads the record first and sends nothing once it has moved
on past the attempt or round that failed (``activities.scheduler_steps.failure_moved_on``), answering as sent so the
timers stop."""

from __future__ import annotations

import dataclasses
import logging
from datetime import timedelta
from typing import Any

import pytest

from activities import compensation_steps, scheduler_steps
from adapters.clock import ManualClock
from adapters.cosmos.state_store import CosmosStateStore
from adapters.remote.simulators.fleet import simulated_services
from adapters.remote.simulators.ledger import Ledger
from adapters.servicebus.sender import SendError
from contracts.names import STATE_CONTAINER
from dependencies import AppContext
from domain import transitions
from domain.states import ProcessState
from operations.actions import compensate, resubmit
from tests.activity_calls import run
from tests.compensation.support import charge_declined, claim_round, stored_record, submitted_and_claimed
from tests.contexts import context_with
from tests.fakes import RecordingSender
from tests.submission.test_statuses_after_received import FullQueue

pytestmark = pytest.mark.cosmos

CLIENT = "client-statuses"  # the sample order's replyTo
FIRST = "o1:1"


def _elsewhere(ctx: AppContext, cosmos_db: Any) -> AppContext:
    """``ctx`` as another process has it (not installed): the same database, a store with nothing cached."""
    return dataclasses.replace(ctx, states=CosmosStateStore(cosmos_db.get_container_client(STATE_CONTAINER)))


def _heard(sender: RecordingSender) -> list[str]:
    return [f"{s['status']}:{s['attempt']}" for s in sender.bodies(CLIENT)]


def _status(status: str, attempt: int) -> dict[str, Any]:
    """``publish_status``'s input as the orchestration records it (its plan knows ``replyTo``)."""
    return {"orderId": "o1", "status": status, "attempt": attempt, "replyTo": CLIENT, "replyToKnown": True}


def _failed_while_the_queue_is_full(ctx: AppContext) -> dict[str, Any]:
    """Attempt 1 failed for good (``fail_order``); its ``Failed`` fails on the first try (the timers try again)."""
    submitted_and_claimed(ctx)
    failed = {"orderId": "o1", "instanceId": FIRST, "step": "reserve-inventory", "attempt": 1, "error": "gone"}
    assert run(scheduler_steps.fail_order, ctx, failed) == {"owned": True}
    with pytest.raises(SendError):
        run(scheduler_steps.publish_status, ctx, _status("Failed", 1))
    return _status("Failed", 1)


def _later(ctx: AppContext, minutes: int) -> None:
    clock = ctx.clock
    assert isinstance(clock, ManualClock)
    clock.advance(timedelta(minutes=minutes))


def _queue_full(app_context: AppContext) -> tuple[AppContext, FullQueue]:
    """``app_context`` with the submitter's queue full (every send to it fails until ``full`` is cleared) and the
    simulated agents (the forward steps call them)."""
    sender = FullQueue()
    remote = dict(simulated_services(app_context.clock, ledger=Ledger()))
    return context_with(app_context, sender=sender, remote=remote), sender


@pytest.mark.parametrize("then", ["resubmitted", "processing", "failed-again"])
def test_a_failed_retried_after_a_resubmit_is_not_sent(
    app_context: AppContext, cosmos_db: Any, caplog: Any, then: str
) -> None:
    """Resubmitted while its ``Failed`` is retried: a later try, once the queue takes sends again, sends nothing
    (nor does it fail: the timers stop), whether the next attempt has not begun, is processing (its ``Processing``
    heard) or failed too (its own ``Failed``, attempt 2, still goes out)."""
    caplog.set_level(logging.INFO, logger="orders")
    ctx, sender = _queue_full(app_context)
    retried = _failed_while_the_queue_is_full(ctx)
    _later(ctx, 2)
    # the operator acts through the ops API, another process: this one's cached version still says Error, attempt 1
    assert resubmit(_elsewhere(ctx, cosmos_db), "o1", "ana", "stock is back").status == 200
    sender.full = False
    if then != "resubmitted":
        record = stored_record(ctx)
        claimed = ctx.states.replace(transitions.claim(record, ctx.clock.now(), ctx.settings.start_grace))
        assert claimed.locked_by == "o1:2"
        run(scheduler_steps.publish_status, ctx, _status("Processing", 2))  # its first begin_step's, heard
    if then == "failed-again":
        failed = {"orderId": "o1", "instanceId": "o1:2", "step": "charge-payment", "attempt": 2, "error": "declined"}
        assert run(scheduler_steps.fail_order, ctx, failed) == {"owned": True}
        run(scheduler_steps.publish_status, ctx, _status("Failed", 2))
    heard = _heard(sender)
    _later(ctx, 5)

    assert run(scheduler_steps.publish_status, ctx, retried) is None  # done: the orchestration's timers stop

    assert _heard(sender) == heard  # attempt 1's Failed never reaches the submitter after the resubmit
    assert "Failed:1" not in heard
    [moved_on] = [r for r in caplog.records if getattr(r, "event", None) == "StatusMovedOn"]
    assert "status Failed not sent: attempt 1 failed; the order moved on since" in moved_on.getMessage()


def test_a_failed_retried_while_the_order_still_failed_is_sent(app_context: AppContext) -> None:
    """Nobody acted: the retry sends the ``Failed`` (after the ``Received`` the record owes: no step of the order
    began)."""
    ctx, sender = _queue_full(app_context)
    retried = _failed_while_the_queue_is_full(ctx)
    sender.full = False
    _later(ctx, 5)
    assert run(scheduler_steps.publish_status, ctx, retried) is None
    assert _heard(sender) == ["Received:0", "Failed:1"]


def _compensation_failed_while_the_queue_is_full(ctx: AppContext) -> tuple[str, dict[str, Any]]:
    """The charge declined, the order handed to compensation; round 2's undo of the reservation failed for good
    (``fail_compensation``); its ``CompensationFailed`` fails on the first try."""
    charge_declined(ctx)
    claimed = claim_round(ctx)
    owner, round_number = claimed.locked_by, claimed.attempt
    assert owner is not None
    failed = {"orderId": "o1", "instanceId": owner, "seq": 1, "error": "reservation R-1 expired"}
    assert run(compensation_steps.fail_compensation, ctx, failed) == {"owned": True}
    assert stored_record(ctx).process_state is ProcessState.COMPENSATION_FAILED
    with pytest.raises(SendError):
        run(scheduler_steps.publish_status, ctx, _status("CompensationFailed", round_number))
    return owner, _status("CompensationFailed", round_number)


def test_a_compensation_failed_retried_after_the_operator_compensated_again_is_not_sent(
    app_context: AppContext, cosmos_db: Any
) -> None:
    """Compensated again by an operator while the round's ``CompensationFailed`` is retried: the next round's
    ``Compensating`` is heard, and a later try of the old failure sends nothing."""
    ctx, sender = _queue_full(app_context)
    _, retried = _compensation_failed_while_the_queue_is_full(ctx)
    _later(ctx, 2)
    assert compensate(_elsewhere(ctx, cosmos_db), "o1", "ana", "reservation released by hand").status == 200
    sender.full = False
    claimed = claim_round(ctx)
    run(scheduler_steps.publish_status, ctx, _status("Compensating", claimed.attempt))
    heard = _heard(sender)
    _later(ctx, 5)

    assert run(scheduler_steps.publish_status, ctx, retried) is None

    assert _heard(sender) == heard == [f"Compensating:{claimed.attempt}"]
