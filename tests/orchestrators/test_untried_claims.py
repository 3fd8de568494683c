"""A claim whose start the starter never tried is released by the starter itself, at once.

The starter's starts run ``PARALLEL_CALLS`` at a time within the claims' start grace (``each_within``): against a
stalled Durable extension the first wave hangs to its bound and the claims after it are never tried. Such a claim was
left as after a failed start: the supervisor found it after the start grace, read its instance ``Absent`` and released
it as a start the backend never had, using one of the order's ``MAX_STARTS_MISSED`` for a start never sent, and the
order waited the start grace and a supervisor period for nothing. Now the starter releases it right after its starts
by a fenced write (``starter.release_untried``): Pending again, claimable at once, nothing counted, ``attempt`` kept
(the next claim numbers a new instance id). A record that moved since its claim is not overwritten; a release the
store refuses leaves the claim as before, saying so.

The stall is a client whose starts never answer, through the trigger's own ``bounded_client``, the bound shortened
(as ``tests/supervisor/test_redteam46_timer_budgets.py``); the store is the Cosmos DB protocol server."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import timedelta
from typing import Any

import pytest

import dependencies
from activities.scheduler_steps import begin_step
from adapters import durable_client
from adapters.cosmos.state_store import update_once
from contracts.activities import NOT_OWNED, BeginStepInput, StepBegun
from contracts.names import STATE_CONTAINER
from domain import transitions
from domain.compensation import enter_compensation
from domain.records import RECEIVED_SAID, LastWrite
from domain.states import ProcessState
from orchestrators import starter
from orchestrators.agent_call import agent_request
from orchestrators.names import SCHEDULER
from settings import Settings
from tests.fakes import RecordingClient
from tests.orchestrators.support import sample_order

pytestmark = pytest.mark.cosmos

BOUND = 0.6  # DURABLE_CALL_TIMEOUT for the test: the first wave hangs this long
CLAIMS = 12  # a wave of PARALLEL_CALLS (8) is tried; the 4 after it are not, the run's time for starts spent
GRACE = timedelta(seconds=1)  # START_GRACE_SECONDS: no second wave fits in it after a first that hung 0.6 s
CLIENT = "client-statuses"  # the submitters' reply queue


class StalledClient:
    """A Durable client whose starts never answer (the extension stalled); ``first``: run at its first start."""

    def __init__(self, first: Any = None) -> None:
        self.starts: list[str] = []
        self._first = first

    async def start_new(self, name: str, instance_id: str | None = None, client_input: Any = None) -> str:
        self.starts.append(str(instance_id))
        if self._first is not None:
            first, self._first = self._first, None
            first()
        await asyncio.sleep(3600)
        return str(instance_id)


@pytest.fixture
def ctx(app_context: Any, clock: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(durable_client, "DURABLE_CALL_TIMEOUT", timedelta(seconds=BOUND))
    settings = Settings.from_env(
        {}, START_GRACE_SECONDS=str(int(GRACE.total_seconds())), STARTER_BATCH_SIZE=str(CLAIMS)
    )
    context = dataclasses.replace(app_context, settings=settings)
    dependencies.use_context(context)
    for i in range(CLAIMS):
        context.orders.create_or_verify(sample_order(f"o{i:02}"))
        context.states.create(transitions.new_record(f"o{i:02}", CLIENT, clock.now()))
    return context


def _sweep(functions: Any, client: Any) -> None:
    """The starter's timer trigger, as the Functions host calls it."""
    user = functions["starter_sweep"].func
    trigger = getattr(user, "client_function", None) or user.__wrapped__
    asyncio.run(trigger(timer=None, client=client))


def _events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


def _untried(claims: list[starter.Claim], client: StalledClient) -> list[starter.Claim]:
    return [claim for claim in claims if claim.instance_id not in client.starts]


