"""The fast path creates the state record already claimed for attempt 1: one state write per new order.
Over the in-flight cap it is created Pending for the starter's sweep; a delivery that finds the record
(a duplicate, a concurrent delivery's create, its own create whose response was lost) starts nothing."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.errors import AlreadyExists, StoreUnavailable
from adapters.cosmos.state_store import StateStore
from contracts.names import ORDERS_QUEUE
from contracts.store_retry import ROUND_PROPERTY
from dependencies import AppContext
from domain import transitions
from domain.records import StateRecord
from domain.states import ProcessState
from orchestrators.names import SCHEDULER
from orchestrators.starter import sweep
from settings import Settings
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.contexts import context_with
from tests.fakes import RecordingClient, RecordingSender, StateStoreThatFails
from tests.submission.corpus import order
from tests.submission.test_intake import submit

pytestmark = pytest.mark.cosmos


class CountingWrites:
    """The state store, counting its writes by kind."""

    def __init__(self, store: StateStore) -> None:
        self._store = store
        self.writes: list[str] = []

    def create(self, record: StateRecord) -> StateRecord:
        self.writes.append("create")
        return self._store.create(record)

    def replace(self, record: StateRecord) -> StateRecord:
        self.writes.append("replace")
        return self._store.replace(record)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class CreateLosesItsResponse:
    """The create commits, then the caller gets ``error`` instead of the answer: a lost response
    (``StoreUnavailable``), or the SDK's retry of it finding the record (``AlreadyExists``)."""

    def __init__(self, store: StateStore, error: Exception) -> None:
        self._store = store
        self._error: Exception | None = error

    def create(self, record: StateRecord) -> StateRecord:
        self._store.create(record)
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        raise AssertionError("a second create")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class StoreDownAfterTheCreate(CreateLosesItsResponse):
    """The create commits and loses its response, and the store stays unreachable for reads until
    ``back()``: this delivery cannot read its record back."""

    def __init__(self, store: StateStore) -> None:
        super().__init__(store, StoreUnavailable("Cosmos DB: no response to create"))
        self.down = False

    def create(self, record: StateRecord) -> StateRecord:
        self.down = True
        return super().create(record)

    def get(self, order_id: str) -> StateRecord | None:
        if self.down:
            raise StoreUnavailable(f"state store: 503 reading {order_id}")
        return self._store.get(order_id)

    def back(self) -> None:
        self.down = False


class AnotherDeliveryCreatesFirst:
    """A concurrent delivery of the same order: it creates the record (claimed, as the fast path does)
    between this delivery's read (which found nothing) and its create (409)."""

    def __init__(self, store: StateStore, theirs: StateRecord) -> None:
        self._store = store
        self._theirs: StateRecord | None = theirs

    def get(self, order_id: str) -> StateRecord | None:
        if self._theirs is not None:
            return None  # read before the other delivery's create
        return self._store.get(order_id)

    def create(self, record: StateRecord) -> StateRecord:
        if self._theirs is not None:
            self._store.create(self._theirs)
            self._theirs = None
        return self._store.create(record)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class ClientThatSeesTheStatuses(RecordingClient):
    """Records which statuses the submitter had been sent when each attempt was started."""

    def __init__(self, sender: RecordingSender) -> None:
        super().__init__()
        self._sender = sender
        self.statuses_at_start: list[list[str]] = []

    async def start_new(
        self, orchestration_function_name: str, instance_id: str | None = None, client_input: Any | None = None
    ) -> str:
        self.statuses_at_start.append([b["status"] for b in self._sender.bodies("client-statuses")])
        return await super().start_new(orchestration_function_name, instance_id, client_input)


def stored(ctx: AppContext, order_id: str) -> StateRecord:
    record = ctx.states.get(order_id)
    if record is None:
        raise AssertionError(f"no state record for {order_id}")
    return record


def statuses(sender: RecordingSender) -> list[str]:
    return [b["status"] for b in sender.bodies("client-statuses")]


