"""Red team: ops API requests mutated as a class (bodies, query parameters, content types) through the real
runtime (``OpsHarness``). The rule: never a 5xx for a client's bad request; a 4xx carries a JSON error; a refused
action changes nothing on the record."""

from __future__ import annotations

import json
import random
from typing import Any
from urllib.parse import quote

import pytest

from tests.submission.test_redteam_generative_intake import TEXTS, WRONG_TYPES

pytestmark = pytest.mark.cosmos

REASONS: list[Any] = [*WRONG_TYPES, *TEXTS, "x" * 500, "x" * 501, "e\u0301" * 250, "\U0001f600" * 500]


def _bodies(review: bool) -> list[bytes]:
    bodies: list[bytes] = [
        b"",
        b"null",
        b"[]",
        b'"reason"',
        b"{",
        b"\xff\xfe",
        b"\xef\xbb\xbf" + json.dumps({"reason": "x"}).encode(),  # a BOM
        b'{"reason": NaN}',
        b'{"reason": "x", "reason": 1}',
        b'{"reason": 1, "reason": "x"}',
        b'{"reason": "x", "n": ' + b"9" * 5000 + b"}",
        b"[" * 4000 + b"]" * 4000,
        b'{"reason": ' + b"[" * 2000 + b"]" * 2000 + b"}",
        b"{" + b'"a":{' * 1000 + b"}" * 1001,
        json.dumps({"reason": "x" * 5000}).encode(),
    ]
    for reason in REASONS:
        fields: dict[str, Any] = {"reason": reason}
        if review:
            fields.update(action="fail", reviewId="r-1")
        bodies.append(json.dumps(fields).encode())
    if review:
        for field, values in (
            ("action", [*WRONG_TYPES, "FAIL", "fail ", "retry", "compensate", "\udc80"]),
            ("reviewId", [*WRONG_TYPES, *TEXTS, "r" * 10_000]),
        ):
            for value in values:
                bodies.append(json.dumps({"reason": "x", "action": "fail", "reviewId": "r-1", field: value}).encode())
    return bodies


def _state(ops: Any, order_id: str) -> Any:
    assert ops.ctx is not None
    return ops.ctx.states.get(order_id)


def test_hostile_action_bodies_are_never_5xx_and_a_refusal_changes_nothing(ops):
    problems: list[str] = []
    for action, make in (("resubmit", ops.error), ("cancel", ops.processing), ("compensate", ops.error)):
        for n, body in enumerate(_bodies(review=False)):
            order_id = f"o-{action}-{n}"
            make(order_id)
            before = _state(ops, order_id)
            answer = ops.request("POST", f"/api/ops/orders/{order_id}/{action}", body)
            if answer.status >= 500 or (answer.status >= 400 and not answer.body.startswith(b"{")):
                problems.append(f"{action} #{n} {body[:40]!r}: {answer.status} {answer.body[:120]!r}")
            elif answer.status >= 400 and _state(ops, order_id) != before:
                problems.append(f"{action} #{n} {body[:40]!r}: {answer.status} but the record changed")
    for n, body in enumerate(_bodies(review=True)):
        order_id = f"o-review-{n}"
        ops.awaiting_review(order_id)
        before = _state(ops, order_id)
        answer = ops.request("POST", f"/api/ops/orders/{order_id}/review", body)
        if answer.status >= 500 or (answer.status >= 400 and not answer.body.startswith(b"{")):
            problems.append(f"review #{n} {body[:60]!r}: {answer.status} {answer.body[:120]!r}")
        elif answer.status >= 400 and _state(ops, order_id) != before:
            problems.append(f"review #{n}: {answer.status} but the record changed")
    assert not problems, "\n".join(problems)


CONTENT_TYPES = ["", "text/plain", "application/json; charset=latin-1", "APPLICATION/JSON", "application/json\x00"]
QUERIES = [
    "state=",
    "state=error",
    "state=Error%00",
    "state=%FF",
    "state=" + "E" * 5000,
    "pageSize=0",
    "pageSize=-1",
    "pageSize=1.5",
    "pageSize=1e3",
    "pageSize=%EF%BC%91",  # FULLWIDTH DIGIT ONE
    "pageSize= 1",
    "pageSize=01",
    "pageSize=1&pageSize=2",
    "continuation=",
    "continuation=any:",
    "continuation=any%3A%FF",
    "continuation=Error:x&state=Error",
    "continuation=any:" + quote(json.dumps({"token": "-RID:~x#RT:1#TRC:1#ISV:2#IEO:65567#QCF:8"})),
    "continuation=any:" + quote("\udc80", errors="surrogatepass"),
    "continuation=any:%00",
    "continuation=any:" + "A" * 2000,
    "state=Error&state=Pending",
]


def test_hostile_list_queries_and_content_types_are_never_5xx(ops):
    for number in range(3):
        ops.error(f"o-q-{number}")
    rng = random.Random(12042026)
    queries = [*QUERIES, *("&".join(rng.sample(QUERIES, k=2)) for _ in range(20))]
    problems = []
    for query in queries:
        answer = ops.request("GET", f"/api/ops/orders?{query}")
        if answer.status >= 500 or (answer.status >= 400 and not answer.body.startswith(b"{")):
            problems.append(f"GET ?{query[:60]}: {answer.status} {answer.body[:160]!r}")
    for n, content_type in enumerate(CONTENT_TYPES):
        before = ops.error(f"o-ct-{n}")
        answer = ops.request(
            "POST", f"/api/ops/orders/o-ct-{n}/resubmit", {"reason": "x"}, {"Content-Type": content_type}
        )
        if answer.status >= 500:
            problems.append(f"Content-Type {content_type!r}: {answer.status} {answer.body[:160]!r}")
        if answer.status >= 400 and _state(ops, f"o-ct-{n}") != before:
            problems.append(f"Content-Type {content_type!r}: {answer.status} but the record changed")
    assert not problems, "\n".join(problems)
