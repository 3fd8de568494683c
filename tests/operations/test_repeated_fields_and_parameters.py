"""Red team (rt-hostile): the ops API given a name twice.

- A body naming a field twice (``{"action": "retry", "action": "compensate"}``): 400 naming it, nothing written.
  Before, ``json.loads`` kept the last value and the action was taken on it: a proxy or audit log that keeps the
  first would record another answer than the one the app acted on.
- A query parameter given twice (``?pageSize=5&pageSize=7``): the Functions host hands the function the values
  joined by commas (``"5,7"``: ASP.NET Core's ``StringValues.ToString``), which the API refuses with a 400 naming
  the parameter. Before, the runner's host kept the last value (``dict(parse_qsl(...))``), so the local API answered
  200 where Azure's answers 400 (``localrun/worker/http.py`` ``host_query``)."""

from __future__ import annotations

import pytest

from localrun.worker.http import host_query

pytestmark = pytest.mark.cosmos


@pytest.mark.parametrize(
    ("action", "body"),
    [
        ("resubmit", b'{"reason": "first", "reason": "second"}'),
        ("cancel", b'{"reason": "customer asked", "reason": "customer asked"}'),
        ("compensate", b'{"reason": "x", "undoneByHand": [], "undoneByHand": [1]}'),
    ],
)
def test_an_action_body_naming_a_field_twice_is_400_and_changes_nothing(ops, action, body):
    assert ops.ctx is not None
    order_id = f"o-twice-{action}"
    before = ops.error(order_id)
    answer = ops.request("POST", f"/api/ops/orders/{order_id}/{action}", body)
    assert answer.status == 400, (answer.status, answer.body[:300])
    assert b"appears more than once" in answer.body
    assert ops.ctx.states.get(order_id) == before


def test_a_review_answer_naming_its_action_twice_is_400_and_notes_nothing(ops):
    assert ops.ctx is not None
    paused = ops.awaiting_review("o-twice-review")
    pending, _ = ops.waiting_review("o-twice-review")
    body = (
        b'{"reviewId": "' + pending.review_id.encode() + b'", "reason": "r", "action": "retry", "action": "compensate"}'
    )
    answer = ops.request("POST", "/api/ops/orders/o-twice-review/review", body)
    assert answer.status == 400, (answer.status, answer.body[:300])
    assert b"'action' appears more than once" in answer.body
    assert ops.ctx.states.get("o-twice-review") == paused


@pytest.mark.parametrize(
    "query",
    [
        "pageSize=5&pageSize=7",
        "pageSize=1&PageSize=1",  # one name to the host, whatever its case: "1,1"
        "state=Error&state=Error",
        "state=Error&continuation=Error:x&continuation=Error:y",
    ],
)
def test_a_query_parameter_given_twice_is_400_as_on_azure(ops, query):
    ops.error("o-q-1")
    status, body = ops.get(f"/api/ops/orders?{query}")
    assert status == 400, (status, body)
    assert isinstance(body, dict) and body.get("error"), body


def test_the_host_joins_a_repeated_parameter_and_leaves_out_an_empty_one():
    assert host_query("http://h/api/x?a=1&b=&A=2&c=3&c=&d") == {"a": "1,2", "c": "3"}
    assert host_query("http://h/api/x?pageSize=&continuation=") == {}
    assert host_query("http://h/api/x?state=Error") == {"state": "Error"}


def test_an_empty_parameter_reads_as_absent(ops):
    ops.error("o-q-2")
    status, body = ops.get("/api/ops/orders?pageSize=&state=&continuation=")
    assert status == 200, (status, body)
    assert [o["orderId"] for o in body["orders"]] == ["o-q-2"]