def test_a_new_order_is_one_state_write_the_create_already_claimed(functions, app_context, sender, clock):
    states = CountingWrites(app_context.states)
    ctx = context_with(app_context, states=states)
    client = ClientThatSeesTheStatuses(sender)
    assert submit(functions, order(), client).only[0] == "complete"
    assert states.writes == ["create"]  # no claim replace after it
    record = stored(ctx, "ord-1")
    assert isinstance(record.submitted_as, int)  # the sequence number of the message that created it
    created = transitions.new_claimed_record(
        "ord-1", "client-statuses", clock.now(), ctx.settings.start_grace, submitted_as=record.submitted_as
    )
    assert replace(record, version=None) == created
    assert client.attempts == [(SCHEDULER, "ord-1:1", "ord-1", 1)]
    assert client.statuses_at_start == [["Received"]]  # told before the attempt was started


def test_the_counts_move_the_order_straight_to_processing(functions, app_context):
    ctx = app_context
    assert (ctx.counts.get(ProcessState.PENDING), ctx.counts.get(ProcessState.PROCESSING)) == (0, 0)  # cached
    submit(functions, order())
    assert (ctx.counts.get(ProcessState.PENDING), ctx.counts.get(ProcessState.PROCESSING)) == (0, 1)


def test_both_moves_are_logged_for_the_one_write(functions, app_context, caplog):
    with caplog.at_level(logging.INFO):
        submit(functions, order())
    moves = [
        (r.fromState, r.toState, r.transition, r.lockedBy)  # type: ignore[attr-defined]
        for r in caplog.records
        if getattr(r, "event", None) == "StateTransition"
    ]
    assert moves == [("(new)", "Pending", "Received", None), ("Pending", "Processing", "Claimed", "ord-1:1")]


def test_at_the_in_flight_cap_the_record_is_created_pending_for_the_sweep(functions, app_context, sender):
    states = CountingWrites(app_context.states)
    ctx = context_with(app_context, states=states, settings=Settings.from_env({}, MAX_IN_FLIGHT="1"))
    submit(functions, order(orderId="a"))
    client = ClientThatSeesTheStatuses(sender)
    assert submit(functions, order(orderId="b"), client).only[0] == "complete"
    assert states.writes == ["create", "create"]
    waiting = stored(ctx, "b")
    assert (waiting.process_state, waiting.attempt, waiting.locked_by) == (ProcessState.PENDING, 0, None)
    assert [e.event for e in waiting.history] == ["Received"]
    assert client.started == []
    assert [b["status"] for b in sender.bodies("client-statuses") if b["orderId"] == "b"] == ["Received"]
    assert (ctx.counts.get(ProcessState.PENDING), ctx.counts.get(ProcessState.PROCESSING)) == (1, 1)
    # the sweep claims it once there is room
    assert sweep(ctx) == []
    ctx.counts.clear()
    a = stored(ctx, "a")
    ctx.states.replace(transitions.mark_processed(a, "a:1", ctx.clock.now()))
    assert [(c.order_id, c.instance_id) for c in sweep(ctx)] == [("b", "b:1")]


def test_a_duplicate_writes_nothing_starts_nothing_and_repeats_received_while_nothing_began(
    functions, app_context, sender
):
    submit(functions, order())
    states = CountingWrites(app_context.states)
    ctx = context_with(app_context, states=states)
    before = stored(ctx, "ord-1")
    client = RecordingClient()
    assert submit(functions, order(), client).only[0] == "complete"
    assert states.writes == [] and client.started == []
    assert stored(ctx, "ord-1").version == before.version
    assert sender.message_ids("client-statuses") == ["ord-1:Received:0", "ord-1:Received:0"]  # collapsed by id
    # once the attempt has begun a step, a duplicate says nothing more
    began = transitions.begin_step(
        before, "ord-1:1", "reserve-inventory", "inventory", "r", ctx.clock.now(), ctx.clock.now()
    )
    ctx.states.replace(began)
    submit(functions, order(), client)
    assert client.started == [] and len(sender.message_ids("client-statuses")) == 2


