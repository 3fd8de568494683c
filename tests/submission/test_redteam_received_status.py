"""Red team (found by the local runner on harsh profiles while attacking the lean scheduler; the cause is
in the intake, unchanged by it, and the same runs fail on 1415b51): ``missing_statuses`` orders whose
submitter never heard ``Received``."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.errors import StoreUnavailable
from adapters.cosmos.state_store import update_once
from dependencies import AppContext
from domain import transitions
from domain.states import ProcessState
from settings import Settings
from submission.intake import handle_orders_message
from tests.contexts import context_with
from tests.fakes import FakeReceivedMessage, RecordingSender
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos


class DeferralsFailingOnce:
    """The deferral log, whose first write fails (a 429 / 503 past the SDK's retries)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.failures = 1

    def save(self, doc: Any) -> Any:
        if self.failures > 0:
            self.failures -= 1
            raise StoreUnavailable(f"429 on write of the deferral log of {doc.order_id}")
        return self._inner.save(doc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_the_submitter_hears_received_when_the_first_delivery_failed_after_creating_the_record(
    app_context: AppContext,
) -> None:
    """FINDING. The first delivery of ``OrderSubmitted`` creates the record, then fails (the deferral
    log, applying an early PaymentNotification, ``recover_for_order``; then it was the log's read, which now
    comes before the record is created) before announcing ``Received``, and
    abandons "for redelivery" (submission/intake.py ``handle_orders_message``: "nothing is half-done
    that a redelivery cannot finish"). Before the redelivery the starter's sweep claims the record (or a
    CancelOrder moves it to Compensating). The redelivery announces ``Received`` only for a record still
    ``Pending`` at attempt 0 (submission/intake.py, ``submit_order``): the submitter never hears it.
    Runner: harsh profile (cosmos lost_response 0.1, throttle 0.02, unavailable 0.01, ...) seed 1,
    ord-00028; seed 3 ord-00015/ord-00065 (cancelled first)."""
    # over the in-flight cap (another order holds its one place): the record is created Pending, for the sweep
    deferrals = DeferralsFailingOnce(app_context.deferrals)
    deferrals.failures = 0
    ctx = context_with(app_context, deferrals=deferrals, settings=Settings.from_env({}, MAX_IN_FLIGHT="1"))
    other = json.dumps(order(orderId="o-other")).encode()
    assert handle_orders_message(ctx, FakeReceivedMessage.of(other, message_id="o-other")).claim is not None
    note = {
        "type": "PaymentNotification",
        "schemaVersion": 1,
        "notificationId": "n-rcv",
        "orderId": "o-rcv",
        "amountCents": 2500,
        "currency": "EUR",
        "providerReference": "psp-rcv",
    }
    early = handle_orders_message(ctx, FakeReceivedMessage.of(json.dumps(note).encode(), message_id="n-rcv"))
    assert early.settlement.kind == "defer"  # waiting for its order
    clock = ctx.clock
    assert isinstance(clock, ManualClock)
    clock.advance(ctx.settings.peek_sweep_age + timedelta(minutes=1))  # old: accounted for (a write) at once
    deferrals.failures = 1
    body = json.dumps(order(orderId="o-rcv")).encode()

    first = handle_orders_message(ctx, FakeReceivedMessage.of(body, message_id="o-rcv"))
    assert first.settlement.kind == "abandon"
    pending = ctx.states.get("o-rcv")
    assert pending is not None and pending.process_state is ProcessState.PENDING  # the create landed

    # the starter's sweep claims it before Service Bus redelivers the message
    claimed = update_once(
        ctx.states, pending, lambda r: transitions.claim(r, ctx.clock.now(), ctx.settings.start_grace)
    )
    # ... and its attempt is under way (a step begun) when the message comes back
    now = ctx.clock.now()
    owner = claimed.locked_by or ""
    update_once(
        ctx.states,
        claimed,
        lambda r: transitions.begin_step(
            r, owner, "reserve-inventory", "inventory", "rid", now + ctx.settings.step_timeout, now
        ),
    )

    again = handle_orders_message(ctx, FakeReceivedMessage.of(body, message_id="o-rcv"))
    assert again.settlement.kind == "complete"
    assert isinstance(ctx.sender, RecordingSender)
    heard = [b["status"] for b in ctx.sender.bodies("client-statuses") if b["orderId"] == "o-rcv"]
    assert "Received" in heard, f"the submitter heard {heard}"
