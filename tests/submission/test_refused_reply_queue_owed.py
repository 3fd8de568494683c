"""A submitter whose status queue refuses this app for a while (``QueueNotFound``: it granted the app's identity
``Azure Service Bus Data Sender`` just before submitting, and the role assignment is still propagating; or it
deleted its queue and creates it again) still hears ``Received`` and the order's final status once the queue
takes sends, in that order.

Red team, then runner: status-queues-refusing-for-a-while.json (submitter 1 refusing for 7 minutes from the
start, submitter 2's queue gone for 10 minutes from the second), 300 orders, seed 1: ``missing_statuses`` 111,
``silent_failures`` 7 and ``lost`` 3 (a ``Rejected`` never told). Each path dropped the status at its first
refusal: the intake owed nothing (``Received``, ``Rejected``), a writer cleared the ``Received`` owed on the
record, ``mark_processed`` answered ``Completed`` as nothing to retry, and the supervisor's owed sweep
acknowledged a refused ``Failed``. Past ``REFUSED_RETRY_WINDOW`` a refusal is dropped as before, and nothing
alerts the order (the queue's ``ReplyQueueUnavailable`` alert is the operator's signal)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import pytest

from activities.scheduler_steps import begin_step, mark_processed, publish_status
from adapters.clock import ManualClock
from adapters.servicebus.sender import OutgoingMessage
from contracts.activities import (
    MarkProcessedInput,
    Processed,
    PublishStatusInput,
    StatusRefused,
    StepBegun,
)
from contracts.names import OPERATOR_ALERTS_QUEUE
from dependencies import AppContext
from domain.states import ProcessState
from orchestrators.starter import Claim
from orchestrators.status import REFUSED_RETRY_WINDOW
from submission.intake import handle_orders_message
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.contexts import context_with
from tests.fakes import FakeReceivedMessage, RecordingSender
from tests.submission.corpus import order
from tests.submission.test_received_owed import first_step

pytestmark = pytest.mark.cosmos

CLIENT = "client-statuses"
ORDER = "o-refused"


def _refusing(app_context: AppContext, **changes: object) -> tuple[AppContext, RecordingSender]:
    sender = RecordingSender(missing={CLIENT})
    return context_with(app_context, sender=sender, **changes), sender


def _heard(sender: RecordingSender) -> list[str]:
    return [b["status"] for b in sender.bodies(CLIENT) if b["orderId"] == ORDER]


def _alerts(sender: RecordingSender) -> list[str]:
    return [b["kind"] for b in sender.bodies(OPERATOR_ALERTS_QUEUE)]


def _later(ctx: AppContext, delta: timedelta) -> None:
    assert isinstance(ctx.clock, ManualClock)
    ctx.clock.advance(delta)


def _submitted(ctx: AppContext) -> Claim | None:
    """The order's delivery: its ``Received`` refused, so handed to the courier and owed on the record."""
    body = json.dumps(order(orderId=ORDER)).encode()
    result = handle_orders_message(ctx, FakeReceivedMessage.of(body, message_id=ORDER))
    assert [(owed.status, owed.reply_to) for owed in result.owed] == [("Received", CLIENT)]
    record = ctx.states.get(ORDER)
    assert record is not None and record.received_owed is not None
    return result.claim


def _ended_well(ctx: AppContext) -> tuple[Processed, PublishStatusInput]:
    """Submitted, its first step begun and the order ``Processed`` while the queue refuses: ``mark_processed``'s
    answer, and the ``Completed`` the scheduler then sends on its durable timers."""
    claim = _submitted(ctx)
    assert claim is not None
    began = begin_step(ctx, first_step(ctx, claim))
    assert isinstance(began, StepBegun) and began.status_sent is None  # Processing: progress, tried once
    done = mark_processed(
        ctx, MarkProcessedInput(order_id=ORDER, instance_id=claim.instance_id, attempt=claim.attempt, write_number=2)
    )
    assert isinstance(done, Processed)
    completed = PublishStatusInput(
        order_id=ORDER, status="Completed", attempt=claim.attempt, reply_to=CLIENT, reply_to_known=True
    )
    return done, completed


def test_received_and_completed_reach_a_queue_that_refused_the_app_for_ten_minutes(app_context: AppContext) -> None:
    """The queue refuses from the submission to the order's end: ``Received`` stays owed through the writes,
    ``Completed`` waits on the scheduler's timers (its tries answer refused, sending nothing before
    ``Received``); 10 minutes later the queue takes sends and the next try says both, in order."""
    ctx, sender = _refusing(app_context)
    done, completed = _ended_well(ctx)

    assert done == Processed(status_sent=False)  # a refused Completed is retried on the scheduler's timers
    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.PROCESSED
    assert record.received_owed is not None  # the writers' refused tries left it owed
    assert isinstance(publish_status(ctx, completed), StatusRefused)
    assert _heard(sender) == []

    sender.missing = set()
    _later(ctx, timedelta(minutes=10))
    assert publish_status(ctx, completed) is None

    assert _heard(sender) == ["Received", "Completed"]
    record = ctx.states.get(ORDER)
    assert record is not None and record.received_owed is None
    assert set(_alerts(sender)) == {"ReplyQueueUnavailable"}  # once per queue: nothing per order