def test_a_delivery_that_loses_the_create_to_a_concurrent_one_starts_nothing(functions, app_context, clock):
    theirs = transitions.new_claimed_record("ord-1", "client-statuses", clock.now(), app_context.settings.start_grace)
    ctx = context_with(app_context, states=AnotherDeliveryCreatesFirst(app_context.states, theirs))
    client = RecordingClient()
    assert submit(functions, order(), client).only[0] == "complete"
    assert client.started == []  # the winner starts attempt 1
    record = stored(ctx, "ord-1")
    assert [e.event for e in record.history] == ["Received", "Claimed"]
    assert ctx.counts.get(ProcessState.PROCESSING) == 0  # this process claimed nothing


def test_a_create_whose_response_was_lost_is_read_back_and_started_by_its_own_delivery(
    functions, app_context, clock, sender
):
    """The create landed and its response was lost (``StoreUnavailable``): the record read back is this
    very create, so the delivery goes on as its creator: Received said, attempt 1 started, nothing counted."""
    lost = StoreUnavailable("Cosmos DB: no response to create")
    ctx = context_with(app_context, states=CreateLosesItsResponse(app_context.states, lost))
    client = RecordingClient()
    assert submit(functions, order(), client).only[0] == "complete"
    assert client.attempts == [(SCHEDULER, "ord-1:1", "ord-1", 1)]
    assert statuses(sender) == ["Received"]
    record = stored(ctx, "ord-1")
    assert (record.process_state, record.locked_by, record.failure_count) == (ProcessState.PROCESSING, "ord-1:1", 0)
    assert submit(functions, order(), client).only[0] == "complete"  # a redelivery: a duplicate, nothing more
    assert len(client.started) == 1


def test_a_create_whose_response_was_lost_and_cannot_be_read_back_is_handled_again_later(
    functions, app_context, sender
):
    states = StoreDownAfterTheCreate(app_context.states)
    context_with(app_context, states=states)
    client = RecordingClient()
    assert submit(functions, order(), client).only[0] == "complete"  # its copy is due later (store_outage)
    assert client.started == [] and statuses(sender) == []
    assert [m.application_properties[ROUND_PROPERTY] for q, m in sender.sent if q == ORDERS_QUEUE] == [1]
    states.back()  # the store answers again: the copy, handled later, finds the record not begun
    assert submit(functions, order(), client).only[0] == "complete"
    assert statuses(sender) == ["Received"]


def test_a_create_retried_by_the_sdk_into_a_409_starts_nothing_and_the_supervisor_retries_it_after_the_grace(
    functions, app_context, clock, sender
):
    """It cannot tell its own claim from a concurrent delivery's: the claim stays unstarted, and the
    supervisor recovers it once START_GRACE has passed, as after any start that failed."""
    error = AlreadyExists("Entity with the specified id exists")
    ctx = context_with(app_context, states=CreateLosesItsResponse(app_context.states, error))
    client = RecordingClient()
    assert submit(functions, order(), client).only[0] == "complete"
    assert client.started == []
    assert statuses(sender) == ["Received"]  # said by whichever delivery completed
    record = stored(ctx, "ord-1")
    assert (record.process_state, record.locked_by) == (ProcessState.PROCESSING, "ord-1:1")
    assert record.complete_by == clock.now() + ctx.settings.start_grace

    clock.advance(ctx.settings.start_grace - timedelta(seconds=1))
    run_supervisor(ctx, ScanState())
    assert stored(ctx, "ord-1").locked_by == "ord-1:1"  # not before the grace
    clock.advance(timedelta(seconds=1))
    run_supervisor(ctx, ScanState())
    retried = stored(ctx, "ord-1")
    assert (retried.process_state, retried.failure_count, retried.history[-1].event) == (
        ProcessState.PENDING,
        1,
        "RetryScheduled",
    )
    clock.advance(ctx.settings.retry_backoff_max)
    ctx.counts.clear()
    assert [c.instance_id for c in sweep(ctx)] == ["ord-1:2"]


