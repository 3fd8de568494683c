"""Red team of the bounded retry of statuses a reply queue refuses (``REFUSED_RETRY_WINDOW``).

The scheduler's (and the compensation round's) ``Failed`` / ``CompensationFailed``, tried again on its timers while
the queue refused, was sent on the first try after the queue took sends again:

- without the ``Received`` the record still owed (only the owed sweep and the intake's courier say it, the sweep only
  in the first 10 minutes of each hour since the failure): the submitter heard the failure before it heard the order
  was received. Fuzz: /tmp/rt-refq/late20.json (a queue refusing the app for 20 minutes, permanent payment errors),
  300 orders, seed 2: 10 orders heard ``CompensationFailed`` before any ``Received`` (4 on main, a queue full);
- after an operator acted on the order meanwhile (a resubmit, alerted at once), which the owed sweep never does
  (docs/supervisor.md: a ``Failed`` then contradicts the order's new outcome).

Now those two are tried once on the timers and tried again by the owed sweep only.

And the owed sweep, keeping a refused ``Failed`` owed within the window, kept its whole delivery owed, the operator
alert with it: the first sweep of the next hour sent the alert again, more than duplicate detection's 10 minutes
after the first, so Service Bus delivered it twice. Fuzz: /tmp/rt-refq/gone.json (submitter 2's queue gone for
good, permanent payment errors), 300 orders, seed 1: 4 failed orders alerted twice (none on main); late20.json,
seed 1: 21 (3 on main, a queue full). Now the sweep notes the alert sent (``OwedAlertSent``)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from activities.scheduler_steps import begin_step, fail_order, publish_status
from adapters.clock import Clock, ManualClock
from adapters.servicebus.sender import OutgoingMessage
from contracts.activities import FailOrderInput, PublishStatusInput, StepBegun
from contracts.names import OPERATOR_ALERTS_QUEUE
from dependencies import AppContext
from domain.states import ProcessState
from localrun.durable.history import parse_timestamp
from notifications.alerts import DUPLICATE_WINDOW
from orchestrators import names
from orchestrators.status import call_publish_status
from supervisor.operator import resubmit_order
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.activity_calls import run
from tests.contexts import context_with
from tests.durable_history import History
from tests.fakes import RecordingSender
from tests.submission.test_received_owed import first_step
from tests.submission.test_refused_reply_queue_owed import CLIENT, ORDER, _heard, _later, _submitted

pytestmark = pytest.mark.cosmos


class DeduplicatingSender(RecordingSender):
    """A ``RecordingSender`` that also notes when each message was accepted, to count what Service Bus would
    deliver: a MessageId sent again within ``DUPLICATE_WINDOW`` of the send it kept is dropped."""

    def __init__(self, clock: Clock, missing: set[str]) -> None:
        super().__init__(missing)
        self.clock = clock
        self.accepted: list[tuple[str, str, datetime]] = []

    def send(self, queue: str, message: OutgoingMessage) -> None:
        super().send(queue, message)
        self.accepted.append((queue, message.message_id, self.clock.now()))

    def delivered(self, queue: str) -> dict[str, int]:
        """MessageId -> how many times Service Bus would have enqueued it on ``queue``."""
        kept: dict[str, list[datetime]] = defaultdict(list)
        for q, message_id, at in self.accepted:
            if q == queue and (not kept[message_id] or at - kept[message_id][-1] >= DUPLICATE_WINDOW):
                kept[message_id].append(at)
        return {message_id: len(times) for message_id, times in kept.items()}


def _refusing(app_context: AppContext, **changes: object) -> tuple[AppContext, DeduplicatingSender]:
    sender = DeduplicatingSender(app_context.clock, missing={CLIENT})
    return context_with(app_context, sender=sender, **changes), sender


def _failed_while_refused(ctx: AppContext) -> PublishStatusInput:
    """Submitted, its first step begun and failed for good while the queue refuses (``Received`` owed on the
    record): the ``Failed`` the scheduler then sends on its durable timers, its first try refused."""
    claim = _submitted(ctx)
    assert claim is not None
    assert isinstance(begin_step(ctx, first_step(ctx, claim)), StepBegun)
    fail_order(
        ctx,
        FailOrderInput(
            order_id=ORDER,
            instance_id=claim.instance_id,
            step="reserve-inventory",
            attempt=claim.attempt,
            error="out of stock",
            write_number=2,
        ),
    )
    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.ERROR and record.received_owed is not None
    failed = PublishStatusInput(
        order_id=ORDER,
        status="Failed",
        attempt=claim.attempt,
        reply_to=CLIENT,
        reply_to_known=True,
        reason="reserve-inventory: out of stock",
    )
    return failed


@pytest.mark.parametrize("back_after", [None, timedelta(minutes=20)], ids=["gone-for-good", "back-after-20-min"])
def test_a_failed_order_whose_queue_refuses_is_alerted_once(
    app_context: AppContext, back_after: timedelta | None
) -> None:
    """Escalated while its queue refuses: the sweeps of the first window send the alert (their repeats collapse)
    and leave the refused ``Failed`` owed; the first sweep of the next hour (the last try) must not deliver the
    operator the same alert a second time. A queue back meanwhile hears ``Received`` and ``Failed`` then."""
    ctx, sender = _refusing(app_context, settings=replace(app_context.settings, max_failures=1))
    assert _submitted(ctx) is not None
    _later(ctx, ctx.settings.start_grace + timedelta(seconds=1))
    run_supervisor(ctx, ScanState())
    for _ in range(3):
        _later(ctx, timedelta(minutes=2))
        run_supervisor(ctx, ScanState())
    if back_after is not None:
        sender.missing = set()
    _later(ctx, timedelta(hours=1) - timedelta(minutes=6))
    run_supervisor(ctx, ScanState())

    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.ERROR and record.complete_by is None
    alerts = {i: n for i, n in sender.delivered(OPERATOR_ALERTS_QUEUE).items() if "RetriesExhausted" in i}
    assert list(alerts.values()) == [1], alerts
    assert _heard(sender) == ([] if back_after is None else ["Received", "Failed"])


class _Plan:
    reply_to = CLIENT
    reply_to_known = True


def _tried_on_the_timers(
    ctx: AppContext,
    sender: DeduplicatingSender,
    failed: PublishStatusInput,
    meanwhile: Callable[[timedelta], None] = lambda elapsed: None,
) -> None:
    """The scheduler's tries of ``failed`` (``call_publish_status``, replayed by the SDK) run to the orchestration's
    end, each the real activity at the moment its timer fires; the queue takes sends from 12 minutes on.
    ``meanwhile``: called before each try with the time since the first, and once more at the end (at 12 minutes
    at least: the queue then takes sends)."""
    start = ctx.clock.now()
    assert isinstance(ctx.clock, ManualClock)

    def orchestrator(context: Any) -> Any:
        return (yield from call_publish_status(context, ORDER, "Failed", failed.attempt, failed.reason, plan=_Plan()))

    history = History(f"{ORDER}:{failed.attempt}", None, start=start)
    for _ in range(50):
        result = history.run(orchestrator)
        if result.is_done:
            ctx.clock.set(max(ctx.clock.now(), start + timedelta(minutes=12)))
            meanwhile(ctx.clock.now() - start)
            sender.missing = set()
            return
        (action,) = result.new_actions
        if action["type"] == "CreateTimer":
            history.timer_fired(parse_timestamp(action["fireAt"]))
            continue
        ctx.clock.set(history.now)
        meanwhile(history.now - start)
        if history.now - start >= timedelta(minutes=12):
            sender.missing = set()
        answer = run(publish_status, ctx, json.loads(action["input"]))
        history.activity_completed(names.PUBLISH_STATUS, answer, at=history.now)
    raise AssertionError("the orchestration never ended")


def test_failed_never_reaches_the_submitter_before_the_received_still_owed(app_context: AppContext) -> None:
    """The queue takes sends 12 minutes after the failure (past the owed sweep's first window, whose sends say
    ``Received`` first): whatever sends ``Failed`` then (the scheduler's timers, the sweep of the next hour), the
    submitter hears ``Received`` before it."""
    ctx, sender = _refusing(app_context)
    failed = _failed_while_refused(ctx)
    _tried_on_the_timers(ctx, sender, failed)
    record = ctx.states.get(ORDER)
    assert record is not None and record.complete_by is not None
    assert isinstance(ctx.clock, ManualClock)
    ctx.clock.set(record.complete_by + timedelta(hours=1, minutes=1))
    run_supervisor(ctx, ScanState())

    heard = _heard(sender)
    assert heard and heard[0] == "Received", heard


def test_failed_is_not_sent_after_an_operator_resubmitted_the_order(app_context: AppContext) -> None:
    """The operator, alerted at once, resubmits the order 3 minutes after it failed, while its queue still refuses:
    the first attempt's ``Failed`` must not reach the submitter once the queue takes sends (the order is being
    processed again; the owed sweep drops a ``Failed`` an operator acted on for that reason, docs/supervisor.md)."""
    ctx, sender = _refusing(app_context)
    failed = _failed_while_refused(ctx)
    resubmitted: list[bool] = []

    def operator(elapsed: timedelta) -> None:
        if elapsed >= timedelta(minutes=3) and not resubmitted:
            resubmitted.append(True)
            resubmit_order(ctx, ORDER, "ops", "stock arrived")

    _tried_on_the_timers(ctx, sender, failed, operator)
    assert resubmitted

    assert "Failed" not in _heard(sender)
