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
from adapters.cosmos.state_store import update_once
from adapters.servicebus.sender import OutgoingMessage, SendError
from dependencies import AppContext
from domain import transitions
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

    heard = _redelivered(ctx, body)
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

    _supervisor_retries_the_claim_that_never_started(ctx)

    heard = _redelivered(ctx, body)
    assert "Received" in heard, f"the submitter heard {heard}"


class FirstStatusSendFails(RecordingSender):
    """The submitter's status queue refuses the first send (a transient Service Bus error)."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue == "client-statuses" and self.failures > 0:
            self.failures -= 1
            raise SendError(f"send to {queue!r} failed")
        super().send(queue, message)


def test_the_submitter_hears_received_when_the_courier_hand_over_was_lost_and_the_supervisor_retried_first(
    app_context: AppContext,
) -> None:
    """Fault-profile fuzzer, p128 seed 6922, 87 orders, ord-00082 (``missing_statuses`` 1): the delivery
    that creates the claimed record fails to send ``Received`` and owes it to the courier, but the host
    restarts before the trigger hands it over (and before it starts attempt 1). The redelivery comes
    late (it meets a Cosmos DB outage, and its store-retry copies wait it out), after the supervisor has
    retried the never-started attempt (``RetryScheduled``, failureCount 1, no step begun, nothing said to
    the submitter). The redelivery is then the only thing that can still say ``Received``: it must."""
    ctx = context_with(app_context, sender=FirstStatusSendFails())
    body = json.dumps(order(orderId="o-rcv")).encode()

    first = handle_orders_message(ctx, FakeReceivedMessage.of(body, message_id="o-rcv"))
    assert first.claim is not None and [owed.status for owed in first.owed] == ["Received"]
    # ... and the host stops here: neither the claim nor the owed status is handed over

    _supervisor_retries_the_claim_that_never_started(ctx)
    # since Received is marked owed on the record (notifications/received.py), the retry says it first
    assert isinstance(ctx.sender, RecordingSender)
    assert [b["status"] for b in ctx.sender.bodies("client-statuses")] == ["Received"]

    heard = _redelivered(ctx, body)
    assert heard == ["Received", "Received"], f"the submitter heard {heard}"
    # the redelivery's repeat carries the same MessageId: duplicate detection keeps one
    assert set(ctx.sender.message_ids("client-statuses")) == {"o-rcv:Received:0"}


def test_a_redelivery_after_a_step_has_begun_does_not_say_received_again(app_context: AppContext) -> None:
    """The other side of it: once a step has begun the submitter has heard ``Processing``; a late
    submission of the order in another message (``_redelivered`` hands the body over with a sequence number
    of its own) says nothing. The message that created the record, handled again, does say it
    (tests/submission/test_received_by_the_creating_message.py): its first delivery may not have."""
    ctx = context_with(app_context, sender=RecordingSender())
    body = json.dumps(order(orderId="o-rcv")).encode()
    claim = handle_orders_message(ctx, FakeReceivedMessage.of(body, message_id="o-rcv")).claim
    assert claim is not None
    claimed = ctx.states.get("o-rcv")
    assert claimed is not None
    now = ctx.clock.now()
    owner = claim.instance_id
    update_once(
        ctx.states,
        claimed,
        lambda r: transitions.begin_step(
            r, owner, "reserve-inventory", "inventory", "rid", now + ctx.settings.step_timeout, now
        ),
    )
    heard = _redelivered(ctx, body)
    assert heard == ["Received"], f"the submitter heard {heard}"


def _supervisor_retries_the_claim_that_never_started(ctx: AppContext) -> None:
    clock = ctx.clock
    assert isinstance(clock, ManualClock)
    clock.advance(ctx.settings.start_grace + timedelta(seconds=1))
    run_supervisor(ctx, ScanState())
    record = ctx.states.get("o-rcv")
    assert record is not None and (record.process_state, record.failure_count) == (ProcessState.PENDING, 1)


def _redelivered(ctx: AppContext, body: bytes) -> list[str]:
    """The order's message handled again (completed); what its submitter has heard since the start."""
    again = handle_orders_message(ctx, FakeReceivedMessage.of(body, message_id="o-rcv"))
    assert again.settlement.kind == "complete"
    assert isinstance(ctx.sender, RecordingSender)
    return [b["status"] for b in ctx.sender.bodies("client-statuses") if b["orderId"] == "o-rcv"]
