"""The operator's name (from the ``X-MS-CLIENT-PRINCIPAL`` claims) is text from outside, like the reason,
and goes to the same places: the record's history (``by``), a cancel's ``lastError`` ("cancelled by
<name>: <reason>", which travels on in alerts and in the submitter's status), the action's log line and
the answer. The platform vouches for the principal, not for its display name: operations/auth.py
``operator_name`` cleans it (one line, no control or bidirectional character, no lone surrogate) and caps
it at ``MAX_OPERATOR_NAME`` characters; a name with nothing visible falls through to the next name claim."""

from __future__ import annotations

import base64
import json

import pytest

from operations.auth import MAX_OPERATOR_NAME, decode_principal, operator_name

pytestmark = pytest.mark.cosmos

NAMES = {
    "a line break forging a log line": "ops@contoso.example\nINFO orders: order o-x: Compensating -> Compensated",
    "an ANSI escape": "ops\x1b[2J\x1b[31m@contoso.example",
    "a lone surrogate": "ops\udc80@contoso.example",
    "10,000 characters": "o" * 10_000,
}


def _header(name: str) -> str:
    data = {"auth_typ": "aad", "claims": [{"typ": "name", "val": name}, {"typ": "roles", "val": "Orders.Operate"}]}
    return base64.b64encode(json.dumps(data).encode()).decode()


@pytest.mark.parametrize("case", sorted(NAMES))
def test_an_operator_name_no_record_or_log_line_can_carry_is_refused_or_made_carriable(easy_auth, case):
    name = NAMES[case]
    order_id = f"o-name-{sorted(NAMES).index(case)}"
    easy_auth.error(order_id)
    status, body = easy_auth.post(
        f"/api/ops/orders/{order_id}/cancel",
        {"reason": "customer asked"},
        headers={"x-ms-client-principal": _header(name)},
    )
    assert easy_auth.ctx is not None
    record = easy_auth.ctx.states.get(order_id)
    recorded = [h.by for h in record.history] + [record.last_error or ""]
    if 400 <= status < 500:
        return  # refused: fine
    assert status == 200, (case, status, body)
    for text in recorded:
        assert "\n" not in text and "\x1b" not in text, f"{case}: recorded as is: {text[:120]!r}"
        assert "\udc80" not in text, f"{case}: a lone surrogate recorded in the state record: {text[:80]!r}"
        assert len(text) <= 1000, f"{case}: a {len(text)}-character name recorded (reasons are capped at 500)"


@pytest.mark.parametrize(
    ("claim", "expected"),
    [
        ("ops@contoso.example\nINFO forged", "ops@contoso.example INFO forged"),
        ("ops\x1b[2J@contoso.example", "ops [2J@contoso.example"),
        ("ops\udc80@contoso.example", "ops\ufffd@contoso.example"),
        ("  \u202eops@contoso.example  ", "ops@contoso.example"),
        ("\u200b\u3164 ", ""),
    ],
)
def test_operator_name_is_made_carriable(claim, expected):
    assert operator_name(claim) == expected


def test_a_long_operator_name_is_cut_with_an_ellipsis():
    name = operator_name("o" * 10_000)
    assert len(name) == MAX_OPERATOR_NAME and name.endswith("\u2026")


def test_an_invisible_name_claim_falls_through_to_the_next_one():
    data = {
        "claims": [
            {"typ": "name", "val": "\u200b\u200b"},
            {"typ": "preferred_username", "val": "ops@contoso.example"},
            {"typ": "roles", "val": "Orders.Operate"},
        ]
    }
    principal = decode_principal(base64.b64encode(json.dumps(data).encode()).decode())
    assert principal is not None and principal.name == "ops@contoso.example"
