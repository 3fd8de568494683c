"""A payment provider that takes the charge but whose answer the app cannot carry (a 70 KB receipt in
it) acted: the attempt must treat it as an unknown outcome, never as a refusal. Taken for a refusal, the
decision function sent the charge to the backup provider under the same key, which charged a second
time (a red team's finding). Through the real Functions runtime, the ops harness and the simulators'
ledger."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from adapters.remote.interface import RemoteCall
from adapters.remote.services import remote_services
from contracts.names import ORDERS_QUEUE
from domain.states import ProcessState
from tests.operations.harness import OpsHarness
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos


class AnswerTooLargeOnce:
    """The primary payment provider: performs the charge at its simulator (the ledger records it), but
    its first charge answer carries a 70 KB receipt that no agent reply can carry."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.glitches = 1

    def call(self, request: RemoteCall) -> dict[str, Any]:
        result: dict[str, Any] = self.inner.call(request)
        if request.action == "charge" and self.glitches > 0:
            self.glitches -= 1
            return {**result, "receipt": "x" * 70_000}
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_charge_whose_answer_cannot_be_carried_is_never_taken_again_by_the_fallback(ops: OpsHarness) -> None:
    assert ops.ctx is not None
    remote = remote_services(ops.ctx.settings, ops.clock, seed=3)
    primary = AnswerTooLargeOnce(remote["payment"])
    ops.change_context(remote={**remote, "payment": primary})
    ops.send(ORDERS_QUEUE, json.dumps(order(orderId="o-acted")), "o-acted")
    ops.run_until_idle()
    ops.host.run_until(ops.clock.now() + timedelta(minutes=10))  # the supervisor retries: the same key

    final = ops.ctx.states.get("o-acted")
    assert final is not None
    charges = [(e.service, e.idempotency_key) for e in primary.inner.ledger.effects("o-acted", "charge")]
    assert final.process_state is ProcessState.PROCESSED
    assert charges == [("payment", "o-acted:charge-payment")], (
        f"the order is {final.process_state.value}; charges {charges}; "
        f"history {[(h.event, h.by, h.detail[:80]) for h in final.history]}"
    )
