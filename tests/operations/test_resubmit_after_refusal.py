"""The operator's resubmit of an order refused for good, after the cause was fixed, through the real
runtime (``OpsHarness``: submission, the scheduler, the agents, the supervisor, the ops API). Ported from
the red team's finding (ops, on 0c3d5d8): idempotency keys never changed, so the new attempt called the
service with the key it had refused, the simulated provider (which keeps the contract of
docs/compensation.md: "the same key and action give the recorded result", a permanent error too)
answered the recorded refusal, and the order went back to ``Error``: a resubmit could never get past a
step refused for good.

Now the refused step gets a fresh key (``<order>:<step>:g1``) with the resubmit, and only that step:
nothing happened at the provider under the old key, so the new one cannot act twice."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from adapters.remote.services import remote_services
from adapters.remote.simulators.config import SimulatorConfig
from contracts.names import ORDERS_QUEUE
from domain.states import ProcessState, StepStatus
from tests.operations.harness import OpsHarness
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos


def test_a_resubmit_after_the_refusal_was_fixed_processes_the_order_under_a_fresh_key(ops: OpsHarness) -> None:
    assert ops.ctx is not None
    refused = SimulatorConfig(permanent_error_rate=1.0)  # out of stock: the reservation is refused for good
    ops.change_context(remote=remote_services(ops.ctx.settings, ops.clock, {"inventory": refused}, seed=5))
    ops.send(ORDERS_QUEUE, json.dumps(order(orderId="o-stock")), "o-stock")
    ops.run_until_idle()
    failed = ops.ctx.states.get("o-stock")
    assert failed is not None and failed.process_state is ProcessState.ERROR, failed and failed.process_state
    assert failed.steps["reserve-inventory"].status is StepStatus.FAILED

    inventory: Any = ops.ctx.remote["inventory"]
    inventory.config = replace(inventory.config, permanent_error_rate=0.0)  # restocked: the service accepts again
    status, body = ops.post("/api/ops/orders/o-stock/resubmit", {"reason": "restocked SKU"})
    assert status == 200, body
    resubmitted = ops.ctx.states.get("o-stock")
    assert resubmitted is not None

    ops.host.run_until(ops.clock.now() + timedelta(minutes=5))  # the starter's sweep claims it, the attempt runs
    final = ops.ctx.states.get("o-stock")
    assert final is not None
    assert final.process_state is ProcessState.PROCESSED, (
        f"resubmitted after the fix (200), the order is {final.process_state.value}: {final.last_error}; "
        f"history {[h.event for h in final.history]}"
    )
    assert failed.steps["reserve-inventory"].idempotency_key == "o-stock:reserve-inventory"
    assert (failed.key_generations, resubmitted.key_generations) == ({}, {"reserve-inventory": 1})
    # the refused step under its next key; the steps that never ran under their first
    assert final.steps["reserve-inventory"].idempotency_key == "o-stock:reserve-inventory:g1"
    assert final.steps["charge-payment"].idempotency_key == "o-stock:charge-payment"
    [entry] = [e for e in final.compensation if e.step == "reserve-inventory"]
    assert entry.forward_key == "o-stock:reserve-inventory:g1"  # what an undo would fence
    payment: Any = ops.ctx.remote["payment"]
    assert payment.ledger.net("o-stock").charged_cents > 0  # charged once, after the reservation went through
