"""``Received`` from the message whose delivery created the state record, handled again after the order
moved on (a step begun, or cancelled).

The delivery that creates the record may not get to say ``Received``: its create's response is lost and
the read-back fails too (it hands the message to a store-retry copy), or its send fails, the mark's
writes fail and the host stops before the courier hand-over. Meanwhile the claim it made is never
started, the supervisor retries it and the next attempt begins a step (or a ``CancelOrder`` moves the
order on). The copy, or the redelivery, of that same message is then the only one left to say it; a
delivery of another message of the order (a duplicate submission) says nothing once a step has begun
(tests/submission/test_redteam4_received.py). Fault-mix profile ``lost-restarts-locks`` (8 % lost
Cosmos DB responses, a host restart every 30 s, 30 % lost locks), 300 orders: seed 3 ``ord-00235``,
seed 2 ``ord-00118`` and ``ord-00094`` (``missing_statuses``): the copy came minutes late through a
backlogged ``orders`` queue, after the order was ``Processed``."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.state_store import update_once
from adapters.servicebus.sender import OutgoingMessage, SendError
from dependencies import AppContext
from domain import transitions
from domain.records import StateRecord
from domain.states import ProcessState
from submission.intake import handle_orders_message
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.contexts import context_with
from tests.fakes import FakeReceivedMessage, RecordingSender
from tests.submission.corpus import order
from tests.submission.test_fast_path_claim import StoreDownAfterTheCreate

pytestmark = pytest.mark.cosmos

ORDER = "o-made"


class StatusesAndMarksFail(RecordingSender):
    """The submitter's status queue refuses every send until ``back()``."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue == "client-statuses" and self.down:
            raise SendError(f"send to {queue!r} failed")
        super().send(queue, message)


def test_the_copy_of_a_create_whose_response_and_read_back_were_lost_says_received_after_a_step_began(
    app_context: AppContext,
) -> None:
    states = StoreDownAfterTheCreate(app_context.states)
    sender = RecordingSender()
    ctx = context_with(app_context, states=states, sender=sender)
    first = handle_orders_message(ctx, FakeReceivedMessage.of(json.dumps(order(orderId=ORDER)), message_id=ORDER))
    assert first.settlement.kind == "complete" and first.claim is None  # handed to a store-retry copy
    (copy,) = [m for q, m in sender.sent if q == "orders"]
    states.back()
    assert _heard(sender) == []

    _the_supervisor_retries_and_the_next_attempt_begins_a_step(ctx)

    again = handle_orders_message(ctx, FakeReceivedMessage.from_sent(copy))
    assert again.settlement.kind == "complete"
    assert _heard(sender) == ["Received"]


def test_the_redelivery_of_the_creating_message_says_received_after_a_step_began(app_context: AppContext) -> None:
    """Its send failed, the mark could not be written (the status queue and Cosmos DB failing together)
    and the host stopped before handing ``Received`` to the courier."""
    sender = StatusesAndMarksFail()
    ctx = context_with(app_context, sender=sender)
    message = FakeReceivedMessage.of(json.dumps(order(orderId=ORDER)), message_id=ORDER)
    first = handle_orders_message(ctx, message)
    assert first.claim is not None and [owed.status for owed in first.owed] == ["Received"]
    record = ctx.states.get(ORDER)
    assert record is not None
    update_once(ctx.states, record, _unmarked)  # as if the mark's three writes had failed
    # ... and the host stops here: neither the claim nor the owed status is handed over
    sender.down = False

    _the_supervisor_retries_and_the_next_attempt_begins_a_step(ctx)

    again = handle_orders_message(ctx, message)  # the same message: its lock lapsed with the host
    assert again.settlement.kind == "complete"
    assert _heard(sender) == ["Received"]


def test_another_submission_of_the_order_still_says_nothing_once_a_step_began(app_context: AppContext) -> None:
    """Only the creating message repeats it: a duplicate submission (another message) after the first
    step says nothing, as before."""
    sender = RecordingSender()
    ctx = context_with(app_context, sender=sender)
    body = json.dumps(order(orderId=ORDER))
    assert handle_orders_message(ctx, FakeReceivedMessage.of(body, message_id=ORDER)).claim is not None
    _the_supervisor_retries_and_the_next_attempt_begins_a_step(ctx)

    duplicate = handle_orders_message(ctx, FakeReceivedMessage.of(body, message_id=ORDER))
    assert duplicate.settlement.kind == "complete"
    assert _heard(sender) == ["Received"]


def _unmarked(record: StateRecord) -> StateRecord:
    return replace(record, received_owed=None, history=[e for e in record.history if e.event != "ReceivedOwed"])


def _the_supervisor_retries_and_the_next_attempt_begins_a_step(ctx: AppContext) -> None:
    clock = ctx.clock
    assert isinstance(clock, ManualClock)
    clock.advance(ctx.settings.start_grace + timedelta(seconds=1))
    run_supervisor(ctx, ScanState())
    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.PENDING
    clock.advance(timedelta(minutes=5))  # past the retry's backoff
    now = clock.now()
    claimed = update_once(ctx.states, record, lambda r: transitions.claim(r, now, ctx.settings.start_grace))
    owner = claimed.locked_by
    assert owner is not None
    update_once(
        ctx.states,
        claimed,
        lambda r: transitions.begin_step(
            r, owner, "reserve-inventory", "inventory", "rid", now + ctx.settings.step_timeout, now
        ),
    )


def _heard(sender: RecordingSender) -> list[str]:
    return [b["status"] for b in sender.bodies("client-statuses") if b["orderId"] == ORDER]
