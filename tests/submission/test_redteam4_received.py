"""Red team (local runner, harsh profiles, while attacking scheduler v3 f01544f; the cause is in the
intake, unchanged by v3): ``missing_statuses`` orders whose submitter never heard ``Received``.

5bd3f10 says ``Received`` right after this delivery's create, before the deferral read. A create whose
*own response* is lost (the write committed; ``StoreUnavailable``) still abandons before ``Received``
(submission/intake.py ``_create_state`` raises out of ``submit_order``); the redelivery says it only
while the record is not begun (``_not_begun``). A CancelOrder handled before the redelivery moves the
record to Compensating: ``Received`` is never said, the order ends ``Compensated``."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.errors import StoreUnavailable
from dependencies import AppContext
from domain.states import ProcessState
from submission.intake import handle_orders_message
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.contexts import context_with
from tests.fakes import FakeReceivedMessage, RecordingSender
from tests.submission.corpus import order
from tests.submission.test_fast_path_claim import CreateLosesItsResponse

pytestmark = pytest.mark.cosmos


def test_the_submitter_hears_received_when_the_create_lost_its_response_and_a_cancel_came_first(
    app_context: AppContext,
) -> None:
    """Runner, 100 orders, a harsh profile (all-faults.json with cosmos lost_response_rate 0.15, throttle
    0.03, unavailable 0.03; cancel_rate 0.2; MAX_IN_FLIGHT 5): seed 4 ord-00004, seed 5 ord-00039
    (``missing_statuses`` 1 each)."""
    ctx = context_with(app_context, states=CreateLosesItsResponse(app_context.states, StoreUnavailable("no response")))
    body = json.dumps(order(orderId="o-rcv")).encode()

    first = handle_orders_message(ctx, FakeReceivedMessage.of(body, message_id="o-rcv"))
    # since the fix: the re-read shows the create landed, so this delivery goes on as its creator
    assert first.settlement.kind == "complete" and first.claim is not None
    created = ctx.states.get("o-rcv")
    assert created is not None  # the create committed

    # the submitter cancels before Service Bus redelivers the order
    cancel = {"type": "CancelOrder", "schemaVersion": 1, "orderId": "o-rcv", "reason": "changed my mind"}
    cancelled = handle_orders_message(ctx, FakeReceivedMessage.of(json.dumps(cancel).encode(), message_id="c-rcv"))
    assert cancelled.settlement.kind == "complete"
    record = ctx.states.get("o-rcv")
    assert record is not None and record.process_state is ProcessState.COMPENSATING

    again = handle_orders_message(ctx, FakeReceivedMessage.of(body, message_id="o-rcv"))
    assert again.settlement.kind == "complete"
    assert isinstance(ctx.sender, RecordingSender)
    heard = [b["status"] for b in ctx.sender.bodies("client-statuses") if b["orderId"] == "o-rcv"]
    assert "Received" in heard, f"the submitter heard {heard}"


def test_the_submitter_hears_received_when_the_create_lost_its_response_and_the_supervisor_retried_first(
    app_context: AppContext,
) -> None:
    """The same with the supervisor: the claim the lost create made is never started; once START_GRACE
    has passed the supervisor retries it (failureCount 1), and the redelivery no longer finds the record
    "not begun". Runner, 100 orders, all-faults.json with cosmos lost_response_rate 0.1 and
    START_GRACE_SECONDS 5: seed 3 ord-00080-L... (Processed, never told Received); seed 1 ord-00100."""
    ctx = context_with(app_context, states=CreateLosesItsResponse(app_context.states, StoreUnavailable("no response")))
    body = json.dumps(order(orderId="o-rcv")).encode()

    first = handle_orders_message(ctx, FakeReceivedMessage.of(body, message_id="o-rcv"))
    # since the fix: the re-read shows the create landed, so this delivery goes on as its creator
    assert first.settlement.kind == "complete" and first.claim is not None

    clock = ctx.clock
    assert isinstance(clock, ManualClock)
    clock.advance(ctx.settings.start_grace + timedelta(seconds=1))
    run_supervisor(ctx, ScanState())
    record = ctx.states.get("o-rcv")
    assert record is not None and (record.process_state, record.failure_count) == (ProcessState.PENDING, 1)

    again = handle_orders_message(ctx, FakeReceivedMessage.of(body, message_id="o-rcv"))
    assert again.settlement.kind == "complete"
    assert isinstance(ctx.sender, RecordingSender)
    heard = [b["status"] for b in ctx.sender.bodies("client-statuses") if b["orderId"] == "o-rcv"]
    assert "Received" in heard, f"the submitter heard {heard}"
