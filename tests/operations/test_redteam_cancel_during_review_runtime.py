"""Red team of 18f271d, through the real runtime: a client's ``CancelOrder`` while the attempt is paused
for review of a step its agents refused for good (``domain.compensation.failed_under_review``).

The cancel is taken at once, also during a review of the shipment (the pivot: nothing shipped); the
compensation undoes only the steps before the refused one and leaves nothing done at any provider; the
paused attempt, fenced out, ends quietly at its review deadline; nothing is logged as an ERROR; the ops
API shows the order compensated and no attempt still running. An operator's answer raised just before
the cancel ends the same way, whichever of the two the runtime takes first.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from adapters.remote.services import remote_services
from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.ledger import Ledger, NetEffect
from contracts.names import ORDERS_QUEUE
from domain.review import decide_by_time, pending_review
from domain.states import ProcessState, StepStatus
from orchestrators import starter
from orchestrators.names import DRAINING_SCHEDULER, SCHEDULER
from tests.operations.harness import OPERATOR, OpsHarness
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos

ORDER = "o-rv-cc"


def _paused(cosmos_db: Any, refused: tuple[str, ...], **settings: str) -> tuple[OpsHarness, Ledger]:
    """A high-value order whose ``refused`` providers refuse every call: its attempt pauses for review."""
    made = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR, REVIEW_TIMEOUT_SECONDS="600", **settings)
    assert made.ctx is not None
    ledger = Ledger()
    configs = dict.fromkeys(refused, SimulatorConfig(permanent_error_rate=1.0))
    made.change_context(remote=remote_services(made.ctx.settings, made.clock, configs, ledger=ledger, seed=3))
    body = order(orderId=ORDER, lines=[{"sku": "SKU-9", "quantity": 1, "unitPriceCents": 150000}])
    made.send(ORDERS_QUEUE, json.dumps(body), ORDER)
    made.run_until_idle()
    return made, ledger


@pytest.fixture
def payment_review(cosmos_db: Any) -> Iterator[tuple[OpsHarness, Ledger]]:
    made, ledger = _paused(cosmos_db, ("payment", "payment_backup"))
    yield made, ledger
    made.close()


def _cancel(made: OpsHarness) -> None:
    body = {"type": "CancelOrder", "schemaVersion": 1, "orderId": ORDER, "reason": "changed my mind"}
    made.send(ORDERS_QUEUE, json.dumps(body), f"{ORDER}:cancel")


def _past_the_review(made: OpsHarness) -> None:
    """Runs past the review deadline and the compensation that follows."""
    assert made.ctx is not None
    made.host.run_until(made.clock.now() + timedelta(seconds=600) + made.ctx.settings.start_grace * 2)
    made.run_until_idle()


def _ends_compensated_quietly(made: OpsHarness, ledger: Ledger, caplog: pytest.LogCaptureFixture) -> None:
    assert made.ctx is not None
    record = made.ctx.states.get(ORDER)
    assert record is not None
    assert record.process_state is ProcessState.COMPENSATED, [(h.event, h.by) for h in record.history]
    assert ledger.net(ORDER) == NetEffect(), ledger.net(ORDER)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    status, detail = made.get(f"/api/ops/orders/{ORDER}")
    assert status == 200, detail
    assert detail["review"] is None and detail["state"]["waitingForReview"] is False, detail["review"]
    assert all(a["runtimeStatus"] != "Running" for a in detail["attempts"]), detail["attempts"]


# the refused providers, the step paused for review, and the steps the compensation undoes
SHIPMENT = (("shipping",), "arrange-shipment", [("reserve-inventory", "inventory"), ("charge-payment", "payment")])
PAYMENT = (("payment", "payment_backup"), "charge-payment", [("reserve-inventory", "inventory")])


@pytest.mark.parametrize("version", [SCHEDULER, DRAINING_SCHEDULER])
@pytest.mark.parametrize(("refused", "step", "undone"), [SHIPMENT, PAYMENT], ids=["shipment", "payment"])
def test_a_cancel_during_a_review_undoes_only_the_steps_before_the_refused_one(
    cosmos_db: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    version: str,
    refused: tuple[str, ...],
    step: str,
    undone: list[tuple[str, str]],
) -> None:
    """A refused shipment under review is not past the pivot: the cancel is taken, nothing is shipped and
    the payment is refunded; a payment both providers declined is refunded nowhere. The paused attempt,
    of either version that takes answers, runs the step again at its deadline (the default ``retry``):
    fenced out, it ends quietly."""
    with monkeypatch.context() as started_as:  # the starter starts ``version`` (``_v3``: still draining)
        started_as.setattr(starter, "SCHEDULER", version)
        started_as.setitem(starter.START_EVENTS, version, starter.START_EVENTS[SCHEDULER])
        made, ledger = _paused(cosmos_db, refused, REVIEW_DEFAULT_ACTION="retry")
    try:
        assert made.ctx is not None
        caplog.set_level(logging.INFO)
        paused = made.ctx.states.get(ORDER)
        pending = pending_review(paused) if paused is not None else None
        assert pending is not None and pending.step == step, paused
        attempt = made.host.engine.instance(pending.instance_id)
        assert attempt is not None and attempt.name == version
        caplog.clear()  # the refusal and the review alert before the pause are ERRORs on purpose
        _cancel(made)
        made.run_until_idle()
        record = made.ctx.states.get(ORDER)
        assert record is not None and record.process_state in (ProcessState.COMPENSATING, ProcessState.COMPENSATED)
        assert record.steps[step].status is StepStatus.FAILED
        assert not any(getattr(r, "event", None) == "CancellationRejected" for r in caplog.records)

        _past_the_review(made)
        _ends_compensated_quietly(made, ledger, caplog)
        record = made.ctx.states.get(ORDER)
        assert record is not None and [(e.step, e.agent) for e in record.compensation] == undone
    finally:
        made.close()


@pytest.mark.parametrize("first", ["answer", "cancel"])
@pytest.mark.parametrize("action", ["retry", "alternative"])
def test_an_answer_raised_next_to_a_cancel_ends_compensated_either_way(
    payment_review: tuple[OpsHarness, Ledger], caplog: pytest.LogCaptureFixture, first: str, action: str
) -> None:
    """The operator answers (the event is raised: the attempt will run the step again), and the client's
    cancel comes at the same moment: the attempt's next write and the cancel race on the record."""
    made, ledger = payment_review
    assert made.ctx is not None
    caplog.set_level(logging.INFO)
    paused = made.ctx.states.get(ORDER)
    assert paused is not None
    pending = pending_review(paused)
    assert pending is not None and decide_by_time(pending) is not None
    if first == "cancel":
        _cancel(made)
    status, body = made.post(
        f"/api/ops/orders/{ORDER}/review",
        {"reviewId": pending.review_id, "action": action, "reason": "try again"},
    )
    assert status == 200, body
    if first == "answer":
        _cancel(made)
    _past_the_review(made)
    made.host.run_until(made.clock.now() + timedelta(minutes=30))  # a second review's deadline, if any
    made.run_until_idle()
    _ends_compensated_quietly(made, ledger, caplog)
