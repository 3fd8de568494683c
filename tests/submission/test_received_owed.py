"""``Received`` owed by a delivery that died between its failed send and the courier hand-over.

Runner, harsh-refusals.json (20 % Service Bus send failures, 10 % lock expiry, a host restart every
minute, MAX_PENDING 2), 300 orders, seed 2, ord-00202 (``missing_statuses`` 1): the delivery that created
the record failed its ``Received`` send, stalled past its lock, and a host restart killed it before the
trigger handed the owed status to the courier (submission/blueprint.py hands it over after the handler
returns). The redelivery came after the attempt had begun, so it said nothing (``_not_begun``), and
nobody ever said ``Received``. Since then the failed send is marked on the record (``receivedOwed``) and
whoever writes the record next says it first (notifications/received.py). Each test plays the delivery,
drops what the trigger would have done after the handler (the host stops), then lets the order go on:
before the mark, the submitter never heard ``Received``."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from activities.compensation_steps import finish_compensation
from activities.scheduler_steps import begin_step, mark_processed, publish_status, settle_retired_attempt
from adapters.clock import ManualClock
from adapters.cosmos.errors import StoreUnavailable
from adapters.cosmos.state_store import StateStore
from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.activities import (
    OWNED,
    AttemptInput,
    BeginStepInput,
    FinishCompensationInput,
    MarkProcessedInput,
    Processed,
    PublishStatusInput,
    SettleRetiredInput,
    StepBegun,
    StepResult,
)
from contracts.names import OPERATOR_ALERTS_QUEUE
from dependencies import AppContext
from domain.records import StateRecord
from domain.states import ProcessState
from orchestrators import starter
from orchestrators.agent_call import agent_request
from orchestrators.starter import Claim
from submission.intake import handle_orders_message
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.contexts import context_with
from tests.fakes import FakeReceivedMessage, RecordingSender
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos

CLIENT = "client-statuses"
ORDER = "o-owed"


class ReceivedSendsFail(RecordingSender):
    """The submitter's queue refuses the first ``failures`` sends of ``Received`` (a transient Service Bus
    error), and every other status while ``down`` holds it."""

    def __init__(self, failures: int = 1, down: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.failures = failures
        self.down = down

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue == CLIENT:
            status = json.loads(message.body)["status"]
            if status == "Received" and self.failures > 0:
                self.failures -= 1
                raise SendError(f"send to {queue!r} failed")
            if status in self.down:
                raise SendError(f"send to {queue!r} failed")
        super().send(queue, message)


def _heard(ctx: AppContext) -> list[str]:
    assert isinstance(ctx.sender, RecordingSender)
    return [b["status"] for b in ctx.sender.bodies(CLIENT) if b["orderId"] == ORDER]


def _body() -> bytes:
    return json.dumps(order(orderId=ORDER)).encode()


def _delivered_then_host_stopped(ctx: AppContext) -> Claim | None:
    """The order's first delivery: its ``Received`` send fails and is owed to the courier; the host stops
    before the trigger hands anything over (the claim is returned: the caller decides whether it started)."""
    result = handle_orders_message(ctx, FakeReceivedMessage.of(_body(), message_id=ORDER))
    assert [owed.status for owed in result.owed] == ["Received"]
    assert _heard(ctx) == []
    record = ctx.states.get(ORDER)
    assert record is not None and record.received_owed is not None  # the mark, one write on this path
    return result.claim


def _later(ctx: AppContext, delta: timedelta) -> None:
    clock = ctx.clock
    assert isinstance(clock, ManualClock)
    clock.advance(delta)


def first_step(ctx: AppContext, claim: Claim) -> BeginStepInput:
    """The attempt's first ``begin_step`` (write 1, ``announce``, and ``sayReceived`` when the claim's input says
    it: tests/orchestrators/test_scheduler_replay.py) as the scheduler schedules it."""
    request = agent_request(
        request_id=f"{claim.instance_id}:reserve-inventory:inventory",
        instance_id=claim.instance_id,
        order_id=claim.order_id,
        step="reserve-inventory",
        action="reserve",
        attempt=claim.attempt,
        deadline=ctx.clock.now() + ctx.settings.step_timeout,
        idempotency_key=f"{claim.order_id}:reserve-inventory",
        payload={"orderId": claim.order_id},
    )
    say_received = AttemptInput.from_json(claim.orchestration_input()).say_received
    return BeginStepInput(request=request, agent="inventory", announce=True, write_number=1, say_received=say_received)


def test_the_first_step_of_the_attempt_the_delivery_claimed_says_received_before_processing(
    app_context: AppContext,
) -> None:
    """The host stops after the trigger started the claimed attempt, before it handed ``Received`` over."""
    ctx = context_with(app_context, sender=ReceivedSendsFail())
    claim = _delivered_then_host_stopped(ctx)
    assert claim is not None

    assert isinstance(begin_step(ctx, first_step(ctx, claim)), StepBegun)

    assert _heard(ctx) == ["Received", "Processing"]
    record = ctx.states.get(ORDER)
    assert record is not None and record.received_owed is None  # cleared by the begin_step's own write


def test_the_supervisors_retry_of_the_claim_that_never_started_says_received(app_context: AppContext) -> None:
    """The host stops before it started the claim too: the supervisor retries it once the start grace has
    passed, and says ``Received`` in that write."""
    ctx = context_with(app_context, sender=ReceivedSendsFail())
    assert _delivered_then_host_stopped(ctx) is not None

    _later(ctx, ctx.settings.start_grace + timedelta(seconds=1))
    run_supervisor(ctx, ScanState())

    assert _heard(ctx) == ["Received"]
    record = ctx.states.get(ORDER)
    assert record is not None and (record.process_state, record.failure_count) == (ProcessState.PENDING, 1)
    assert record.received_owed is None


def test_when_the_retry_cannot_say_it_either_the_next_attempt_does_before_processing(app_context: AppContext) -> None:
    """The supervisor's retry meets a failing queue too: the mark stays; the starter claims attempt 2, whose
    first step says ``Received``, then ``Processing``. A redelivery after that step finds nothing owed."""
    ctx = context_with(app_context, sender=ReceivedSendsFail(failures=2))
    assert _delivered_then_host_stopped(ctx) is not None
    _later(ctx, ctx.settings.start_grace + timedelta(seconds=1))
    run_supervisor(ctx, ScanState())
    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.PENDING and record.received_owed is not None

    _later(ctx, ctx.settings.retry_backoff_max + timedelta(seconds=1))
    claims = starter.sweep(ctx)
    assert [c.attempt for c in claims] == [2]
    assert isinstance(begin_step(ctx, first_step(ctx, claims[0])), StepBegun)
    assert _heard(ctx) == ["Received", "Processing"]

    again = handle_orders_message(ctx, FakeReceivedMessage.of(_body(), message_id=ORDER))
    assert again.settlement.kind == "complete" and again.owed == ()
    assert _heard(ctx) == ["Received", "Processing"]  # begun, nothing owed: the redelivery says nothing


def test_a_pending_order_the_starter_claims_says_received_at_itsfirst_step(app_context: AppContext) -> None:
    """Over the in-flight cap the record is created ``Pending``: no claim to start, only ``Received`` to hand
    over, lost with the host. The starter's claim begins the attempt."""
    sender = ReceivedSendsFail()
    full = context_with(app_context, sender=sender, settings=replace(app_context.settings, max_in_flight=1))
    other = handle_orders_message(
        full, FakeReceivedMessage.of(json.dumps(order(orderId="o-other", replyTo="other-statuses")).encode())
    )
    assert other.claim is not None  # the one order in flight
    assert _delivered_then_host_stopped(full) is None

    ctx = context_with(app_context, sender=sender)  # room again
    claims = starter.sweep(ctx)
    assert [c.order_id for c in claims] == [ORDER]
    assert isinstance(begin_step(ctx, first_step(ctx, claims[0])), StepBegun)

    assert _heard(ctx) == ["Received", "Processing"]


