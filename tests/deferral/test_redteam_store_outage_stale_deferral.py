"""Red team (store_outage, b18486a): a PaymentNotification whose deferral was RECORDED before the state
store failed is copied (new sequence number) and the original COMPLETED, but the deferral document keeps
tracking the original's sequence number as a message still deferred on the queue."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.cosmos.errors import StoreUnavailable
from contracts.names import ORDERS_QUEUE
from domain.deferral import EntryStatus
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import context_with
from tests.deferral.support import DurableClientStub, alerts, deliver, notification, order, send

pytestmark = pytest.mark.cosmos


class GetFailsOnCall:
    """The state store; its ``get`` number ``n`` (1-based) raises ``StoreUnavailable`` (an outage that
    begins in the middle of one handler: between the deferral record and the look again)."""

    def __init__(self, store: Any, n: int) -> None:
        self._store, self._n, self.calls = store, n, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == self._n:
            raise StoreUnavailable("state store: 503 on get (outage begins)")
        return self._store.get(*args, **kwargs)


def test_redteam_store_outage_completed_original_left_tracked_as_deferred_raises_false_expiry_alert(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """Expected: the notification met the outage after its deferral was recorded; its copy is applied when
    the order arrives, so nothing expired: no ``DeferredMessageExpired`` alert and no entry marked
    ``Expired`` (before b18486a the message was abandoned and redelivered with the SAME sequence number,
    which the idempotent record matched).
    On b18486a: ``_defer_until_order`` recorded sequence number S as deferred, the second state read failed,
    ``retry_later`` COMPLETED S and sent a copy S2. When the order arrives, ``recover_for_order`` fetches S,
    finds it gone and ``account_for_absent`` resolves it ``Expired`` and raises a ``DeferredMessageExpired``
    alert telling the operator a payment notification was lost, while its copy is applied.
    In the runner, stock ``examples/profiles/all-faults.json`` (random 429/503s only, no outage window),
    ``--orders 200 --seed 2``: 2 ``DeferredMessageExpired`` alerts and ``deferred.expired`` 2 with
    ``unmatched_notifications`` 0; the parent commit (b18486a^) with the same seed: 0 and 0."""
    flaky = GetFailsOnCall(ctx.states, 2)  # 1: apply (order missing), record_deferred, 2: look again -> 503
    flaky_ctx = context_with(ctx, states=flaky)
    send(broker, notification())
    assert deliver(functions, broker)
    context_with(flaky_ctx, states=ctx.states)
    doc = ctx.deferrals.get("p1")
    [stale] = doc.entries
    assert stale.status is EntryStatus.DEFERRED  # tracked as deferred...
    # ...and the message itself is still deferred under that number (on b18486a it was completed, copied)
    assert [m.sequence_number for m in broker.peek(ORDERS_QUEUE, 10) if m.state.name == "DEFERRED"] == [
        stale.sequence_number
    ]

    send(broker, order())  # the order arrives (the store is back)
    while deliver(functions, broker, DurableClientStub()):
        pass
    clock.advance(STORE_RETRY_DELAYS[0])
    while deliver(functions, broker, DurableClientStub()):  # the copy, due now
        pass

    record = ctx.states.get("p1")
    assert record.payment is not None and record.payment.notification_id == "n-1"  # applied via the copy
    kinds = [a["kind"] for a in alerts(broker)]
    statuses = {e.sequence_number: e.status for e in ctx.deferrals.get("p1").entries}
    assert "DeferredMessageExpired" not in kinds, f"false alert: {kinds}; deferral entries {statuses}"
    assert statuses.get(stale.sequence_number) is not EntryStatus.EXPIRED
