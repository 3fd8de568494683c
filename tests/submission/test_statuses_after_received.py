"""No status of an accepted order reaches its submitter before ``Received`` (``Rejected`` aside).

Runner, the new invariant ``statuses_before_received``: a submitter's status queue full for a while (Service Bus
``QuotaExceeded``, a transient send failure: ``status_queues.refusing`` with ``quota_exceeded``) fails the
intake's ``Received``, which is owed on the record (``receivedOwed``) and to the courier; each later writer's try
of it fails too while the queue is full. A status sent after such a write without saying ``Received`` first
reached the submitter first as soon as the queue took sends again:

- the scheduler's ``Failed`` and the compensation round's ``CompensationFailed``, retried on durable timers: the
  first try after the queue drained went out, ``Received`` still owed (only ``Completed`` and ``Compensated``
  said it first);
- the round's ``Compensating`` (the same activity, tried once), the attempt's ``Processing`` after the write whose
  ``Received`` failed, the supervisor's "waiting for" statuses after its own write's, and the ``CancelOrder``
  handler's ``CancellationRejected``.

Now the ``publish_status`` activity says a ``Received`` the record owes before any status but ``Received`` and
``Rejected`` (or fails that try), ``Processing`` and the waiting statuses are not sent while the write before them
left it owed, and ``CancellationRejected`` says it first or goes to the courier, which does."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import pytest

from activities.scheduler_steps import begin_step, mark_processed, publish_status
from adapters.cosmos.state_store import update_once
from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.activities import Processed, PublishStatusInput, StepBegun
from contracts.messages import StatusName
from dependencies import AppContext
from domain.states import ProcessState
from notifications.status import OwedStatus
from orchestrators import starter
from submission.intake import handle_orders_message
from supervisor.outage import say_waiting
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.contexts import context_with
from tests.fakes import FakeReceivedMessage, RecordingSender
from tests.submission.test_received_owed import (
    CLIENT,
    ORDER,
    ReceivedSendsFail,
    _delivered_then_host_stopped,
    _heard,
    _later,
    _processed_owing_received,
    first_step,
)
from tests.submission.test_redteam_refused_queue import _failed_while_refused
from tests.submission.test_refused_reply_queue_owed import _heard as heard

pytestmark = pytest.mark.cosmos

# the attempt's Processing never goes through (the queue fails it): each test is about its own status's path
NO_PROCESSING = frozenset({"Processing"})


class FullQueue(RecordingSender):
    """The submitter's queue is full while ``full`` holds: every send to it fails (``QuotaExceeded``, transient)."""

    def __init__(self) -> None:
        super().__init__()
        self.full = True

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue == CLIENT and self.full:
            raise SendError(f"send to {queue!r} failed: QuotaExceeded (the queue is full)")
        super().send(queue, message)


def test_failed_retried_once_a_full_queue_drains_says_the_owed_received_first(app_context: AppContext) -> None:
    """The queue is full from the order's delivery to the scheduler's first try of ``Failed``, then drains: the
    next try (a durable timer's) says ``Received``, then ``Failed``, and clears the mark."""
    sender = FullQueue()
    ctx = context_with(app_context, sender=sender)
    failed = _failed_while_refused(ctx)
    with pytest.raises(SendError):
        publish_status(ctx, failed)  # the first try, the queue still full

    sender.full = False
    publish_status(ctx, failed)  # the timer's try

    assert heard(sender) == ["Received", "Failed"]
    record = ctx.states.get(failed.order_id)
    assert record is not None and record.received_owed is None
    # the mark cleared, then the status noted sent (the owed sweep sends it no more: OwedStatusSent)
    assert [e.event for e in record.history[-2:]] == ["ReceivedSaid", "OwedStatusSent"]
    assert record.complete_by is not None  # the owed sweep still acknowledges the failure's notifications


@pytest.mark.parametrize("status", ["Failed", "CompensationFailed", "Compensating", "CancellationRejected"])
def test_the_publish_status_activity_says_the_owed_received_before_any_status(
    app_context: AppContext, status: StatusName
) -> None:
    """Every status the activity sends for an orchestration or the courier, with ``Received`` still owed (its
    three tries failed: the delivery's, the first step's, the failure write's): ``Received`` first."""
    sender = ReceivedSendsFail(failures=3, down=NO_PROCESSING)
    ctx = context_with(app_context, sender=sender)
    failed = _failed_while_refused(ctx)
    assert heard(sender) == []
    # sent only while the record is that round's CompensationFailed, or that round's Compensating
    held = {"CompensationFailed": ProcessState.COMPENSATION_FAILED, "Compensating": ProcessState.COMPENSATING}
    if status in held:
        record = ctx.states.get(failed.order_id)
        assert record is not None
        update_once(ctx.states, record, lambda r: replace(r, process_state=held[status]))

    given = PublishStatusInput(order_id=failed.order_id, status=status, attempt=failed.attempt, reply_to=CLIENT)
    publish_status(ctx, given)

    assert heard(sender) == ["Received", status]


