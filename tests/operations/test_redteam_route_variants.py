"""Red team (found fine, kept as regressions): the ops routes asked for by another method or at another spelling of
their address, through the runner's host (``localrun/worker/http.py``). A method a route does not declare invokes
nothing (the host's 404) and changes nothing; an action's address with a trailing slash or its literal segments in
another case is that action (ASP.NET routing's), taken once and audited once (``OperatorRequest``), never a path
around the audit."""

from __future__ import annotations

import logging

import pytest

from tests.operations.harness import OpsHarness

pytestmark = pytest.mark.cosmos

REASON = {"reason": "provider fixed"}


def _audited(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, int]]:
    found = [r.__dict__ for r in caplog.records if getattr(r, "event", None) == "OperatorRequest"]
    return [(r["action"], r["orderId"], r["status"]) for r in found]


@pytest.mark.parametrize("method", ["HEAD", "PUT", "OPTIONS", "DELETE", "PATCH"])
def test_a_method_an_action_route_does_not_declare_invokes_nothing(
    ops: OpsHarness, caplog: pytest.LogCaptureFixture, method: str
) -> None:
    assert ops.ctx is not None
    before = ops.error("o-method")
    invoked = ops.host.invocation_requests
    with caplog.at_level(logging.INFO, logger="orders"):
        for path in ("/api/ops/orders/o-method/resubmit", "/api/ops/orders/o-method", "/api/ops/summary"):
            assert ops.request(method, path, REASON).status == 404, (method, path)
    assert ops.host.invocation_requests == invoked
    assert ops.ctx.states.get("o-method") == before
    assert _audited(caplog) == []


@pytest.mark.parametrize("path", ["/api/ops/orders/o-route/resubmit/", "/API/OPS/ORDERS/o-route/RESUBMIT"])
def test_an_actions_address_spelled_otherwise_is_the_action_audited_once(
    ops: OpsHarness, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    assert ops.ctx is not None
    ops.error("o-route")
    with caplog.at_level(logging.INFO, logger="orders"):
        status, body = ops.post(path, REASON)
    assert status == 200 and body["order"]["processState"] == "Pending", (status, body)
    assert _audited(caplog) == [("resubmit", "o-route", 200)]
