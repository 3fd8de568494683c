"""Red team of the lean scheduler (``process_order_v2``, commit 800363c): a step's result rides on
the next fenced write, ``begin_step`` sends the agent's request, ``load_order`` / ``mark_processed``
send ``Processing`` / ``Completed``, and ``process_order_v1`` is retired (ends ``Superseded``).
Since ``process_order_v3`` the attempt's first ``begin_step`` sends ``Processing`` (no ``load_order``):
the checks of the announcement are made on it.

Each test is named for the guarantee it checks. Those marked "FINDING" fail on 800363c."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from activities.scheduler_steps import begin_step, mark_processed
from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.activities import (
    BeginStepInput,
    MarkProcessedInput,
    Processed,
    StepBegun,
    StepResult,
)
from dependencies import AppContext
from domain import compensation, transitions
from domain.states import ProcessState, StepStatus
from operations.instances import statuses_sent
from orchestrators import names
from orchestrators.agent_call import agent_request
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.contexts import context_with
from tests.fakes import RecordingSender
from tests.lost_writes import FlakyStates
from tests.orchestrators.support import sample_order
from tests.runtime.harness import RuntimeHarness

V1 = "process_order_v1"
CLIENT = "client-statuses"

pytestmark = pytest.mark.cosmos


def _claimed(ctx: AppContext, order_id: str, reply_to: str | None = CLIENT) -> str:
    """A Pending record for ``order_id`` claimed by attempt 1; returns the owner (instance id)."""
    now = ctx.clock.now()
    ctx.orders.create_or_verify(sample_order(order_id))
    ctx.states.create(transitions.new_record(order_id, reply_to, now))
    pending = ctx.states.get(order_id)
    assert pending is not None
    claimed = ctx.states.replace(transitions.claim(pending, now, ctx.settings.start_grace))
    assert claimed.locked_by is not None
    return claimed.locked_by


def _begin(ctx: AppContext, order_id: str, owner: str, step: str, agent: str, **kw: Any) -> BeginStepInput:
    request = agent_request(
        request_id=f"{owner}:{step}:{agent}",
        instance_id=owner,
        order_id=order_id,
        step=step,
        action="do",
        attempt=1,
        deadline=ctx.clock.now() + timedelta(seconds=60),
        idempotency_key=f"{order_id}:{step}",
        payload={"orderId": order_id},
    )
    return BeginStepInput(request=request, agent=agent, **kw)


# --- the retired v1: anything stranded? -----------------------------------------------------------------------


@pytest.fixture
def harness(cosmos_db: Any) -> Iterator[RuntimeHarness]:
    made = RuntimeHarness(cosmos_db=cosmos_db)
    yield made
    made.close()


def test_submitter_hears_completed_when_a_retired_v1_attempt_wrote_processed_before_sending_it(
    harness: RuntimeHarness,
) -> None:
    """FINDING. A v1 attempt did ``mark_processed`` (record ``Processed``, ``lockedBy`` cleared) and the
    upgrade came before its ``publish_status("Completed")`` ran. The v1 instance now replays as
    ``Superseded`` touching nothing, and ``Processed`` is terminal: no supervisor scan, no owed status
    (``supervisor/owed.py`` owes only failure statuses), no new attempt ever sends ``Completed``.
    The submitter of a finished order never hears that it finished (the runner's ``missing_statuses``)."""
    ctx = harness.ctx
    assert ctx is not None
    owner = _claimed(ctx, "o-v1done")
    record = ctx.states.get("o-v1done")
    assert record is not None
    # v1's last write, as v1's mark_processed made it (its publish_status had not run yet)
    ctx.states.replace(transitions.mark_processed(record, owner, ctx.clock.now()))

    harness.host.engine.start(V1, owner, json.dumps({"orderId": "o-v1done", "attempt": 1}))
    harness.run_until_idle(timedelta(seconds=1))
    instance = harness.host.engine.instance(owner)
    assert instance is not None and instance.is_finished
    assert instance.output == {"result": "Superseded", "version": V1, "released": False}

    # give every recovery path (supervisor scans, owed notifications, couriers) a long time
    for _ in range(6):
        harness.clock.advance_to(harness.clock.now() + timedelta(minutes=30))
        run_supervisor(ctx, ScanState())
        harness.run_until_idle(timedelta(minutes=1))

    heard = [json.loads(str(m))["status"] for m in harness.broker.contents(CLIENT)]
    assert "Completed" in heard, f"the submitter heard {heard}"


def test_an_order_whose_v1_attempt_paused_for_review_is_retried_within_a_step_timeout_of_the_upgrade(
    harness: RuntimeHarness,
) -> None:
    """FINDING. docs/design.md "Versions": an order caught mid-attempt by an upgrade costs "up to a step
    timeout of delay". A v1 attempt paused for an operator's review has moved ``completeBy`` past the
    review deadline (REVIEW_TIMEOUT_SECONDS, 24 h by default; compensation.await_review). Superseded, it
    can no longer take the operator's answer (the ops API raises ``ReviewDecision`` into a finished
    instance: 409), and the supervisor leaves the record alone until that deadline: the order sits
    ``Processing`` under a dead owner for up to a day."""
    ctx = harness.ctx
    assert ctx is not None
    owner = _claimed(ctx, "o-v1review")
    now = ctx.clock.now()
    record = ctx.states.get("o-v1review")
    assert record is not None
    begun = transitions.begin_step(
        record, owner, "charge-payment", "payment", f"{owner}:charge-payment:payment", now + timedelta(minutes=1), now
    )
    review_until = now + ctx.settings.review_timeout + ctx.settings.start_grace
    paused = compensation.await_review(
        begun, owner, "charge-payment", f"{owner}:charge-payment:review:1", review_until, now
    )
    ctx.states.replace(replace(paused, version=record.version))

    harness.host.engine.start(V1, owner, json.dumps({"orderId": "o-v1review", "attempt": 1}))
    harness.run_until_idle(timedelta(seconds=1))
    instance = harness.host.engine.instance(owner)
    assert instance is not None and instance.output == {"result": "Superseded", "version": V1, "released": True}

    harness.clock.advance_to(now + ctx.settings.step_timeout + ctx.settings.start_grace + timedelta(minutes=5))
    run_supervisor(ctx, ScanState())

    after = ctx.states.get("o-v1review")
    assert after is not None
    assert after.locked_by != owner, (
        f"still {after.process_state} under the superseded {owner} until {after.complete_by}"
    )


# --- statusSent / the ops API's statusesSent ----------------------------------------------------------------


def test_ops_statuses_sent_lists_no_status_for_an_order_submitted_without_reply_to(app_context: AppContext) -> None:
    """FINDING. An order without ``replyTo``: nothing is ever sent to anyone. Before 800363c the scheduler
    skipped ``publish_status`` for it (``call_publish_status`` with ``plan``) so the ops detail's
    ``statusesSent`` was empty. Now the first ``begin_step`` (``load_order`` then) / ``mark_processed``
    answer ``statusSent: true`` (``_tell_once`` returns True whatever ``publish_status`` returned,
    activities/scheduler_steps.py), and ``operations/instances.py`` ``_sent`` lists ``Processing`` and
    ``Completed`` as sent."""
    ctx = app_context
    owner = _claimed(ctx, "o-noreply", reply_to=None)
    begin = _begin(ctx, "o-noreply", owner, "reserve-inventory", "inventory", announce=True)
    began = begin_step(ctx, begin)
    assert isinstance(began, StepBegun)
    done = mark_processed(ctx, MarkProcessedInput(order_id="o-noreply", instance_id=owner, attempt=1))
    assert isinstance(done, Processed)
    assert isinstance(ctx.sender, RecordingSender) and ctx.sender.sent == []  # nothing was sent

    history = [
        {
            "EventType": "TaskCompleted",
            "FunctionName": names.BEGIN_STEP,
            "Input": json.dumps(begin.to_json()),
            "Result": json.dumps(began.to_json()),
            "Timestamp": "t1",
        },
        {
            "EventType": "TaskCompleted",
            "FunctionName": names.MARK_PROCESSED,
            "Input": json.dumps({"orderId": "o-noreply", "instanceId": owner, "attempt": 1}),
            "Result": json.dumps(done.to_json()),
            "Timestamp": "t2",
        },
    ]
    assert statuses_sent(owner, history) == []


# --- begin_step + completes under a failed send / lost response (checks that hold) --------------------------


class FailingOnce(RecordingSender):
    """Fails the first send to ``queue`` (before storing it), then records."""

    def __init__(self, queue: str) -> None:
        super().__init__()
        self._queue = queue
        self.failed = 0

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue == self._queue and self.failed == 0:
            self.failed += 1
            raise SendError(f"send to {queue!r} failed")
        super().send(queue, message)


def test_begin_step_retried_after_its_send_failed_records_the_previous_result_once(app_context: AppContext) -> None:
    """The write of ``begin_step(arrange-shipment, completes=charge-payment)`` lands, the request's send
    fails, the activity is retried: one compensation log entry for the charge (its result as carried),
    the shipment step in flight, one request on the queue (the retry sends the same MessageId)."""
    sender = FailingOnce("shipping-requests")
    ctx = context_with(app_context, sender=sender)
    owner = _claimed(ctx, "o-send")
    charge = _begin(ctx, "o-send", owner, "charge-payment", "payment", queue="payment-requests")
    assert isinstance(begin_step(ctx, charge), StepBegun)
    result = {"chargeId": "ch-1", "amountCents": 1000}
    ship = _begin(
        ctx,
        "o-send",
        owner,
        "arrange-shipment",
        "shipping",
        completes=StepResult(step="charge-payment", result=result),
        queue="shipping-requests",
    )
    with pytest.raises(SendError):
        begin_step(ctx, ship)
    record = ctx.states.get("o-send")
    assert record is not None and record.steps["charge-payment"].status is StepStatus.SUCCEEDED  # the write landed

    assert isinstance(begin_step(ctx, ship), StepBegun)  # the orchestrator's retry of the same input

    record = ctx.states.get("o-send")
    assert record is not None
    assert [(e.step, e.agent) for e in record.compensation] == [("charge-payment", "payment")]
    assert record.steps["charge-payment"].result == result
    assert record.steps["arrange-shipment"].status is StepStatus.IN_PROGRESS
    assert record.current_step == "arrange-shipment"
    assert [b["requestId"] for b in sender.bodies("shipping-requests")] == [ship.request.request_id]


def test_mark_processed_retried_after_a_lost_response_records_the_last_result_and_completed_once(
    app_context: AppContext,
) -> None:
    """``mark_processed(completes=arrange-shipment)`` commits and its response is lost; the retry is
    answered as done (hand-over), the shipment result is on the record, ``Completed`` goes out with
    one MessageId (a repeat collapses in duplicate detection)."""
    flaky = FlakyStates(app_context.states)
    ctx = context_with(app_context, states=flaky)
    owner = _claimed(ctx, "o-lost")
    ship = _begin(ctx, "o-lost", owner, "arrange-shipment", "shipping")
    assert isinstance(begin_step(ctx, ship), StepBegun)
    result = {"shipmentId": "shp-1"}
    done = MarkProcessedInput(
        order_id="o-lost",
        instance_id=owner,
        attempt=1,
        completes=StepResult(step="arrange-shipment", result=result),
    )
    flaky.lose["o-lost"] = 1
    with pytest.raises(Exception, match="no response"):
        mark_processed(ctx, done)

    retried = mark_processed(ctx, done)

    assert retried == Processed(status_sent=True)
    record = ctx.states.get("o-lost")
    assert record is not None
    assert record.process_state is ProcessState.PROCESSED
    assert record.steps["arrange-shipment"].status is StepStatus.SUCCEEDED
    assert record.steps["arrange-shipment"].result == result
    assert isinstance(ctx.sender, RecordingSender)
    completed = [b for b in ctx.sender.bodies(CLIENT) if b["status"] == "Completed"]
    assert len(completed) == 1


# --- a final success status whose write landed but whose activity never answered --------------------------


def test_completed_is_sent_when_mark_processed_committed_but_its_first_tries_failed(app_context: AppContext) -> None:
    """FINDING (fixed). ``mark_processed(completes=...)`` commits and its response is lost; its next
    tries meet a 503. The record is ``Processed``: terminal, never scanned again, and nothing owes its
    ``Completed`` (``supervisor/owed.py`` owes only failure statuses). Seen in the local runner (cosmos
    lost_response_rate 0.1 and unavailable_rate 0.08, 80 orders, seed 4: ord-00005; ``finish_compensation``
    the same for ``Compensated``, seed 3: ord-00024). The scheduler now retries the hand-over write as long
    as a final status (``HAND_OVER_RETRY_DELAYS``, replay test in test_scheduler_replay.py); a later try
    finds its own write done and sends ``Completed``."""
    flaky = FlakyStates(app_context.states)
    ctx = context_with(app_context, states=flaky)
    owner = _claimed(ctx, "o-nocompleted")
    assert isinstance(begin_step(ctx, _begin(ctx, "o-nocompleted", owner, "arrange-shipment", "shipping")), StepBegun)
    done = MarkProcessedInput(
        order_id="o-nocompleted",
        instance_id=owner,
        attempt=1,
        completes=StepResult(step="arrange-shipment", result={"shipmentId": "shp-1"}),
    )
    flaky.lose["o-nocompleted"] = 1
    flaky.refuse["o-nocompleted"] = 2
    for _ in range(3):  # the first try and the next two
        with pytest.raises(Exception, match=r"503|no response"):
            mark_processed(ctx, done)
    record = ctx.states.get("o-nocompleted")
    assert record is not None and record.process_state is ProcessState.PROCESSED

    assert mark_processed(ctx, done) == Processed(status_sent=True)  # the fourth try: the hand-over, found done
    assert isinstance(ctx.sender, RecordingSender)
    assert [b["status"] for b in ctx.sender.bodies(CLIENT)] == ["Completed"]


# --- Processing / Completed sent by the activities (checks that hold) -------------------------------------


class AlwaysFailing(RecordingSender):
    """Every send to ``queue`` fails (the reply queue is unreachable for now)."""

    def __init__(self, queue: str) -> None:
        super().__init__()
        self._queue = queue

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue == self._queue:
            raise SendError(f"send to {queue!r} failed")
        super().send(queue, message)


def test_the_first_begin_step_announces_processing_under_one_message_id_per_attempt(app_context: AppContext) -> None:
    ctx = app_context
    owner = _claimed(ctx, "o-proc")
    begin = _begin(ctx, "o-proc", owner, "reserve-inventory", "inventory", announce=True)
    first, again = begin_step(ctx, begin), begin_step(ctx, begin)  # a retried begin announces again...
    assert first == again == StepBegun(status_sent=True)
    assert isinstance(ctx.sender, RecordingSender)
    assert ctx.sender.message_ids(CLIENT) == ["o-proc:Processing:1"] * 2  # ...under the same MessageId
    # a begin not asked to announce (every later step, an outage wait's attempt) says nothing
    quiet = begin_step(ctx, _begin(ctx, "o-proc", owner, "reserve-inventory", "inventory"))
    assert quiet == StepBegun() and "statusSent" not in quiet.to_json()
    assert len(ctx.sender.message_ids(CLIENT)) == 2


def test_a_failed_processing_or_completed_send_never_fails_its_read_or_write(app_context: AppContext) -> None:
    ctx = context_with(app_context, sender=AlwaysFailing(CLIENT))
    owner = _claimed(ctx, "o-quiet")
    began = begin_step(ctx, _begin(ctx, "o-quiet", owner, "arrange-shipment", "shipping", announce=True))
    assert began == StepBegun(status_sent=False)  # tried once: Processing is a progress status
    begun = ctx.states.get("o-quiet")
    assert begun is not None and begun.steps["arrange-shipment"].status is StepStatus.IN_PROGRESS
    done = mark_processed(
        ctx,
        MarkProcessedInput(
            order_id="o-quiet",
            instance_id=owner,
            attempt=1,
            completes=StepResult(step="arrange-shipment", result={"shipmentId": "shp-9"}),
        ),
    )
    assert done == Processed(status_sent=False)  # the scheduler retries Completed on its timers
    record = ctx.states.get("o-quiet")
    assert record is not None and record.process_state is ProcessState.PROCESSED
    assert record.steps["arrange-shipment"].result == {"shipmentId": "shp-9"}
