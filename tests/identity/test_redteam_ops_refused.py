"""Red team: the ops API while Cosmos DB refuses the app's identity (``StoreRefused``: a role assignment still
propagating after a first deployment, or removed; docs/deploy.md "First deploy, 403s"), end to end: each request
through the real Functions runtime (``tests/operations/harness.py``), the stores those of the production wiring (the
real ``DefaultAzureCredential`` and azure-cosmos SDK) against the Cosmos DB server taking Entra ID tokens only
(``localrun/cosmos_auth.cjs``). The console's operator is told the store refused, and why, with a 503: never a
500 nor an empty list that would read as "no orders"."""

from __future__ import annotations

from typing import Any

import pytest

from localrun.cosmos_server import CosmosServer
from tests.identity.endpoint import IdentityEndpoint
from tests.identity.test_production_wiring import COSMOS_AUDIENCE, OTHER_IDENTITY, azure_settings
from tests.operations.harness import OpsHarness

pytestmark = pytest.mark.cosmos


def test_a_list_a_summary_an_order_and_an_action_are_503_with_the_reason(
    cosmos_db: Any, production_wiring: Any, identity: IdentityEndpoint, entra_cosmos: CosmosServer
) -> None:
    ops = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL="dev@localhost:Orders.Read,Orders.Operate")
    try:
        app = production_wiring(azure_settings(entra_cosmos))
        ops.change_context(
            states=app.states, orders=app.orders, ops=app.ops, health=app.health, deferrals=app.deferrals
        )
        entra_cosmos.set_auth([OTHER_IDENTITY], [COSMOS_AUDIENCE])  # the app's role assignment not there
        try:
            answers = {
                path: ops.get(path)
                for path in (
                    "/api/ops/summary",
                    "/api/ops/orders",
                    "/api/ops/orders?state=Error",
                    "/api/ops/orders/o-1",
                )
            }
            answers["resubmit"] = ops.post("/api/ops/orders/o-1/resubmit", {"reason": "a refused identity"})
            refused = entra_cosmos.auth_log()["refused"]
        finally:
            entra_cosmos.set_auth(None)
    finally:
        ops.close()
    assert refused and {(r["status"], r["substatus"]) for r in refused} == {(403, 5301)}
    for what, (status, body) in answers.items():
        assert status == 503, (what, status, body)
        text = str(body)
        assert "403/5301" in text and "identity refused" in text, (what, body)