def test_a_redelivery_after_a_step_began_says_received_while_it_is_still_owed(app_context: AppContext) -> None:
    """The first step's own send of ``Received`` fails as well: the mark stays, so its ``Processing`` is not
    sent (it went out, before ``Received``: the runner's ``statuses_before_received``), and the order's
    redelivery, which finds it begun, says ``Received`` because the record still owes it."""
    ctx = context_with(app_context, sender=ReceivedSendsFail(failures=2))
    claim = _delivered_then_host_stopped(ctx)
    assert claim is not None
    assert begin_step(ctx, first_step(ctx, claim)) == StepBegun()  # Processing withheld, not to retry
    assert _heard(ctx) == []

    handle_orders_message(ctx, FakeReceivedMessage.of(_body(), message_id=ORDER))

    assert _heard(ctx) == ["Received"]


def _processed_owing_received(ctx: AppContext, number: int | None) -> tuple[MarkProcessedInput, PublishStatusInput]:
    """The order's delivery fails its ``Received`` send and the host stops; the attempt's first step and
    its ``Processed`` write cannot say it either (the submitter's queue refuses ``Received`` throughout):
    the write is made and the record still owes it. The scheduler's ``mark_processed`` and the ``Completed``
    it then sends on its durable timers (``publish_status``) are returned."""
    claim = _delivered_then_host_stopped(ctx)
    assert claim is not None
    assert isinstance(begin_step(ctx, first_step(ctx, claim)), StepBegun)  # its Received fails
    done = MarkProcessedInput(
        order_id=ORDER,
        instance_id=claim.instance_id,
        attempt=claim.attempt,
        completes=StepResult(step="reserve-inventory", result={"reservationId": "r-1"}),
        write_number=number,
    )
    completed = PublishStatusInput(
        order_id=ORDER, status="Completed", attempt=claim.attempt, reply_to=CLIENT, reply_to_known=True
    )
    return done, completed


