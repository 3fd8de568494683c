"""A prepaid order's payment step under review, through the real runtime: no other provider can take it
over. The customer paid at the first provider (``PaymentNotification``); the backup provider never
received that payment, so a capture there captures nothing of the customer's. The attempt never falls
back by itself (``fallback_left`` is false for a prepaid order), and a review answered ``alternative``
must not fall back either.

- the ``ReviewRequired`` alert and the console's review do not offer ``alternative``;
- the ops API refuses ``alternative`` for it (409, saying why) and notes nothing;
- ``REVIEW_DEFAULT_ACTION=alternative``: the default is read as on a step without a fallback (``fail``:
  Error, nothing undone) and the backup provider is never called.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from adapters.remote.services import remote_services
from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.ledger import Ledger
from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE
from domain.review import pending_review
from domain.states import ProcessState
from tests.operations.harness import OPERATOR, OpsHarness
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos

ORDER = "o-prepaid-rv"
TOTAL = 150000


def _paused(cosmos_db: Any, **settings: str) -> tuple[OpsHarness, Ledger]:
    """A high-value prepaid order, paid at the first provider, whose capture there is refused for good:
    its attempt pauses for review (the backup provider answers, if anyone asks it)."""
    made = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR, REVIEW_TIMEOUT_SECONDS="600", **settings)
    ledger = submit_paid_and_refused(made, ORDER)
    assert made.ctx is not None
    record = made.ctx.states.get(ORDER)
    assert record is not None
    pending = pending_review(record)
    assert pending is not None and pending.step == "charge-payment", [(h.event, h.detail) for h in record.history]
    return made, ledger


def submit_paid_and_refused(made: OpsHarness, order_id: str) -> Ledger:
    """Submits a high-value prepaid order and its payment notification to ``made``, whose first provider refuses its
    capture for good (the ledger of what the providers did), and runs until idle: its attempt pauses for review."""
    assert made.ctx is not None
    ledger = Ledger()
    refused = {"payment": SimulatorConfig(permanent_error_rate=1.0)}
    made.change_context(remote=remote_services(made.ctx.settings, made.clock, refused, ledger=ledger, seed=3))
    body = order(orderId=order_id, lines=[{"sku": "SKU-9", "quantity": 1, "unitPriceCents": TOTAL}], prepaid=True)
    made.send(ORDERS_QUEUE, json.dumps(body), order_id)
    paid = {
        "type": "PaymentNotification",
        "schemaVersion": 1,
        "notificationId": "n-1",
        "orderId": order_id,
        "amountCents": TOTAL,
        "currency": "EUR",
        "providerReference": "psp-1",
    }
    made.send(ORDERS_QUEUE, json.dumps(paid), f"{order_id}:paid")
    made.run_until_idle()
    return ledger


@pytest.fixture
def paused(cosmos_db: Any) -> Iterator[tuple[OpsHarness, Ledger]]:
    made, ledger = _paused(cosmos_db)
    yield made, ledger
    made.close()


def _review_id(made: OpsHarness) -> str:
    assert made.ctx is not None
    record = made.ctx.states.get(ORDER)
    pending = pending_review(record) if record is not None else None
    assert pending is not None
    return pending.review_id


def test_the_review_alert_does_not_offer_the_alternative(paused: tuple[OpsHarness, Ledger]) -> None:
    made, _ = paused
    alerts = [json.loads(m.body) for m in made.broker.peek(OPERATOR_ALERTS_QUEUE, 100)]
    [required] = [a for a in alerts if a["kind"] == "ReviewRequired"]
    assert required["details"]["options"] == ["compensate", "retry", "fail"], required["details"]
    assert "alternative" not in required["summary"], required["summary"]
    assert "alternative" not in required["details"]["how"], required["details"]["how"]


def test_the_console_is_offered_the_answers_without_the_alternative(paused: tuple[OpsHarness, Ledger]) -> None:
    made, _ = paused
    status, detail = made.get(f"/api/ops/orders/{ORDER}")
    assert status == 200, detail
    assert detail["review"]["choices"] == ["compensate", "retry", "fail"], detail["review"]


def test_the_ops_api_refuses_the_alternative_saying_why(paused: tuple[OpsHarness, Ledger]) -> None:
    made, ledger = paused
    review_id = _review_id(made)
    status, body = made.post(
        f"/api/ops/orders/{ORDER}/review", {"reviewId": review_id, "action": "alternative", "reason": "use the backup"}
    )
    assert status == 409, body
    assert "prepaid" in body["error"] and "alternative" in body["error"], body
    assert made.ctx is not None
    record = made.ctx.states.get(ORDER)
    assert record is not None and pending_review(record) is not None  # nothing noted: it still waits
    # another answer is still taken
    status, body = made.post(
        f"/api/ops/orders/{ORDER}/review", {"reviewId": review_id, "action": "fail", "reason": "refund by hand"}
    )
    assert status == 200, body
    made.run_until_idle()
    record = made.ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.ERROR
    assert ledger.effects(ORDER, service="payment_backup") == []  # nothing captured at the backup provider


def test_a_default_alternative_is_read_as_on_a_step_without_a_fallback(cosmos_db: Any) -> None:
    made, ledger = _paused(cosmos_db, REVIEW_DEFAULT_ACTION="alternative")
    try:
        assert made.ctx is not None
        made.host.run_until(made.clock.now() + timedelta(seconds=600) + made.ctx.settings.start_grace * 2)
        made.run_until_idle()
        record = made.ctx.states.get(ORDER)
        assert record is not None
        assert record.process_state is ProcessState.ERROR, [(h.event, h.detail) for h in record.history]
        assert ledger.effects(ORDER, service="payment_backup") == []  # nothing captured at the backup provider
        alerts = [json.loads(m.body) for m in made.broker.peek(OPERATOR_ALERTS_QUEUE, 100)]
        [required] = [a for a in alerts if a["kind"] == "ReviewRequired"]
        assert required["details"]["defaultAction"] == "fail", required["details"]  # what the attempt does
    finally:
        made.close()
