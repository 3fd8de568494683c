"""A caller the platform signed in whose principal the app cannot use (red team). The console's page sends a
caller with no principal to the platform's sign-in and back; it did the same for one the platform had signed
in but the app refused 401 (a user's token with no name claim; a principal header over the app's cap): the
platform, finding a session, signs the browser in again and sends it back to the page, which sends it to
sign in again, without end, and the operator never reads why. And the cap itself (16 KiB) was under what
Entra ID puts in a sign-in: a registration that emits the ``groups`` claim lists up to 200 groups in a JWT
(https://learn.microsoft.com/azure/active-directory/hybrid/how-to-connect-fed-group-claims), each one claim of
the ``X-MS-CLIENT-PRINCIPAL`` the platform passes: about 20 KiB of base64 with the usual claims, and an
operator in that many groups was refused 401 "sign in first", signed in."""

from __future__ import annotations

import uuid

import pytest

from tests.operations.harness import OpsHarness
from tests.operations.test_app_principal import OBJECT_ID as OID
from tests.operations.test_app_principal import _header as principal_header

pytestmark = pytest.mark.cosmos


def _header(claims: list[dict[str, str]]) -> dict[str, str]:
    return {"X-MS-CLIENT-PRINCIPAL": principal_header(claims)}


def _sign_in_claims() -> list[dict[str, str]]:
    """The claims of an Entra ID sign-in as App Service passes them (an ID token's, mapped types)."""
    claims = {
        "aud": str(uuid.uuid4()),
        "iss": f"https://login.microsoftonline.com/{uuid.uuid4()}/v2.0",
        "iat": "1780300000",
        "nbf": "1780300000",
        "exp": "1780303900",
        "aio": "AWQAm/8ZAAAA" + "x" * 120,
        "c_hash": "q1w2e3r4t5y6u7i8o9p0aa",
        "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/emailaddress": "pat.lee@contoso.example",
        "name": "Pat Lee",
        "nonce": "0f1e2d3c4b5a69788796a5b4c3d2e1f0_20260501090000",
        OID: str(uuid.uuid4()),
        "preferred_username": "pat.lee@contoso.example",
        "rh": "1.AQsA" + "y" * 80,
        "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/nameidentifier": "Zq" * 22,
        "http://schemas.microsoft.com/identity/claims/tenantid": str(uuid.uuid4()),
        "uti": "AbCdEfGhIjKlMnOpQrStUv",
        "ver": "2.0",
    }
    return [{"typ": t, "val": v} for t, v in claims.items()]


def test_an_operator_in_200_groups_is_signed_in(easy_auth: OpsHarness) -> None:
    groups = [{"typ": "groups", "val": str(uuid.uuid4())} for _ in range(200)]
    role = [{"typ": "http://schemas.microsoft.com/ws/2008/06/identity/claims/role", "val": "Orders.Read"}]
    headers = _header([*_sign_in_claims(), *groups, *role])
    assert len(headers["X-MS-CLIENT-PRINCIPAL"]) > 16 * 1024
    status, body = easy_auth.get("/api/ops/summary", headers)
    assert status == 200, body


def test_a_signed_in_caller_the_app_refuses_is_told_why_not_sent_to_sign_in_again(easy_auth: OpsHarness) -> None:
    nameless = [c for c in _sign_in_claims() if c["typ"] not in ("name", "preferred_username")]
    nameless.append({"typ": "scp", "val": "user_impersonation"})  # a user's, not an application's own
    page = easy_auth.request("GET", "/api/ops/console", headers=_header(nameless))
    assert page.status == 401, (page.status, page.headers)
    assert "Location" not in page.headers and b"no authenticated principal" not in page.body, page.body
    assert easy_auth.request("GET", "/api/ops/console").status == 302  # no principal at all: to sign in, as before
