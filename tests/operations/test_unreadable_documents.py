"""A state document that does not map to a record (schema drift, a hand edit) must not take the
operator's view down with it: the summary and the order lists show every other order and name the
unreadable one with its mapping error; its own page says what is wrong with it; an action on it is
refused with that reason. Through the real Functions runtime."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.names import STATE_CONTAINER
from domain.deferral import DeferralDocument, document_id
from tests.operations.harness import OpsHarness, first_review

pytestmark = pytest.mark.cosmos

REASON = {"reason": "customer called"}


def poison(cosmos_db: Any, order_id: str, **fields: Any) -> None:
    container = cosmos_db.get_container_client(STATE_CONTAINER)
    doc = container.read_item(order_id, partition_key=order_id)
    container.replace_item(doc["id"], {**doc, **fields})


@pytest.mark.parametrize(
    "bad", [{"failureCount": "several"}, {"completeBy": "next tuesday"}, {"history": [{"event": 7}]}]
)
def test_the_summary_and_the_lists_show_the_others_and_name_the_unreadable_one(
    ops: OpsHarness, cosmos_db: Any, bad: dict[str, Any]
) -> None:
    ops.processing("o-good")
    ops.processing("o-bad")
    ops.error("o-error")
    poison(cosmos_db, "o-bad", **bad)

    status, summary = ops.get("/api/ops/summary")
    assert status == 200, summary
    assert [u["orderId"] for u in summary["unreadable"]] == ["o-bad"], summary
    assert summary["unreadable"][0]["error"], summary

    for path in ("/api/ops/orders", "/api/ops/orders?state=Processing"):
        status, page = ops.get(path)
        assert status == 200, (path, page)
        listed = {row["orderId"] for row in page["orders"]}
        assert "o-good" in listed and "o-bad" not in listed, (path, page)
        assert [u["orderId"] for u in page["unreadable"]] == ["o-bad"], (path, page)


def test_the_unreadable_orders_page_says_what_is_wrong_and_actions_are_refused_with_the_reason(
    ops: OpsHarness, cosmos_db: Any
) -> None:
    ops.error("o-bad")
    poison(cosmos_db, "o-bad", failureCount="several")

    status, detail = ops.get("/api/ops/orders/o-bad")
    assert status == 200, detail
    assert detail["state"] is None and "failureCount" in detail["stateError"], detail
    for action in ("resubmit", "cancel", "compensate"):
        status, body = ops.post(f"/api/ops/orders/o-bad/{action}", REASON)
        assert status == 409 and "does not map" in body["error"] and "failureCount" in body["error"], (action, body)
    status, body = ops.post(
        "/api/ops/orders/o-bad/review", {"reviewId": first_review("o-bad"), **REASON, "action": "retry"}
    )
    assert status == 409 and "does not map" in body["error"], body


def test_a_readable_order_has_no_state_error(ops: OpsHarness) -> None:
    ops.error("o-fine")
    status, detail = ops.get("/api/ops/orders/o-fine")
    assert status == 200 and detail["stateError"] is None and detail["state"]["processState"] == "Error"
    status, page = ops.get("/api/ops/orders")
    assert status == 200 and page["unreadable"] == []


def test_an_order_page_with_an_unreadable_deferral_document_says_what_is_wrong(ops: OpsHarness, cosmos_db: Any) -> None:
    """The deferral document (``deferred:<orderId>``) lives in the same container and can drift the
    same way: the order page shows the rest and says what is wrong with it (found by a red team)."""
    assert ops.ctx is not None
    ops.error("o-defer")
    ops.ctx.deferrals.save(DeferralDocument.empty("o-defer", ops.clock.now()))
    container = cosmos_db.get_container_client(STATE_CONTAINER)
    doc = container.read_item(document_id("o-defer"), partition_key="o-defer")
    container.replace_item(doc["id"], {**doc, "entries": "several"})

    status, detail = ops.get("/api/ops/orders/o-defer")
    assert status == 200, (status, detail)
    assert detail["state"]["processState"] == "Error", detail
    assert detail["deferredNotifications"] == [] and "entries" in detail["deferralError"], detail


@pytest.mark.parametrize("state", ["Error", "CompensationFailed"])
def test_the_summary_names_an_unreadable_document_of_a_state_that_needs_an_operator(
    ops: OpsHarness, cosmos_db: Any, state: str
) -> None:
    """The summary lists the newest Error and CompensationFailed orders (``needOperator``) and names a
    document of those states that does not map, as it does for Processing (found by a red team)."""
    ops.error("o-err-bad")
    poison(cosmos_db, "o-err-bad", processState=state, failureCount="several")
    status, summary = ops.get("/api/ops/summary")
    assert status == 200 and summary["counts"][state] == 1, summary
    status, page = ops.get(f"/api/ops/orders?pageSize=10&state={state}")
    assert status == 200 and page["orders"] == [] and page["unreadable"], page  # the API's list names it
    assert [u["orderId"] for u in summary["unreadable"]] == ["o-err-bad"], summary
    assert summary["unreadableCount"] == 1 and summary["needOperator"][state] == [], summary
