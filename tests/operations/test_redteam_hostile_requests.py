"""Red team: hostile requests to the ops API through the real runtime (``OpsHarness``). The guarantee:
a request the API cannot serve gets a 4xx with a JSON error, never a 500, and no action is half-applied."""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote

import pytest

pytestmark = pytest.mark.cosmos


def _assert_json_4xx(status: int, body: Any, what: str) -> None:
    assert 400 <= status < 500, f"{what}: {status} {body!r}"
    assert isinstance(body, dict) and body.get("error"), f"{what}: {body!r}"


@pytest.mark.parametrize(
    "size",
    [
        "\u00b2",  # SUPERSCRIPT TWO: str.isdigit() is True, int() refuses it
        "\u2460",  # CIRCLED DIGIT ONE: the same
        "1" * 4400,  # int() refuses more than 4,300 digits
    ],
)
def test_a_page_size_that_is_not_a_plain_number_is_400(ops, size):
    """FINDING. operations/blueprint.py ``ops_orders`` checks ``size_text.isdigit()`` and then calls
    ``int(size_text)`` outside any ``try``: ``isdigit`` is True for digits ``int`` refuses (superscripts,
    circled digits) and for more than 4,300 digits, so the ValueError is a 500 with an empty body."""
    ops.pending("o-ps")
    status, body = ops.get(f"/api/ops/orders?pageSize={quote(size)}")
    _assert_json_4xx(status, body, f"pageSize={size[:10]!r}")


@pytest.mark.parametrize(
    "token",
    [
        "{}",  # Cosmos DB answers 400 (the SDK's CosmosHttpResponseError)
        "[]",
        "a\r\nx-ms-documentdb-query-enablecrosspartition: true",  # azure-core refuses the header value
    ],
)
def test_a_garbage_continuation_token_is_400(ops, token):
    """FINDING. operations/blueprint.py ``ops_orders`` turns only a ValueError from the query into 400
    ("bad continuation token"). A token Cosmos DB refuses comes back as ``CosmosHttpResponseError``
    400, which ``adapters/cosmos/errors.py`` ``mapped_errors`` re-raises unchanged: a 500 with an empty
    body. A token with CR/LF fails in azure-core before it is sent (``ServiceRequestError``), which
    ``mapped_errors`` maps to ``StoreUnavailable``: a 503 telling the operator the state store is down.
    (The emulator serves page 1 for other garbage such as ``garbage`` or ``null``; Cosmos DB answers 400.)
    The API's tokens name their list (``any:<Cosmos DB's token>``): sent bare, the garbage is refused
    before Cosmos DB sees it; after ``any:`` it reaches the query as before."""
    for number in range(3):
        ops.pending(f"o-ct-{number}")
    for sent in (token, f"any:{token}"):
        status, body = ops.get(f"/api/ops/orders?pageSize=1&continuation={quote(sent, safe='')}")
        _assert_json_4xx(status, body, f"continuation={sent!r}")


def _principal(data: Any) -> str:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return base64.b64encode(raw).decode()


NAME = {"typ": "name", "val": "ops@contoso.example"}
ROLE = {"typ": "roles", "val": "Orders.Read"}
PRINCIPALS = {
    "not base64": "%%%not-base64%%%",
    "base64 of not JSON": _principal(b"hello"),
    "base64 of a JSON list": _principal([NAME, ROLE]),
    "claims not a list": _principal({"claims": {"typ": "roles", "val": "Orders.Read"}}),
    "claim values not strings": _principal({"claims": [{"typ": "name", "val": 7}, {"typ": "roles", "val": ["x"]}]}),
    "name_typ a list": _principal({"claims": [NAME, ROLE], "name_typ": ["name"]}),
    "name_typ an object": _principal({"claims": [NAME, ROLE], "name_typ": {"a": 1}}),
    "claim typ a list": _principal({"claims": [NAME, {"typ": ["roles"], "val": "Orders.Read"}]}),
    # 12,000 opening brackets: 16,000 base64 characters, under MAX_PRINCIPAL_HEADER (64 KiB)
    "JSON nested 12,000 deep": _principal(b"[" * 12_000),
    "huge integer in JSON": _principal(b'{"claims": [], "n": ' + b"9" * 5000 + b"}"),
    "not UTF-8": _principal(b"\xff\xfe\xfa"),
}


