"""A hand-over write run again (its first run wrote, then failed before answering) recognises its own
write past the side notes written on the released record since (``domain.records.SIDE_NOTES``). An
order moved to ``Error`` stays payable, so a payment notification can be applied to it before the retry:
the retry took that for another writer's move and answered not owned (``FencingLost``), and the
orchestration ended without its ``Failed`` status. Unnumbered writes (``write_number`` None: the
orchestrations before the write numbering) rely on this."""

from __future__ import annotations

from datetime import timedelta

import pytest

from activities.scheduler_steps import fail_order
from contracts.activities import OWNED, FailOrderInput
from dependencies import AppContext
from domain import payments, transitions
from domain.records import PaymentReceived
from domain.states import ProcessState
from tests.orchestrators.support import sample_order

pytestmark = pytest.mark.cosmos


def test_a_retried_fail_order_finds_its_write_past_a_payment_applied_since(app_context: AppContext) -> None:
    ctx, order_id = app_context, "o-side-1"
    now = ctx.clock.now()
    ctx.orders.create_or_verify(sample_order(order_id))
    ctx.states.create(transitions.new_record(order_id, "client-statuses", now))
    pending = ctx.states.get(order_id)
    assert pending is not None
    claimed = ctx.states.replace(transitions.claim(pending, now, ctx.settings.start_grace))
    owner = str(claimed.locked_by)
    ctx.states.replace(
        transitions.begin_step(claimed, owner, "charge-payment", "payment", "r-1", now + timedelta(minutes=1), now)
    )
    failed = FailOrderInput(order_id=order_id, instance_id=owner, step="charge-payment", attempt=1, error="declined")
    assert fail_order(ctx, failed) == OWNED

    error = ctx.states.get(order_id)
    assert error is not None and error.process_state is ProcessState.ERROR
    paid = PaymentReceived(
        notification_id="n-1", amount_cents=1000, currency="EUR", provider_reference="p-1", received_at=now
    )
    ctx.states.replace(payments.with_payment(error, paid, now))

    assert fail_order(ctx, failed) == OWNED  # the first run's write, found: not "lost the record"
