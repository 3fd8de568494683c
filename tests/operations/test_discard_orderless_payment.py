"""``POST /api/ops/orders/{orderId}/deferred/{sequenceNumber}/discard`` through the real Functions runtime: a
payment notification deferred for an order nobody submitted, refunded by the operator, is discarded (dead-lettered
``DiscardedByOperator``), and the prepaid order submitted under its id afterwards captures nothing against it.
Without the discard (as before it existed) that order took the payment and captured it: the control case below. Its
refusals (404, 409, 400, 403) and the same discard posted again (200 ``repeated``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from adapters.remote.services import remote_services
from adapters.remote.simulators.ledger import Ledger
from contracts.names import ORDERS_QUEUE
from domain.deferral import DISCARDED
from tests.deferral.test_discard_orderless_payment import FailingFetch
from tests.operations.harness import OPERATOR, OpsHarness, easy_auth_header
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos

GHOST = "o-ghost"
TOTAL = 2500
NOTIFICATION = {
    "type": "PaymentNotification",
    "schemaVersion": 1,
    "notificationId": "n-ghost",
    "orderId": GHOST,
    "amountCents": TOTAL,
    "currency": "EUR",
    "providerReference": "psp-ghost",
}
REASON = {"reason": "refunded at the provider, ticket 4711"}


@pytest.fixture
def waiting(cosmos_db: Any) -> Iterator[tuple[OpsHarness, Ledger, int]]:
    """A notification deferred for order ``o-ghost``, which nobody submitted; the providers' ledger; its number."""
    made = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR)
    assert made.ctx is not None
    ledger = Ledger()
    made.change_context(remote=remote_services(made.ctx.settings, made.clock, {}, ledger=ledger, seed=3))
    made.send(ORDERS_QUEUE, json.dumps(NOTIFICATION), "n-ghost")
    made.run_until_idle()
    status, page = made.get(f"/api/ops/orders/{GHOST}")
    assert status == 200, page
    [entry] = page["deferredNotifications"]
    assert (entry["status"], entry["reason"]) == ("Deferred", "OrderNotSubmitted")
    yield made, ledger, entry["sequenceNumber"]
    made.close()


def discard_path(seq: int | str, order_id: str = GHOST) -> str:
    return f"/api/ops/orders/{order_id}/deferred/{seq}/discard"


def submit_the_order(made: OpsHarness) -> None:
    body = order(orderId=GHOST, lines=[{"sku": "SKU-1", "quantity": 2, "unitPriceCents": 1250}], prepaid=True)
    made.send(ORDERS_QUEUE, json.dumps(body), GHOST)
    made.run_until_idle()


@pytest.mark.parametrize("discarded", [True, False])
def test_an_order_submitted_after_the_discard_captures_nothing_against_the_refunded_payment(
    waiting: tuple[OpsHarness, Ledger, int], discarded: bool
) -> None:
    made, ledger, seq = waiting
    if discarded:
        status, body = made.post(discard_path(seq), REASON)
        assert status == 200, body
        assert (body["action"], body["by"], body["deadLettered"]) == ("discard", "ops@contoso.example", True)
        assert body["entry"]["status"] == "DeadLettered" and body["entry"]["discardReason"] == REASON["reason"]
        [dead] = made.broker.dead_letters(ORDERS_QUEUE)
        assert (dead.sequence_number, dead.reason) == (seq, DISCARDED)
        assert "ops@contoso.example" in str(dead.description) and REASON["reason"] in str(dead.description)

    submit_the_order(made)

    assert made.ctx is not None
    record = made.ctx.states.get(GHOST)
    assert record is not None
    captures = ledger.effects(GHOST, "capture")
    if discarded:
        assert record.payment is None
        assert captures == []  # nothing captured against the refunded reference
        status, page = made.get(f"/api/ops/orders/{GHOST}")
        assert [e["status"] for e in page["deferredNotifications"]] == ["DeadLettered"]
    else:  # as before the action: the order takes the refunded payment and captures it
        assert record.payment is not None and record.payment.provider_reference == "psp-ghost"
        assert [c.amount for c in captures] == [TOTAL]