def a_notification_waits_for(functions: dict[str, Any], order_id: str) -> None:
    """A PaymentNotification for ``order_id`` arrives first: deferred, its entry waiting in the deferral log."""
    note = {
        "type": "PaymentNotification",
        "schemaVersion": 1,
        "notificationId": f"n-{order_id}",
        "orderId": order_id,
        "amountCents": 2500,
        "currency": "EUR",
        "providerReference": f"psp-{order_id}",
    }
    assert submit(functions, note).only[0] == "defer"


def old_enough_to_account_for(ctx: AppContext) -> None:
    """The waiting notification's entry older than ``PEEK_SWEEP_AGE_MINUTES``: the submission, not finding its
    message (this context's queues have nothing deferred), accounts for it (a write) at once; a young one's
    message may be a store-retry copy on its way, and only a ``RetryDeferred`` is scheduled for it."""
    clock = ctx.clock
    assert isinstance(clock, ManualClock)
    clock.advance(ctx.settings.peek_sweep_age + timedelta(minutes=1))


def test_a_claimed_order_whose_deferred_notifications_cannot_be_applied_is_started_and_abandoned(
    functions, app_context, sender
):
    """The deferral log is read before the record is created (a failure there writes nothing: a copy, for
    later); what can fail after the claim is applying the notifications it lists."""
    a_notification_waits_for(functions, "ord-1")
    old_enough_to_account_for(app_context)
    deferrals = StateStoreThatFails(app_context.deferrals, "save")
    ctx = context_with(app_context, deferrals=deferrals)
    client = ClientThatSeesTheStatuses(sender)
    assert submit(functions, order(), client).only[0] == "abandon"  # the redelivery recovers them
    assert client.attempts == [(SCHEDULER, "ord-1:1", "ord-1", 1)]
    assert client.statuses_at_start == [["Received"]]
    deferrals.failing.clear()
    assert submit(functions, order(), client).only[0] == "complete"
    assert len(client.started) == 1
    assert stored(ctx, "ord-1").locked_by == "ord-1:1"


def test_a_pending_order_whose_deferred_notifications_cannot_be_applied_is_abandoned_as_before(functions, app_context):
    a_notification_waits_for(functions, "b")
    old_enough_to_account_for(app_context)
    deferrals = StateStoreThatFails(app_context.deferrals, "save")
    ctx = context_with(app_context, deferrals=deferrals, settings=Settings.from_env({}, MAX_IN_FLIGHT="1"))
    submit(functions, order(orderId="a"))  # claimed and started: the cap is reached
    client = RecordingClient()
    assert submit(functions, order(orderId="b"), client).only[0] == "abandon"
    assert client.started == []
    assert stored(ctx, "b").process_state is ProcessState.PENDING  # for the sweep


def test_a_submission_whose_deferral_log_cannot_be_read_writes_nothing_and_is_handled_again_later(
    functions, app_context, sender
):
    """The deferral log is read before anything is written (it also says whether this very message was
    refused by the pending cap): a failure there leaves nothing half-done, so the message is sent again
    for later like any state store failure, not abandoned."""
    deferrals = StateStoreThatFails(app_context.deferrals, "get")
    ctx = context_with(app_context, deferrals=deferrals)
    client = RecordingClient()
    assert submit(functions, order(), client).only[0] == "complete"
    assert client.started == [] and statuses(sender) == []
    assert ctx.states.get("ord-1") is None and ctx.orders.get("ord-1") is None
    [copy] = [m for q, m in sender.sent if q == ORDERS_QUEUE]
    assert copy.application_properties[ROUND_PROPERTY] == 1