@pytest.mark.parametrize("case", sorted(PRINCIPALS))
def test_a_malformed_client_principal_header_is_401_or_403_never_500(easy_auth, case):
    """FINDING (low: App Service strips this header from every request, so only the platform sets it).
    operations/auth.py ``decode_principal`` looks ``name_typ`` up in a dict (``t in names``): a list or
    an object there is a TypeError (unhashable), and JSON nested past the recursion limit is a
    RecursionError; neither is caught, so the request is a 500 instead of a 401."""
    status, body = easy_auth.get("/api/ops/summary", headers={"x-ms-client-principal": PRINCIPALS[case]})
    assert status in (401, 403), f"{case}: {status} {body!r}"
    assert isinstance(body, dict) and body.get("error"), case


@pytest.mark.parametrize(
    "order_id",
    ["a%2Fb", "..", "%2E%2E", "a%2F..%2Fb", "%C3%A9t%C3%A9", "a%00b", "a%0Ab", "x" * 2000, "%FF%FE", "a%3Fb=c"],
)
def test_an_odd_order_id_in_the_route_is_a_json_4xx(ops, order_id):
    for method, path in (("GET", ""), ("POST", "/resubmit"), ("POST", "/review")):
        answer = ops.request(method, f"/api/ops/orders/{order_id}{path}", {"reason": "x", "action": "fail"})
        assert 400 <= answer.status < 500, (method, path, answer.status, answer.body[:200])
        assert answer.body.startswith(b"{") or answer.status == 404, (method, path, answer.body[:200])


@pytest.mark.parametrize("action", ["resubmit", "compensate", "cancel"])
def test_a_reason_that_is_not_unicode_text_is_400_and_changes_nothing(ops, action):
    """FINDING (latent). JSON may escape a lone surrogate (``"\\udc80"``); ``json.loads`` returns it in a
    ``str``, and operations/web.py ``parse_action_body`` takes any non-empty string: the action is applied
    (200) and the reason written to the record (history, and ``lastError`` for compensate and cancel).
    The app's contracts cannot carry such text: ``OperatorAlert`` refuses it (ValidationError) and
    ``StatusUpdate.to_json`` cannot encode it (PydanticSerializationError), and neither is a ``SendError``,
    which is all supervisor/owed.py ``send_owed`` catches when it sends the alert and status a failed
    order owes, with ``lastError`` in both. Expected: 400, as for any body that is not UTF-8 JSON."""
    assert ops.ctx is not None
    before = ops.error(f"o-sur-{action}")
    answer = ops.request("POST", f"/api/ops/orders/o-sur-{action}/{action}", b'{"reason": "card \\udc80 blocked"}')
    assert answer.status == 400, (answer.status, answer.body[:300])
    assert ops.ctx.states.get(f"o-sur-{action}") == before


@pytest.mark.parametrize("order_id", ["o1%0A", "o1%0D%0A"])
def test_an_order_id_with_a_final_line_break_is_400_malformed_not_404_echoing_it(ops, order_id):
    """Found by the red team on 3737d51: ``is_valid_order_id`` used ``re.match``, whose ``$`` also matches
    before a final newline, so ``o1\\n`` passed and was looked up (404, ``no order o1\\n``, the line
    break echoed); the contracts' pydantic pattern refuses it. Now ``fullmatch``: 400."""
    for method, path in (("GET", ""), ("POST", "/resubmit")):
        answer = ops.request(method, f"/api/ops/orders/{order_id}{path}", {"reason": "x"})
        assert answer.status == 400, (method, path, answer.status, answer.body[:200])
        assert b"\\n" not in answer.body and b"\n" not in answer.body.strip(), answer.body[:200]