def test_the_same_discard_posted_again_is_repeated_and_the_refusals_say_why(
    waiting: tuple[OpsHarness, Ledger, int],
) -> None:
    made, _, seq = waiting
    assert made.post(discard_path(seq), REASON)[0] == 200

    status, body = made.post(discard_path(seq), REASON)
    assert status == 200 and body["repeated"] is True, body
    status, body = made.post(discard_path(seq), {"reason": "another reason"})
    assert status == 409 and "DeadLettered already" in body["error"] and "DiscardedByOperator" in body["error"]
    status, body = made.post(discard_path(seq + 100), REASON)
    assert status == 404 and f"#{seq + 100}" in body["error"], body
    status, body = made.post(discard_path(seq, "o-nobody"), REASON)
    assert status == 404, body
    for malformed in ("0", "-1", "abc", "9" * 20, "١"):
        status, body = made.post(discard_path(malformed), REASON)
        assert status == 400 and "sequence number" in body["error"], (malformed, body)
    assert made.post(discard_path(seq), {})[0] == 400  # a reason is required
    assert len(made.broker.dead_letters(ORDERS_QUEUE)) == 1


def test_a_payment_whose_order_exists_now_is_refused(waiting: tuple[OpsHarness, Ledger, int]) -> None:
    made, _, seq = waiting
    assert made.ctx is not None
    made.pending(GHOST)  # its state record written, its submission not yet looking for the payment

    status, body = made.post(discard_path(seq), REASON)

    assert status == 409 and "applied to it" in body["error"], body
    assert made.broker.dead_letters(ORDERS_QUEUE) == []


def test_discarding_takes_the_operate_role(cosmos_db: Any) -> None:
    made = OpsHarness(cosmos_db, WEBSITE_AUTH_ENABLED="True", WEBSITE_SITE_NAME="orders-app")
    try:
        made.send(ORDERS_QUEUE, json.dumps(NOTIFICATION), "n-ghost")
        made.run_until_idle()
        [seq] = [m.sequence_number for m in made.broker.peek(ORDERS_QUEUE, 10) if m.state.name == "DEFERRED"]
        reader = {"X-MS-CLIENT-PRINCIPAL": easy_auth_header("reader@contoso.example", ("Orders.Read",))}
        status, body = made.post(discard_path(seq), REASON, reader)
        assert status == 403 and "Orders.Operate" in body["error"], body
        assert made.post(discard_path(seq), REASON)[0] == 401
        assert made.broker.dead_letters(ORDERS_QUEUE) == []
        operator = {"X-MS-CLIENT-PRINCIPAL": easy_auth_header("op@contoso.example", ("Orders.Operate",))}
        status, body = made.post(discard_path(seq), REASON, operator)
        assert status == 200, body
        assert made.broker.dead_letters(ORDERS_QUEUE)[0].reason == DISCARDED
    finally:
        made.close()


def test_a_service_bus_failure_after_the_write_is_503_and_posting_again_finishes_it(
    waiting: tuple[OpsHarness, Ledger, int],
) -> None:
    made, _, seq = waiting
    assert made.ctx is not None
    working = made.ctx.deferred
    made.change_context(deferred=FailingFetch(working))
    status, body = made.post(discard_path(seq), REASON)
    assert status == 503 and "post the same discard again" in body["error"], body
    made.change_context(deferred=working)
    status, page = made.get(f"/api/ops/orders/{GHOST}")
    assert [e["status"] for e in page["deferredNotifications"]] == ["DeadLettered"]  # written: nothing applies it
    assert made.broker.dead_letters(ORDERS_QUEUE) == []

    status, body = made.post(discard_path(seq), REASON)

    assert status == 200 and body["repeated"] is True and body["deadLettered"] is True, body
    assert made.broker.dead_letters(ORDERS_QUEUE)[0].reason == DISCARDED