def test_a_claim_never_tried_is_pending_again_at_once_and_the_next_sweep_claims_and_starts_it(
    functions, ctx, clock, caplog
):
    stalled = StalledClient()
    with caplog.at_level(logging.INFO):
        _sweep(functions, stalled)

    orders = [f"o{i:02}" for i in range(CLAIMS)]
    tried = {instance.split(":")[0] for instance in stalled.starts}
    untried = [order for order in orders if order not in tried]
    assert len(tried) == 8 and len(untried) == CLAIMS - 8
    for order in untried:  # released by the starter: Pending, claimable now, nothing counted
        record = ctx.states.get(order)
        assert record is not None and record.process_state is ProcessState.PENDING
        assert (record.locked_by, record.complete_by) == (None, None)
        assert (record.failure_count, record.starts_missed, record.attempt) == (0, 0, 1)
        assert record.last_write is None
        last = record.history[-1]
        assert (last.event, last.by) == (transitions.START_NOT_TRIED, transitions.STARTER)
        assert f"{order}:1 was never started" in last.detail
        assert transitions.is_claimable(record, clock.now())
    for order in tried:  # a start sent, whatever it did: left to the supervisor as after a failed start
        record = ctx.states.get(order)
        assert record is not None and record.process_state is ProcessState.PROCESSING
        assert record.locked_by == f"{order}:1" and record.complete_by == clock.now() + GRACE
    assert sorted(r.__dict__["instanceId"] for r in _events(caplog, "StartReleased")) == [f"{o}:1" for o in untried]
    failed = sorted(r.__dict__["instanceId"] for r in _events(caplog, "StartFailed"))
    assert failed == sorted(stalled.starts)  # the tried ones' timeouts; none for a claim released

    working = RecordingClient()
    _sweep(functions, working)  # the next sweep, at once: no backoff, no start grace, no supervisor

    # each released order claimed again for its next attempt, under a new instance id; the stalled ones untouched
    assert working.attempts == [(SCHEDULER, f"{order}:2", order, 2) for order in untried]
    for order in untried:
        record = ctx.states.get(order)
        assert record is not None and record.locked_by == f"{order}:2" and record.starts_missed == 0
    assert ctx.states.count(ProcessState.PROCESSING) == CLAIMS
    assert ctx.states.count(ProcessState.PENDING) == 0


def _begin(order_id: str, owner: str, deadline: Any, number: int) -> BeginStepInput:
    request = agent_request(
        request_id=f"{owner}:reserve-inventory:inventory",
        instance_id=owner,
        order_id=order_id,
        step="reserve-inventory",
        action="do",
        attempt=int(owner.rsplit(":", 1)[1]),
        deadline=deadline,
        idempotency_key=f"{order_id}:reserve-inventory",
        payload={"orderId": order_id},
    )
    return BeginStepInput(request=request, agent="inventory", write_number=number, announce=True)


def test_the_next_attempt_after_a_release_has_its_own_instance_and_write_order(functions, ctx, clock, sender):
    """The released instance id is never asked for again: the next claim is attempt 2 (``attempt`` only grows), whose
    numbered writes are its own (``lastWrite``); the released id, had it ever run, would be fenced at its first
    write. The order, created Pending, still has its submitter told ``Received`` before its first step."""
    stalled = StalledClient()
    _sweep(functions, stalled)
    order = next(f"o{i:02}" for i in range(CLAIMS) if f"o{i:02}:1" not in stalled.starts)
    _sweep(functions, RecordingClient())
    record = ctx.states.get(order)
    assert record is not None and (record.attempt, record.locked_by) == (2, f"{order}:2")

    deadline = clock.now() + timedelta(seconds=60)
    assert isinstance(begin_step(ctx, _begin(order, f"{order}:2", deadline, 1)), StepBegun)
    record = ctx.states.get(order)
    assert record is not None and record.last_write == LastWrite(by=f"{order}:2", number=1)
    assert record.received_owed is None  # said with the step's write: attempt 2, no step begun before it
    assert [b["status"] for b in sender.bodies(CLIENT) if b["orderId"] == order] == ["Received", "Processing"]

    # the released instance's write 1, had a start of it landed: fenced, nothing written
    assert begin_step(ctx, _begin(order, f"{order}:1", deadline, 1)) == NOT_OWNED
    assert ctx.states.get(order) == record
    # attempt 2's write 1 again is the same write, answered as made (not refused as another owner's)
    assert isinstance(begin_step(ctx, _begin(order, f"{order}:2", deadline, 1)), StepBegun)