@pytest.mark.parametrize("number", [2, None], ids=["numbered", "unnumbered"])
def test_the_order_ended_well_sends_completed_on_the_schedulers_timers_only_after_received(
    app_context: AppContext, number: int | None
) -> None:
    """Nobody writes a ``Processed`` record again: the write is made (a queue refusing for a while must not
    fail the order), and while ``Received`` cannot be sent its activity answers ``statusSent: false``
    without sending ``Completed``, which the scheduler then sends on its durable timers: that send says
    ``Received`` first (failing while it cannot), clears the mark, then says ``Completed``. The activity
    does not fail: failing, it spent the hand-over's retries (``HAND_OVER_RETRY_DELAYS``), and once a
    refusing queue had used most of them up the orchestration failed with ``Completed`` never sent nor
    alerted (fuzz: 25 % send failures, submitter 1's queue full for 25 minutes, 300 orders, seed 1,
    ``ord-00094``, ``missing_statuses`` 1). A later run of the write (numbered or not, past the mark's
    clearing) finds it made."""
    sender = ReceivedSendsFail(failures=5)  # the delivery's, the first step's, the write's two, one more
    ctx = context_with(app_context, sender=sender)
    done, completed = _processed_owing_received(ctx, number)

    assert mark_processed(ctx, done) == Processed(status_sent=False)  # its Received fails before and after it
    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.PROCESSED
    assert record.received_owed is not None
    assert _heard(ctx) == []  # no Processing (its step's Received failed), no Completed before Received

    counted = CountingReads(ctx.states)
    timers = context_with(ctx, states=counted)
    with pytest.raises(SendError):
        publish_status(timers, completed)  # the scheduler's first try: Received still fails, so no Completed
    assert _heard(ctx) == []
    publish_status(timers, completed)  # its next try
    assert _heard(ctx) == ["Received", "Completed"]
    assert counted.reads == 0  # this process's version of the ended record was enough
    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.PROCESSED and record.received_owed is None
    assert [e.event for e in record.history[-2:]] == ["Processed", "ReceivedSaid"]
    assert mark_processed(ctx, done) == Processed(status_sent=True)  # a later run: its write is made


def test_completed_still_waiting_for_received_at_its_last_try_is_alerted_undelivered(app_context: AppContext) -> None:
    """The submitter's queue never takes ``Received``: the last try of the scheduler's ``Completed`` gives it
    up as any final status's last try does (``StatusUndelivered``, alerted), never sending ``Completed``
    before ``Received``."""
    ctx = context_with(app_context, sender=ReceivedSendsFail(failures=1_000))
    done, completed = _processed_owing_received(ctx, 2)
    assert mark_processed(ctx, done) == Processed(status_sent=False)

    with pytest.raises(SendError):
        publish_status(ctx, replace(completed, last_try=True))

    assert _heard(ctx) == []
    assert isinstance(ctx.sender, RecordingSender)
    assert ctx.sender.message_ids(OPERATOR_ALERTS_QUEUE) == [f"alert:StatusUndelivered:{ORDER}:Completed:1"]


def _given_up(caplog: pytest.LogCaptureFixture) -> list[tuple[Any, Any]]:
    """The (status, attempt) of each ``StatusUndelivered`` event logged."""
    return [
        (r.__dict__["status"], r.__dict__["attempt"])
        for r in caplog.records
        if r.__dict__.get("event") == "StatusUndelivered"
    ]