def test_a_status_whose_received_still_fails_fails_its_try_unsent(app_context: AppContext) -> None:
    """While ``Received`` cannot be sent, the status is not sent either: its try fails (the timers try again)."""
    sender = ReceivedSendsFail(failures=4, down=NO_PROCESSING)
    ctx = context_with(app_context, sender=sender)
    failed = _failed_while_refused(ctx)
    with pytest.raises(SendError):
        publish_status(ctx, failed)
    assert heard(sender) == []
    publish_status(ctx, failed)
    assert heard(sender) == ["Received", "Failed"]


def _cancel(ctx: AppContext) -> tuple[OwedStatus, ...]:
    body = {"type": "CancelOrder", "schemaVersion": 1, "orderId": ORDER, "reason": "changed my mind"}
    result = handle_orders_message(ctx, FakeReceivedMessage.of(json.dumps(body).encode(), message_id="c-1"))
    assert result.settlement.kind == "complete"
    return result.owed


def test_a_cancellation_refused_says_the_owed_received_first(app_context: AppContext) -> None:
    """An order ``Processed`` with ``Received`` still owed (its four tries failed), then cancelled: the handler
    says ``Received``, then ``CancellationRejected``, and clears the mark."""
    ctx = context_with(app_context, sender=ReceivedSendsFail(failures=4, down=NO_PROCESSING))
    done, _ = _processed_owing_received(ctx, 2)
    assert mark_processed(ctx, done) == Processed(status_sent=False)
    assert _heard(ctx) == []

    assert _cancel(ctx) == ()

    assert _heard(ctx) == ["Received", "CancellationRejected"]
    record = ctx.states.get(ORDER)
    assert record is not None and record.received_owed is None


def test_a_cancellation_refused_while_received_fails_goes_to_the_courier(app_context: AppContext) -> None:
    """``Received`` still failing: ``CancellationRejected`` is not tried by the handler but handed to the courier,
    whose try says ``Received`` first."""
    ctx = context_with(app_context, sender=ReceivedSendsFail(failures=5, down=NO_PROCESSING))
    done, _ = _processed_owing_received(ctx, 2)
    assert mark_processed(ctx, done) == Processed(status_sent=False)

    owed = _cancel(ctx)

    assert [(o.status, o.reply_to) for o in owed] == [("CancellationRejected", CLIENT)]
    assert _heard(ctx) == []
    publish_status(ctx, PublishStatusInput.from_json(owed[0].courier_input()))
    assert _heard(ctx) == ["Received", "CancellationRejected"]


def test_the_supervisors_waiting_status_is_not_sent_while_received_is_owed(app_context: AppContext) -> None:
    """A supervisor's write (recovery, a round's claim, a payment wait) whose own try of ``Received`` failed: its
    "waiting for" status is not sent (tried once, like any progress status)."""
    ctx = context_with(app_context, sender=ReceivedSendsFail(failures=2))
    assert _delivered_then_host_stopped(ctx) is not None
    written = ctx.states.get(ORDER)
    assert written is not None and written.received_owed is not None

    assert say_waiting(ctx, written, "Processing", "waiting for shipping (circuit open)") is False

    assert _heard(ctx) == []


def test_the_first_step_of_a_retried_claim_that_never_started_says_received_first(app_context: AppContext) -> None:
    """The creating delivery's create lost its response: nothing said ``Received`` and nothing marked it owed (here:
    the mark cleared by hand), and the store-retry copy that says it comes minutes later. The claim never started;
    the supervisor retries it and the starter's attempt 2 begins its first step: ``Received``, then ``Processing``
    (lost-restarts-locks, 100 orders, seed 11, ``ord-00004`` heard ``Processing`` first)."""
    sender = ReceivedSendsFail(failures=1)
    ctx = context_with(app_context, sender=sender, settings=replace(app_context.settings, max_in_flight=100))
    assert _delivered_then_host_stopped(ctx) is not None
    record = ctx.states.get(ORDER)
    assert record is not None
    update_once(ctx.states, record, lambda r: replace(r, received_owed=None))
    _later(ctx, ctx.settings.start_grace + timedelta(seconds=1))
    run_supervisor(ctx, ScanState())
    _later(ctx, ctx.settings.retry_backoff_max + timedelta(seconds=1))
    claims = starter.sweep(ctx)
    assert [c.attempt for c in claims] == [2] and _heard(ctx) == []

    assert begin_step(ctx, first_step(ctx, claims[0])) == StepBegun(status_sent=True)

    assert _heard(ctx) == ["Received", "Processing"]
    record = ctx.states.get(ORDER)
    assert record is not None and record.received_owed is None
