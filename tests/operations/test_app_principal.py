"""An application signed in with the client-credentials flow is an operator too (red team): the app
roles are assignable to applications (infra/ops-app-roles.json ``allowedMemberTypes``), and App Service
passes the claims of a client application's token as it does a user's. Such a token carries no name
claim: its client id (``appid``, v1 tokens; ``azp``, v2) and no delegated scope (``scp``). The app
answered every such call 401 "sign in first", a token the platform had validated, roles and all. It now
acts and is recorded as ``app <client id>``; a user's token with no name is still 401."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from domain.states import ProcessState
from operations.auth import decode_principal
from tests.operations.harness import OpsHarness

pytestmark = pytest.mark.cosmos

CLIENT_ID = "3f6e2a5c-1b7d-4c8e-9a0f-2d4b6c8e0a13"
SP_OBJECT_ID = "9c1d7e3a-5b2f-4a6c-8e0d-1f3a5c7e9b24"
OBJECT_ID = "http://schemas.microsoft.com/identity/claims/objectidentifier"


def _header(claims: list[dict[str, str]]) -> str:
    principal = {
        "auth_typ": "aad",
        "claims": claims,
        "name_typ": "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name",
        "role_typ": "http://schemas.microsoft.com/ws/2008/06/identity/claims/role",
    }
    return base64.b64encode(json.dumps(principal).encode()).decode()


def _app_only(client_id_claim: str, roles: tuple[str, ...]) -> list[dict[str, str]]:
    """The claims of an access token an application got with its own credentials (as App Service maps
    them): no name, no ``scp``; its client id, its service principal's object id, its app roles."""
    return [
        {"typ": "aud", "val": "api://ops-app"},
        {"typ": client_id_claim, "val": CLIENT_ID},
        {"typ": OBJECT_ID, "val": SP_OBJECT_ID},
        {"typ": "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/nameidentifier", "val": SP_OBJECT_ID},
        *({"typ": "roles", "val": r} for r in roles),
    ]


def test_an_application_with_the_operate_role_acts_and_is_recorded_by_its_client_id(easy_auth: OpsHarness) -> None:
    easy_auth.error("o-app")
    app = {"X-MS-CLIENT-PRINCIPAL": _header(_app_only("appid", ("Orders.Read", "Orders.Operate")))}
    reader_app = {"X-MS-CLIENT-PRINCIPAL": _header(_app_only("azp", ("Orders.Read",)))}

    assert easy_auth.get("/api/ops/summary", app)[0] == 200
    status, body = easy_auth.post("/api/ops/orders/o-app/resubmit", {"reason": "nightly retry job"}, reader_app)
    assert status == 403 and "Orders.Operate" in body["error"], body  # its roles decide, as a user's do
    status, body = easy_auth.post("/api/ops/orders/o-app/resubmit", {"reason": "nightly retry job"}, app)
    assert status == 200, body
    assert body["by"] == f"app {CLIENT_ID}"
    assert easy_auth.ctx is not None
    record = easy_auth.ctx.states.get("o-app")
    assert record is not None and record.process_state is ProcessState.PENDING
    assert (record.history[-1].by, record.history[-1].detail) == (f"app {CLIENT_ID}", "nightly retry job")


def test_a_v2_token_names_the_application_by_azp() -> None:
    principal = decode_principal(_header(_app_only("azp", ("Orders.Read",))))
    assert principal is not None and (principal.name, principal.roles) == (
        f"app {CLIENT_ID}",
        frozenset({"Orders.Read"}),
    )


@pytest.mark.parametrize("scope", ["scp", "http://schemas.microsoft.com/identity/claims/scope"])
def test_a_user_token_with_no_name_claim_is_still_no_principal(scope: str, easy_auth: Any) -> None:
    """A delegated token (``scp``) acts for a user: its ``azp`` is the client the user signed in with,
    not who acts, so it never names the operator."""
    claims = [*_app_only("azp", ("Orders.Read",)), {"typ": scope, "val": "user_impersonation"}]
    assert decode_principal(_header(claims)) is None
    assert easy_auth.get("/api/ops/summary", {"X-MS-CLIENT-PRINCIPAL": _header(claims)})[0] == 401


def test_a_client_id_that_is_not_printable_is_no_name() -> None:
    claims = [{"typ": "appid", "val": "\u202e\u200b"}, {"typ": "roles", "val": "Orders.Read"}]
    assert decode_principal(_header(claims)) is None