def test_the_received_a_final_status_waited_for_is_given_up_with_it(
    app_context: AppContext, caplog: pytest.LogCaptureFixture
) -> None:
    """Fuzz seed 8123 (``missing_statuses`` 9): the ``Received`` the record owed, which the last try of ``Completed``
    failed to say, was given up with it silently (one ``StatusUndelivered``, for ``Completed``). It is now given up
    by name: an event of its own before ``Completed``'s, and named in the one alert, so the operator tells the
    submitter both."""
    ctx = context_with(app_context, sender=ReceivedSendsFail(failures=1_000))
    done, completed = _processed_owing_received(ctx, 2)
    assert mark_processed(ctx, done) == Processed(status_sent=False)

    with caplog.at_level(logging.INFO), pytest.raises(SendError):
        publish_status(ctx, replace(completed, last_try=True))

    assert _given_up(caplog) == [("Received", 0), ("Completed", completed.attempt)]
    assert isinstance(ctx.sender, RecordingSender)
    (alert,) = ctx.sender.bodies(OPERATOR_ALERTS_QUEUE)
    assert alert["details"]["undeliveredBefore"] == ["Received"]
    assert "(and the Received before it)" in alert["summary"]


def test_a_last_try_that_said_received_and_failed_its_status_gives_up_that_status_alone(
    app_context: AppContext, caplog: pytest.LogCaptureFixture
) -> None:
    """The counterpart: the owed ``Received`` went out on the last try and ``Completed`` failed after it; the
    submitter heard ``Received``, so only ``Completed`` is given up."""
    sender = ReceivedSendsFail(failures=4, down=frozenset({"Completed"}))  # Received goes out on the 5th send
    ctx = context_with(app_context, sender=sender)
    done, completed = _processed_owing_received(ctx, 2)
    assert mark_processed(ctx, done) == Processed(status_sent=False)

    with caplog.at_level(logging.INFO), pytest.raises(SendError):
        publish_status(ctx, replace(completed, last_try=True))

    assert _heard(ctx) == ["Received"]
    assert _given_up(caplog) == [("Completed", completed.attempt)]
    (alert,) = sender.bodies(OPERATOR_ALERTS_QUEUE)
    assert "undeliveredBefore" not in alert["details"]


class StoreDown:
    """Another process's view of a store that is down: no version of the record cached (``recent``), and every
    read fails."""

    def __init__(self, store: StateStore) -> None:
        self._store = store

    def recent(self, order_id: str) -> StateRecord | None:
        return None

    def get(self, order_id: str) -> StateRecord | None:
        raise StoreUnavailable("Cosmos DB 503")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@pytest.mark.parametrize("known", [True, False], ids=["replyTo-known", "replyTo-read"])
def test_a_last_try_that_cannot_read_the_record_gives_up_the_received_it_may_have_waited_for(
    app_context: AppContext, caplog: pytest.LogCaptureFixture, known: bool
) -> None:
    """Red team of cddb9e9 (runner, 200 orders, seed 1: submitter 1's queue full for good from 5 s, 10 % Service Bus
    send failures, a host restart every 5 minutes, a bare Durable outage at 10-50 s and a Cosmos DB outage at
    20800-22100 s, where the last tries fall: ``missing_statuses`` 63). The last try of ``Completed`` on another host
    (no version of the ended record cached) met the store down, reading the record for the ``Received`` it may still
    owe (or for its ``replyTo``). It gave ``Completed`` up alone: the ``Received`` the record still owed, never said,
    was named nowhere, as in fuzz seed 8123 but for a read that failed instead of a send. Nobody can tell then whether
    it is owed, so it is given up with the status by name (a submitter that heard it hears it again: harmless)."""
    ctx = context_with(app_context, sender=ReceivedSendsFail(failures=1_000))
    done, completed = _processed_owing_received(ctx, 2)
    assert mark_processed(ctx, done) == Processed(status_sent=False)
    down = context_with(ctx, states=StoreDown(ctx.states))
    last = replace(completed, last_try=True, reply_to=CLIENT if known else None, reply_to_known=known)

    with caplog.at_level(logging.INFO), pytest.raises(StoreUnavailable):
        publish_status(down, last)

    assert _heard(ctx) == []
    assert _given_up(caplog) == [("Received", 0), ("Completed", completed.attempt)]
    assert isinstance(ctx.sender, RecordingSender)
    (alert,) = ctx.sender.bodies(OPERATOR_ALERTS_QUEUE)
    assert alert["details"]["undeliveredBefore"] == ["Received"]
    assert "Received" in alert["summary"]


def test_an_order_escalated_before_any_step_hears_received_before_failed(app_context: AppContext) -> None:
    """Retries used up before any step began (``MAX_FAILURES`` 1 here), with the queue failing through the
    escalation's own send: the owed sweep says ``Received`` before ``Failed`` and clears both marks."""
    sender = ReceivedSendsFail(down=frozenset({"Received", "Failed"}))
    ctx = context_with(app_context, sender=sender, settings=replace(app_context.settings, max_failures=1))
    assert _delivered_then_host_stopped(ctx) is not None
    _later(ctx, ctx.settings.start_grace + timedelta(seconds=1))
    run_supervisor(ctx, ScanState())  # escalates; its say and the owed delivery's both fail
    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.ERROR
    assert record.received_owed is not None and record.complete_by is not None
    assert _heard(ctx) == []

    sender.down = frozenset()
    _later(ctx, timedelta(seconds=30))
    run_supervisor(ctx, ScanState())  # the owed sweep

    assert _heard(ctx) == ["Received", "Failed"]
    record = ctx.states.get(ORDER)
    assert record is not None and record.received_owed is None and record.complete_by is None


