"""An operator cancels an order while its attempt runs, through the real Functions runtime: every call to
a provider takes 8 simulated seconds (answered: within the client's 10 s timeout), so the order is caught with a
step in flight. Before the pivot the
cancel is taken, the running attempt loses the record (its next fenced write is refused), the supervisor
compensates at the step's deadline and every side effect is undone, the late answer included; with the
shipment in flight it is 409 and the order completes untouched. No ERROR is logged on the way."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import timedelta

import pytest

from adapters.remote.services import remote_services
from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.ledger import Ledger, NetEffect
from contracts.names import ORDERS_QUEUE
from domain.states import ProcessState
from tests.operations.harness import OPERATOR, OpsHarness
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos

SERVICES = ("inventory", "payment", "payment_backup", "shipping")


@pytest.fixture
def slow(cosmos_db: object) -> Iterator[tuple[OpsHarness, Ledger]]:
    made = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR)
    assert made.ctx is not None
    ledger = Ledger()
    configs = {name: SimulatorConfig(latency_ms=(8_000.0, 8_000.0)) for name in SERVICES}
    made.change_context(remote=remote_services(made.ctx.settings, made.clock, configs, ledger=ledger, seed=3))
    yield made, ledger
    made.close()


def _in_flight(ops: OpsHarness, order_id: str, step: str) -> None:
    """Runs until ``order_id``'s attempt has begun ``step`` (its call takes 8 s)."""
    assert ops.ctx is not None
    ops.send(ORDERS_QUEUE, json.dumps(order(orderId=order_id)), order_id)

    def begun() -> bool:
        record = ops.ctx.states.get(order_id) if ops.ctx is not None else None
        return record is not None and record.current_step == step and step in record.steps

    ops.host.run_until(ops.clock.now() + timedelta(minutes=5), stop=begun)
    assert begun(), f"{order_id} never began {step}"


@pytest.mark.parametrize("step", ["reserve-inventory", "charge-payment"])
def test_a_cancel_with_a_step_in_flight_ends_compensated_with_nothing_left_done(
    slow: tuple[OpsHarness, Ledger], caplog: pytest.LogCaptureFixture, step: str
) -> None:
    ops, ledger = slow
    assert ops.ctx is not None
    caplog.set_level(logging.INFO)
    _in_flight(ops, "o-fly", step)

    status, body = ops.post("/api/ops/orders/o-fly/cancel", {"reason": "customer withdrew"})
    assert status == 200 and body["order"]["processState"] == "Compensating", body
    ops.host.run_until(ops.clock.now() + timedelta(minutes=15))

    record = ops.ctx.states.get("o-fly")
    assert record is not None
    assert record.process_state is ProcessState.COMPENSATED, [h.event for h in record.history]
    cancelled = next(i for i, h in enumerate(record.history) if h.event == "CompensationRequested")
    assert not any(h.event in ("StepSucceeded", "Processed") for h in record.history[cancelled:]), record.history
    assert ledger.net("o-fly") == NetEffect(), ledger.net("o-fly")
    status, detail = ops.get("/api/ops/orders/o-fly")
    assert status == 200
    assert all(a["runtimeStatus"] != "Running" for a in detail["attempts"]), detail["attempts"]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert any(getattr(r, "event", None) == "OperatorCancelled" for r in caplog.records)  # the log is captured


def test_a_cancel_with_the_shipment_in_flight_is_409_and_the_order_completes(
    slow: tuple[OpsHarness, Ledger], caplog: pytest.LogCaptureFixture
) -> None:
    ops, ledger = slow
    assert ops.ctx is not None
    caplog.set_level(logging.WARNING)
    _in_flight(ops, "o-ship", "arrange-shipment")
    before = ops.ctx.states.get("o-ship")

    status, body = ops.post("/api/ops/orders/o-ship/cancel", {"reason": "customer withdrew"})
    assert status == 409 and "point of no return" in body["error"], body
    assert ops.ctx.states.get("o-ship") == before  # refused: nothing written
    ops.host.run_until(ops.clock.now() + timedelta(minutes=5))

    record = ops.ctx.states.get("o-ship")
    assert record is not None and record.process_state is ProcessState.PROCESSED
    assert ledger.net("o-ship") == NetEffect(reserved_units=2, charged_cents=2500, shipments=1)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
