"""App roles come from Microsoft Entra ID only (red team). App Service authentication runs several identity
providers side by side (Google, GitHub, any OpenID Connect provider added to ``authsettingsV2`` for another
part of the site), and passes each one's claims in the same ``X-MS-CLIENT-PRINCIPAL``, naming the provider in
``auth_typ`` (https://learn.microsoft.com/azure/app-service/configure-authentication-user-identities). The app
read ``Orders.Read`` and ``Orders.Operate`` from a ``roles`` claim of whatever provider signed the caller in,
though only the Entra ID registration defines and assigns them (infra/ops-app-roles.json): whoever runs a custom
OpenID Connect provider, or a user of one that lets its users shape their claims, could cancel orders. A
principal of another provider now has no app role (403); Entra ID's (``aad``) are as before."""

from __future__ import annotations

import base64
import json

import pytest

from operations.auth import decode_principal
from tests.operations.harness import OpsHarness

pytestmark = pytest.mark.cosmos

ROLES = ("Orders.Read", "Orders.Operate")


def _principal(provider: str) -> str:
    claims = [{"typ": "name", "val": "pat@partner.example"}, *({"typ": "roles", "val": r} for r in ROLES)]
    data = {"auth_typ": provider, "claims": claims, "name_typ": "name", "role_typ": "roles"}
    return base64.b64encode(json.dumps(data).encode()).decode()


@pytest.mark.parametrize("provider", ["partner-oidc", "google", "github", ""])
def test_roles_from_another_provider_grant_nothing(easy_auth: OpsHarness, provider: str) -> None:
    easy_auth.error("o-idp")
    headers = {"X-MS-CLIENT-PRINCIPAL": _principal(provider)}
    status, body = easy_auth.post("/api/ops/orders/o-idp/cancel", {"reason": "partner says so"}, headers)
    assert status == 403 and "Orders.Operate" in body["error"], body
    assert easy_auth.get("/api/ops/orders/o-idp", headers)[0] == 403
    assert easy_auth.ctx is not None
    record = easy_auth.ctx.states.get("o-idp")
    assert record is not None and record.process_state.value == "Error"


def test_entra_ids_roles_are_granted() -> None:
    principal = decode_principal(_principal("aad"))
    assert principal is not None and principal.roles == frozenset(ROLES)