def test_an_order_cancelled_before_any_step_hears_received_when_its_compensation_round_is_claimed(
    app_context: AppContext,
) -> None:
    """The submitter cancels before the claim ever started: the supervisor's claim of the compensation round
    says ``Received``, before the round's ``Compensating``."""
    ctx = context_with(app_context, sender=ReceivedSendsFail())
    assert _delivered_then_host_stopped(ctx) is not None
    cancel = {"type": "CancelOrder", "schemaVersion": 1, "orderId": ORDER, "reason": "changed my mind"}
    handle_orders_message(ctx, FakeReceivedMessage.of(json.dumps(cancel).encode(), message_id="c-owed"))
    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.COMPENSATING
    assert _heard(ctx) == []

    report = run_supervisor(ctx, ScanState())

    assert [start.order_id for start in report.compensations] == [ORDER]
    assert _heard(ctx) == ["Received"]
    record = ctx.states.get(ORDER)
    assert record is not None and record.received_owed is None


class CountingReads:
    """The store, counting its reads of a record."""

    def __init__(self, store: StateStore) -> None:
        self._store = store
        self.reads = 0

    def get(self, order_id: str) -> StateRecord | None:
        self.reads += 1
        return self._store.get(order_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class FirstReadStale:
    """The next ``get`` of the order answers ``stale`` (a version read before the order moved on)."""

    def __init__(self, store: StateStore, stale: StateRecord) -> None:
        self._store = store
        self.stale: StateRecord | None = stale

    def get(self, order_id: str) -> StateRecord | None:
        if self.stale is not None and order_id == self.stale.order_id:
            found, self.stale = self.stale, None
            return found
        return self._store.get(order_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_a_redelivery_that_read_the_record_before_it_ended_does_not_mark_the_ended_record(
    app_context: AppContext,
) -> None:
    """A redelivery read the record not begun, its ``Received`` send fails, and its mark's write finds the
    order ended (``Processed``) meanwhile: the ended record is not marked (nobody would write it again to
    say it and clear the mark; the courier has the status)."""
    sender = ReceivedSendsFail(failures=0)
    ctx = context_with(app_context, sender=sender)
    claim = handle_orders_message(ctx, FakeReceivedMessage.of(_body(), message_id=ORDER)).claim
    assert claim is not None and _heard(ctx) == ["Received"]
    not_begun = ctx.states.get(ORDER)
    assert not_begun is not None
    assert isinstance(begin_step(ctx, first_step(ctx, claim)), StepBegun)
    done = MarkProcessedInput(order_id=ORDER, instance_id=claim.instance_id, attempt=claim.attempt, write_number=2)
    assert isinstance(mark_processed(ctx, done), Processed)

    sender.failures = 1
    stale = context_with(ctx, states=FirstReadStale(ctx.states, not_begun), sender=sender)
    again = handle_orders_message(stale, FakeReceivedMessage.of(_body(), message_id=ORDER))

    assert [owed.status for owed in again.owed] == ["Received"]  # to the courier, as before
    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.PROCESSED
    assert record.received_owed is None and record.history[-1].event == "Processed"


def test_an_order_compensated_while_received_cannot_be_sent_hears_it_before_compensated(
    app_context: AppContext,
) -> None:
    """Cancelled before its claim started, and ``Received`` still refused through the round's claim and its
    ``Compensated`` write: the write is made and does not fail its activity; the round's ``Compensated``,
    sent on its durable timers, says ``Received`` first (failing while it cannot), then ``Compensated``."""
    sender = ReceivedSendsFail(failures=4)  # the delivery's, the round's claim's, the write's two
    ctx = context_with(app_context, sender=sender)
    assert _delivered_then_host_stopped(ctx) is not None
    cancel = {"type": "CancelOrder", "schemaVersion": 1, "orderId": ORDER, "reason": "changed my mind"}
    handle_orders_message(ctx, FakeReceivedMessage.of(json.dumps(cancel).encode(), message_id="c-owed"))
    (round_,) = run_supervisor(ctx, ScanState()).compensations
    finished = FinishCompensationInput(order_id=ORDER, instance_id=round_.instance_id, write_number=1)

    assert finish_compensation(ctx, finished) == OWNED
    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.COMPENSATED
    assert record.received_owed is not None and _heard(ctx) == []

    compensated = PublishStatusInput(
        order_id=ORDER, status="Compensated", attempt=round_.round, reply_to=CLIENT, reply_to_known=True
    )
    publish_status(ctx, compensated)
    assert _heard(ctx) == ["Received", "Compensated"]
    record = ctx.states.get(ORDER)
    assert record is not None and record.received_owed is None and record.history[-1].event == "ReceivedSaid"


def test_a_retired_attempt_that_wrote_processed_leaves_completed_to_its_timers_while_received_is_owed(
    app_context: AppContext,
) -> None:
    """An instance of a retired scheduler version that had written ``Processed`` settles by sending
    ``Completed``: with ``Received`` still owed it does not, and answers the status unsent, so the
    orchestration sends it on its durable timers, ``Received`` first (``publish_status``)."""
    ctx = context_with(app_context, sender=ReceivedSendsFail(failures=4))
    done, completed = _processed_owing_received(ctx, 2)
    assert mark_processed(ctx, done) == Processed(status_sent=False)

    settled = settle_retired_attempt(
        ctx, SettleRetiredInput(order_id=ORDER, instance_id=done.instance_id, attempt=done.attempt)
    )

    assert settled.completed_status is False and _heard(ctx) == []
    publish_status(ctx, completed)
    assert _heard(ctx) == ["Received", "Completed"]


class MarkWriteFailsOnce:
    """The state store, its first replace failing with a 503 (the ``receivedOwed`` mark's write)."""

    def __init__(self, store: StateStore) -> None:
        self._store = store
        self.failed = 0

    def replace(self, record: StateRecord) -> StateRecord:
        if not self.failed:
            self.failed += 1
            raise StoreUnavailable("state store: 503 on replace (injected)")
        return self._store.replace(record)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_a_mark_whose_write_fails_once_is_written_on_its_retry(app_context: AppContext) -> None:
    """Runner, harsh-refusals.json, 300 orders, seed 1, ord-00248: the send failed, the mark's one write failed
    (a 503), and a host restart killed the delivery before the courier hand-over: nobody said ``Received``. The
    mark's write is tried again (``MARK_RETRY_DELAYS``), so the record owes it to its next writer."""
    store = MarkWriteFailsOnce(app_context.states)
    ctx = context_with(app_context, sender=ReceivedSendsFail(), states=store)
    claim = _delivered_then_host_stopped(ctx)
    assert store.failed == 1 and claim is not None

    assert isinstance(begin_step(ctx, first_step(ctx, claim)), StepBegun)
    assert _heard(ctx) == ["Received", "Processing"]


class MarkWriteAndReadFailOnce(MarkWriteFailsOnce):
    """The state store, its first replace (the mark's write) and the read after it failing (a 429 past the SDK's
    retries each)."""

    def __init__(self, store: StateStore) -> None:
        super().__init__(store)
        self.failed_reads = 0

    def get(self, order_id: str) -> StateRecord | None:
        if self.failed == 1 and not self.failed_reads:
            self.failed_reads += 1
            raise StoreUnavailable("state store: 429 on read (injected)")
        return self._store.get(order_id)


def test_a_mark_whose_write_and_read_again_fail_once_is_written_on_its_retry(app_context: AppContext) -> None:
    """Fuzzed runner profile (seed 19: 16 % Cosmos throttling, 11 % failed sends; ``ord-00078``): the send failed,
    the mark's write was throttled, and so was the read after it, which gave the mark up at once; the attempt's
    first step found nothing owed and the submitter heard ``Processing`` before the courier's ``Received``
    (``statuses_before_received``). The read takes the retries left too."""
    store = MarkWriteAndReadFailOnce(app_context.states)
    ctx = context_with(app_context, sender=ReceivedSendsFail(), states=store)
    claim = _delivered_then_host_stopped(ctx)
    assert store.failed == store.failed_reads == 1 and claim is not None

    assert isinstance(begin_step(ctx, first_step(ctx, claim)), StepBegun)
    assert _heard(ctx) == ["Received", "Processing"]


class MarkStoreDown(MarkWriteFailsOnce):
    """The state store, every replace and every read after the create failing (429s past the SDK's retries)."""

    def replace(self, record: StateRecord) -> StateRecord:
        self.failed += 1
        raise StoreUnavailable("state store: 429 on replace (injected)")

    def get(self, order_id: str) -> StateRecord | None:
        if self.failed:
            raise StoreUnavailable("state store: 429 on read (injected)")
        return self._store.get(order_id)


def test_a_mark_given_up_after_three_store_failures_says_so_as_an_event(
    app_context: AppContext, caplog: pytest.LogCaptureFixture
) -> None:
    """The left case (docs/design.md): the write and both reads again failed, the courier alone has ``Received``.
    It is an app event an operator can query (``ReceivedMarkGivenUp``), not a plain log line."""
    ctx = context_with(app_context, sender=ReceivedSendsFail(), states=MarkStoreDown(app_context.states))
    with caplog.at_level(logging.WARNING):
        result = handle_orders_message(ctx, FakeReceivedMessage.of(_body(), message_id=ORDER))
    assert [owed.status for owed in result.owed] == ["Received"]  # the courier has it
    given_up = [r for r in caplog.records if getattr(r, "event", None) == "ReceivedMarkGivenUp"]
    assert [getattr(r, "orderId", None) for r in given_up] == [ORDER]


def _given_up_then_store_back(app_context: AppContext, sender: RecordingSender, *, pending: bool = False) -> Claim:
    """The order's first delivery: its ``Received`` send fails and its mark is given up (the store failing every
    write and read after the create); the store is back for what follows. ``pending``: created over the in-flight
    cap, then claimed by the starter; else submission's own claim. Returns the attempt's claim."""
    settings = replace(app_context.settings, max_in_flight=0) if pending else app_context.settings
    down = context_with(app_context, sender=sender, settings=settings, states=MarkStoreDown(app_context.states))
    result = handle_orders_message(down, FakeReceivedMessage.of(_body(), message_id=ORDER))
    assert [owed.status for owed in result.owed] == ["Received"]  # the courier has it, and nothing else does
    record = app_context.states.get(ORDER)
    assert record is not None and record.received_owed is None
    if not pending:
        assert result.claim is not None
        return result.claim
    assert result.claim is None
    [claim] = starter.sweep(context_with(app_context, sender=sender))
    return claim


@pytest.mark.parametrize("pending", [False, True], ids=["submissions-claim", "starters-claim"])
def test_a_mark_given_up_leaves_received_to_the_attempts_first_step_before_processing(
    app_context: AppContext, pending: bool
) -> None:
    """Fuzz seeds 147, 152, 212, 289, 1018, 1071 (8-29 % of Cosmos DB requests throttled): the send failed, the mark
    was given up, and the courier, its first tries failing on the same queue, said ``Received`` after the first
    step's ``Processing``. The claim now says the submitter may not have heard it (``sayReceived``), and the
    attempt's first write says it first."""
    sender = ReceivedSendsFail()
    claim = _given_up_then_store_back(app_context, sender, pending=pending)
    assert claim.say_received and claim.orchestration_input()["sayReceived"] is True
    ctx = context_with(app_context, sender=sender)

    assert isinstance(begin_step(ctx, first_step(ctx, claim)), StepBegun)

    assert _heard(ctx) == ["Received", "Processing"]
    record = ctx.states.get(ORDER)
    assert record is not None and record.received_owed is None  # said and cleared by the same write


def test_when_the_first_step_cannot_say_it_either_its_processing_waits_for_it(app_context: AppContext) -> None:
    """The first step's own send of ``Received`` fails too: its write leaves the order owing it (``receivedOwed``),
    so ``Processing`` is not sent, and the next writer says ``Received`` first."""
    sender = ReceivedSendsFail(failures=2)
    claim = _given_up_then_store_back(app_context, sender)
    ctx = context_with(app_context, sender=sender)

    assert begin_step(ctx, first_step(ctx, claim)) == StepBegun()

    assert _heard(ctx) == []
    record = ctx.states.get(ORDER)
    assert record is not None and record.received_owed is not None


def test_an_attempt_1_the_starter_claims_says_received_again_before_processing(app_context: AppContext) -> None:
    """A record created ``Pending`` tells nobody whether its ``Received`` went out (a send that failed with a mark
    given up, or a creating delivery that died first, leave it the same as one heard): the starter's attempt 1 says
    it again (the same MessageId, collapsed by duplicate detection within 10 minutes)."""
    sender = RecordingSender()
    full = context_with(app_context, sender=sender, settings=replace(app_context.settings, max_in_flight=0))
    assert handle_orders_message(full, FakeReceivedMessage.of(_body(), message_id=ORDER)).claim is None
    ctx = context_with(app_context, sender=sender)
    [claim] = starter.sweep(ctx)
    assert (claim.attempt, claim.say_received) == (1, True)

    assert isinstance(begin_step(ctx, first_step(ctx, claim)), StepBegun)

    assert _heard(ctx) == ["Received", "Received", "Processing"]
    ids = [m.message_id for q, m in sender.sent if q == CLIENT and json.loads(m.body)["status"] == "Received"]
    assert len(set(ids)) == 1  # one MessageId: a repeat within 10 minutes collapses


def test_submissions_own_claim_with_received_sent_says_nothing_more(app_context: AppContext) -> None:
    """The happy path: submission said ``Received`` and claimed the order; the attempt's input does not ask for it
    again, and its first write sends ``Processing`` only (no extra send per order)."""
    ctx = context_with(app_context, sender=RecordingSender())
    claim = handle_orders_message(ctx, FakeReceivedMessage.of(_body(), message_id=ORDER)).claim
    assert claim is not None and not claim.say_received
    assert "sayReceived" not in claim.orchestration_input()

    assert isinstance(begin_step(ctx, first_step(ctx, claim)), StepBegun)

    assert _heard(ctx) == ["Received", "Processing"]


def test_an_order_cancelled_before_its_first_step_after_the_mark_was_given_up_hears_received_first(
    app_context: AppContext,
) -> None:
    """The mark given up, then the submitter cancels before the attempt's first step: the cancellation's write
    marks ``Received`` owed (no step ever began), so the compensation round's claim says it before the round's
    ``Compensating``. Before, only the courier had it, and the round's statuses could reach the submitter first."""
    sender = ReceivedSendsFail(failures=1)
    assert _given_up_then_store_back(app_context, sender) is not None
    ctx = context_with(app_context, sender=sender)
    cancel = {"type": "CancelOrder", "schemaVersion": 1, "orderId": ORDER, "reason": "changed my mind"}
    handle_orders_message(ctx, FakeReceivedMessage.of(json.dumps(cancel).encode(), message_id="c-given-up"))
    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.COMPENSATING
    assert record.received_owed is not None

    report = run_supervisor(ctx, ScanState())

    assert [start.order_id for start in report.compensations] == [ORDER]
    assert _heard(ctx) == ["Received"]
    record = ctx.states.get(ORDER)
    assert record is not None and record.received_owed is None


def test_a_cancellation_after_a_step_began_marks_nothing(app_context: AppContext) -> None:
    """A step began: the record tells its ``Received`` was said (its first write said it, or its mark holds), so a
    cancellation writes no mark and nobody repeats it."""
    ctx = context_with(app_context, sender=RecordingSender())
    claim = handle_orders_message(ctx, FakeReceivedMessage.of(_body(), message_id=ORDER)).claim
    assert claim is not None
    assert isinstance(begin_step(ctx, first_step(ctx, claim)), StepBegun)
    cancel = {"type": "CancelOrder", "schemaVersion": 1, "orderId": ORDER, "reason": "changed my mind"}
    handle_orders_message(ctx, FakeReceivedMessage.of(json.dumps(cancel).encode(), message_id="c-begun"))
    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.COMPENSATING and record.received_owed is None


@pytest.mark.parametrize("pending", [False, True], ids=["claimed", "pending"])
def test_an_order_an_operator_cancels_before_its_first_step_after_the_mark_was_given_up_hears_received_first(
    app_context: AppContext, pending: bool
) -> None:
    """The mark given up, then an operator cancels the order (``operations.actions.cancel``) before any step
    began (its claim unstarted, or still ``Pending`` over the in-flight cap): as with the submitter's
    ``CancelOrder``, the compensation round's ``Compensating`` must not reach the submitter before ``Received``,
    which only the courier had (its first tries failing on the same queue). Before, the operator's cancel wrote
    no mark, and ``Compensating`` went out first."""
    from operations import actions

    sender = ReceivedSendsFail(failures=1)
    settings = replace(app_context.settings, max_in_flight=0) if pending else app_context.settings
    down = context_with(app_context, sender=sender, settings=settings, states=MarkStoreDown(app_context.states))
    result = handle_orders_message(down, FakeReceivedMessage.of(_body(), message_id=ORDER))
    assert [owed.status for owed in result.owed] == ["Received"]  # the courier has it, and nothing else does
    assert (result.claim is None) is pending
    ctx = context_with(app_context, sender=sender)
    assert actions.cancel(ctx, ORDER, "ops", "customer phoned").status == 200
    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.COMPENSATING

    (round_,) = run_supervisor(ctx, ScanState()).compensations
    compensating = PublishStatusInput(
        order_id=ORDER, status="Compensating", attempt=round_.round, reply_to=CLIENT, reply_to_known=True
    )
    publish_status(ctx, compensating)

    assert _heard(ctx) == ["Received", "Compensating"]
    record = ctx.states.get(ORDER)
    assert record is not None and record.received_owed is None
