"""Who acted must be told apart in the logs (red team, OWASP A09). The record and the action events named
the operator by the display name in the sign-in (``name``, else ``preferred_username``), which Entra ID
neither keeps unique nor fixed: two people called "Pat Lee" were one operator in every log line, a
person whose display name reads ``app <client id>`` acted as that application, and a request the app
refused for lack of ``Orders.Operate`` left no trace at all. Every action request of a signed-in
principal is now logged once (``OperatorRequest``) with its name, its object id (``oid``, the id
Entra ID never reuses), the action, the order and the status it was answered with, refused or not."""

from __future__ import annotations

import logging

import pytest

from tests.operations.harness import OpsHarness
from tests.operations.test_app_principal import OBJECT_ID as OID
from tests.operations.test_app_principal import _header as principal_header

pytestmark = pytest.mark.cosmos

PAT_A = "0b7f3c2e-1d4a-4e5b-8c6d-7e8f9a0b1c2d"
PAT_B = "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9"
REASON = {"reason": "payment provider fixed"}


def _signed_in(name: str, object_id: str, roles: tuple[str, ...]) -> dict[str, str]:
    roles_claims = ({"typ": "roles", "val": r} for r in roles)
    claims = [{"typ": "name", "val": name}, {"typ": OID, "val": object_id}, *roles_claims]
    return {"X-MS-CLIENT-PRINCIPAL": principal_header(claims)}


def _requests(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, str, str | None, int]]:
    found = [r.__dict__ for r in caplog.records if getattr(r, "event", None) == "OperatorRequest"]
    return [(r["operator"], r["operatorId"], r["action"], r["orderId"], r["status"]) for r in found]


def test_every_action_request_names_the_principals_object_id_taken_or_refused(
    easy_auth: OpsHarness, caplog: pytest.LogCaptureFixture
) -> None:
    easy_auth.error("o-audit")
    operator = _signed_in("Pat Lee", PAT_A, ("Orders.Read", "Orders.Operate"))
    namesake = _signed_in("Pat Lee", PAT_B, ("Orders.Read", "Orders.Operate"))
    reader = _signed_in("Pat Lee", PAT_B, ("Orders.Read",))
    with caplog.at_level(logging.INFO, logger="orders"):
        assert easy_auth.post("/api/ops/orders/o-audit/resubmit", REASON, operator)[0] == 200
        # the namesake's same resubmit is the record's latest move by that name: answered 200 'repeated'
        status, body = easy_auth.post("/api/ops/orders/o-audit/resubmit", REASON, namesake)
        assert (status, body.get("repeated")) == (200, True), body
        assert easy_auth.post("/api/ops/orders/o-audit/cancel", REASON, reader)[0] == 403
        answer = {**REASON, "action": "retry", "reviewId": "o-audit:1:payment:review:1"}
        assert easy_auth.post("/api/ops/orders/o-audit/review", answer, reader)[0] == 403
        assert easy_auth.post("/api/ops/orders/o-audit/compensate", REASON, {**operator, "Origin": "null"})[0] == 403
    assert _requests(caplog) == [
        ("Pat Lee", PAT_A, "resubmit", "o-audit", 200),
        ("Pat Lee", PAT_B, "resubmit", "o-audit", 200),
        ("Pat Lee", PAT_B, "cancel", "o-audit", 403),
        ("Pat Lee", PAT_B, "review", "o-audit", 403),
        ("Pat Lee", PAT_A, "compensate", "o-audit", 403),
    ]


def test_a_read_and_an_anonymous_request_are_not_action_requests(
    easy_auth: OpsHarness, caplog: pytest.LogCaptureFixture
) -> None:
    """Only actions are logged so: the console polls the reads every 3 s, and a request with no principal
    names nobody (the platform's own logs have it)."""
    easy_auth.error("o-quiet")
    with caplog.at_level(logging.INFO, logger="orders"):
        assert easy_auth.get("/api/ops/summary", _signed_in("Pat Lee", PAT_A, ("Orders.Read",)))[0] == 200
        assert easy_auth.post("/api/ops/orders/o-quiet/resubmit", REASON)[0] == 401
    assert _requests(caplog) == []


def test_a_discard_request_names_the_deferred_message_it_was_for(
    easy_auth: OpsHarness, caplog: pytest.LogCaptureFixture
) -> None:
    """An order may have several deferred payment notifications: the line of a discard says which one (its
    sequence number, None for a malformed one). Before, it named the order alone."""
    operator = _signed_in("Pat Lee", PAT_A, ("Orders.Read", "Orders.Operate"))
    with caplog.at_level(logging.INFO, logger="orders"):
        assert easy_auth.post("/api/ops/orders/o-ghost/deferred/17/discard", REASON, operator)[0] == 404
        assert easy_auth.post("/api/ops/orders/o-ghost/deferred/x17/discard", REASON, operator)[0] == 400
        assert easy_auth.post("/api/ops/orders/o-ghost/resubmit", REASON, operator)[0] == 404
    found = [r.__dict__ for r in caplog.records if getattr(r, "event", None) == "OperatorRequest"]
    assert [(r["action"], r["status"], r.get("sequenceNumber", "absent")) for r in found] == [
        ("discard", 404, 17),
        ("discard", 400, None),
        ("resubmit", 404, "absent"),
    ]
    assert "discard #17 of order o-ghost by Pat Lee" in found[0]["message"]