def test_a_claim_that_moved_before_its_release_is_not_overwritten(ctx, clock, caplog):
    """The last claim is cancelled while the first wave's starts hang (Compensating, unowned): its release finds
    the record moved and leaves it. The one before it had a side note written meanwhile (``Received`` said): still
    exactly its claim, it is released (the 412 the note causes is read again and judged again)."""
    claims = starter.sweep(ctx)
    assert len(claims) == CLAIMS
    moved, noted = claims[-1].order_id, claims[-2].order_id

    def meanwhile() -> None:
        now = clock.now()
        record = ctx.states.get(moved)
        update_once(ctx.states, record, lambda r: enter_compensation(r, "client", "cancelled by the client", now))
        record = ctx.states.get(noted)
        update_once(ctx.states, record, lambda r: r.with_changes(now, RECEIVED_SAID, transitions.SUBMISSION, "said"))

    stalled = StalledClient(first=meanwhile)
    with caplog.at_level(logging.INFO):
        asyncio.run(starter.start_claimed(durable_client.bounded_client(stalled), claims, GRACE, ctx))

    cancelled = ctx.states.get(moved)
    assert cancelled is not None and cancelled.process_state is ProcessState.COMPENSATING
    assert cancelled.locked_by is None and cancelled.history[-1].event == "CompensationRequested"
    assert all(entry.event != transitions.START_NOT_TRIED for entry in cancelled.history)
    [left] = [r for r in _events(caplog, "StartFailed") if r.__dict__["instanceId"] == f"{moved}:1"]
    assert "not released: the record moved since its claim" in left.getMessage()
    assert left.levelno == logging.WARNING and left.__dict__["durableCall"] == "start"

    released = ctx.states.get(noted)
    assert released is not None and released.process_state is ProcessState.PENDING
    assert [e.event for e in released.history[-2:]] == [RECEIVED_SAID, transitions.START_NOT_TRIED]
    names = {r.__dict__["instanceId"] for r in _events(caplog, "StartReleased")}
    assert names == {c.instance_id for c in _untried(claims, stalled)} - {f"{moved}:1"}


def test_a_release_the_store_refuses_leaves_the_claim_for_the_supervisor(ctx, clock, cosmos_faults, caplog):
    """Cosmos DB unavailable for the release of one claim: that claim stays as after a failed start (Processing,
    owned, ``completeBy`` its claim's), for the supervisor, and a warning says why; the others are released."""
    claims = starter.sweep(ctx)
    refused = claims[-1].order_id
    cosmos_faults.set_faults(
        [{"op": "replace", "container": STATE_CONTAINER, "partitionKey": refused, "status": 503, "times": 50}]
    )
    with caplog.at_level(logging.INFO):
        asyncio.run(starter.start_claimed(durable_client.bounded_client(StalledClient()), claims, GRACE, ctx))
    cosmos_faults.set_faults([])

    record = ctx.states.get(refused)
    assert record is not None and record.process_state is ProcessState.PROCESSING
    assert record.locked_by == f"{refused}:1" and record.complete_by == clock.now() + GRACE
    [left] = [r for r in _events(caplog, "StartFailed") if r.__dict__["instanceId"] == f"{refused}:1"]
    assert "could not be released" in left.getMessage() and "the supervisor will retry it" in left.getMessage()
    released = [r.__dict__["instanceId"] for r in _events(caplog, "StartReleased")]
    assert len(released) == CLAIMS - 8 - 1 and f"{refused}:1" not in released
