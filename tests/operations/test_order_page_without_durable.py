"""The order page when the Durable backend cannot be read (operations/blueprint.py ``ops_order``): the
order, its record and its history come from Cosmos DB and are still worth showing, so the page is 200
without the attempts' runtime status, saying why (``attemptsError``), never a 500 with an empty body."""

from __future__ import annotations

from typing import Any

import azure.durable_functions as df
import pytest

from tests.operations.harness import OpsHarness

pytestmark = pytest.mark.cosmos


@pytest.mark.parametrize(
    "failure",
    [
        Exception("The operation failed with an unexpected status code 503"),  # what get_status raises
        ConnectionResetError("Connection reset by peer"),  # the extension's endpoint unreachable
    ],
)
def test_an_order_page_whose_attempts_cannot_be_read_is_200_saying_why(
    ops: OpsHarness, monkeypatch: pytest.MonkeyPatch, failure: Exception
) -> None:
    """Found by the red team (session 32) on 36c310f: ``ops_order`` awaited ``instances.describe`` outside
    any ``try``; ``DurableOrchestrationClient.get_status`` raises a plain Exception for a status it does
    not expect (503, 429...) and aiohttp's errors pass through, so the page was a 500 with an empty body,
    just when the operator needs the record to decide what to do."""
    ops.error("o-dur")

    async def unreadable(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise failure

    monkeypatch.setattr(df.DurableOrchestrationClient, "get_status", unreadable)
    status, body = ops.get("/api/ops/orders/o-dur")
    assert status == 200, (status, body)
    assert body["state"]["processState"] == "Error" and body["transitions"], body
    assert body["attempts"] == [] and body["statusesSent"] == [], body
    assert "Durable" in body["attemptsError"] and str(failure) in body["attemptsError"], body


def test_an_order_page_whose_attempts_are_read_has_no_attempts_error(ops: OpsHarness) -> None:
    ops.error("o-dur-ok")
    status, body = ops.get("/api/ops/orders/o-dur-ok")
    assert status == 200 and "attemptsError" not in body, body
    assert [a["instanceId"] for a in body["attempts"]] == ["o-dur-ok:1"], body