def test_past_the_window_an_owed_received_is_dropped_and_the_final_status_tried_on_its_own(
    app_context: AppContext,
) -> None:
    """A queue gone for good: the writer past ``REFUSED_RETRY_WINDOW`` from the mark drops ``Received`` (the mark
    cleared in its write), and the final status's tries no longer wait for it."""
    ctx, sender = _refusing(app_context)
    claim = _submitted(ctx)
    assert claim is not None
    assert isinstance(begin_step(ctx, first_step(ctx, claim)), StepBegun)
    record = ctx.states.get(ORDER)
    assert record is not None and record.received_owed is not None

    _later(ctx, REFUSED_RETRY_WINDOW)
    done = mark_processed(
        ctx, MarkProcessedInput(order_id=ORDER, instance_id=claim.instance_id, attempt=claim.attempt, write_number=2)
    )

    assert done == Processed(status_sent=False)  # Completed itself refused: its own window on the timers
    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.PROCESSED and record.received_owed is None
    assert _heard(sender) == [] and set(_alerts(sender)) == {"ReplyQueueUnavailable"}


def test_a_refused_rejected_goes_to_the_courier(app_context: AppContext) -> None:
    """The pending cap refuses the order while its submitter's queue refuses the app: ``Rejected`` is handed to
    the status courier (which tries it for the window) instead of being dropped."""
    ctx, _ = _refusing(app_context, settings=replace(app_context.settings, max_pending=0))
    body = json.dumps(order(orderId=ORDER)).encode()

    result = handle_orders_message(ctx, FakeReceivedMessage.of(body, message_id=ORDER))

    assert result.settlement.kind == "complete"
    assert [(owed.status, owed.reply_to) for owed in result.owed] == [("Rejected", CLIENT)]


def test_the_owed_sweep_keeps_a_refused_failed_owed_for_the_window(app_context: AppContext) -> None:
    """An order escalated while its queue refuses: the owed sweep sends the alert, keeps ``Received`` and ``Failed``
    owed while ``completeBy`` is within the window (no acknowledgement), and once the queue takes sends says
    both and acknowledges."""
    ctx, sender = _refusing(app_context, settings=replace(app_context.settings, max_failures=1))
    assert _submitted(ctx) is not None
    _later(ctx, ctx.settings.start_grace + timedelta(seconds=1))
    run_supervisor(ctx, ScanState())  # escalates; the sweep's refused sends leave it owed

    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.ERROR
    assert record.complete_by is not None and record.received_owed is not None
    assert "RetriesExhausted" in _alerts(sender) and _heard(sender) == []

    sender.missing = set()
    _later(ctx, timedelta(minutes=5))
    run_supervisor(ctx, ScanState())

    assert _heard(sender) == ["Received", "Failed"]
    record = ctx.states.get(ORDER)
    assert record is not None and record.complete_by is None and record.received_owed is None


def test_the_owed_sweep_drops_a_status_still_refused_past_the_window_without_alerting_the_order(
    app_context: AppContext,
) -> None:
    """The queue never takes sends: the sweeps of the first resend window leave the status owed, the first one of
    the next hour's (past the window) acknowledges it as dropped. No ``NotificationsStuck`` nor
    ``StatusUndelivered``: the queue's ``ReplyQueueUnavailable`` alert is the operator's signal."""
    ctx, sender = _refusing(app_context, settings=replace(app_context.settings, max_failures=1))
    assert _submitted(ctx) is not None
    _later(ctx, ctx.settings.start_grace + timedelta(seconds=1))
    run_supervisor(ctx, ScanState())
    for _ in range(3):  # more sweeps of the first window
        _later(ctx, timedelta(minutes=2))
        run_supervisor(ctx, ScanState())
    record = ctx.states.get(ORDER)
    assert record is not None and record.complete_by is not None

    _later(ctx, timedelta(hours=1) - timedelta(minutes=6))
    run_supervisor(ctx, ScanState())

    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.ERROR and record.complete_by is None
    assert _heard(sender) == []
    assert set(_alerts(sender)) == {"RetriesExhausted", "ReplyQueueUnavailable"}


class RefusingOnce(RecordingSender):
    """The submitter's queue refuses this app's first send, then takes sends (its role assignment propagated
    between the sweep's ``Received`` and its final status)."""

    def send(self, queue: str, message: OutgoingMessage) -> None:
        try:
            super().send(queue, message)
        finally:
            self.missing.discard(queue)


def test_the_owed_sweep_never_says_the_failure_after_a_refused_received(app_context: AppContext) -> None:
    """The sweep's ``Received`` is refused and its queue takes sends again before the failure status: the
    failure waits with ``Received`` (here for the run's owed sweep), so the submitter never hears ``Failed``
    first (it heard ``Failed``, ``Received``, ``Failed``)."""
    ctx, _ = _refusing(app_context, settings=replace(app_context.settings, max_failures=1))
    assert _submitted(ctx) is not None
    sender = RefusingOnce(missing={CLIENT})
    ctx = context_with(ctx, sender=sender)
    _later(ctx, ctx.settings.start_grace + timedelta(seconds=1))
    run_supervisor(ctx, ScanState())  # escalates: the alert sent, Received refused, the queue back; the sweep

    assert "RetriesExhausted" in _alerts(sender)
    assert _heard(sender) == ["Received", "Failed"]
    record = ctx.states.get(ORDER)
    assert record is not None and record.complete_by is None and record.received_owed is None
