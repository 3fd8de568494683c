"""Red team: the list's query parameters as the Functions host hands them over. The host reads the query with names
compared case-insensitively (ASP.NET Core's ``request.Query``) and passes the worker the first spelling given
(``localrun/worker/http.py`` ``host_query``); ``req.params`` is a plain mapping. A name the list does not read was
ignored: ``?State=Error`` or ``?status=Error`` served every order, ``?Continuation=<token>`` the first page again."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from tests.operations.harness import OpsHarness

pytestmark = pytest.mark.cosmos


def _ids(body: dict[str, Any]) -> list[str]:
    return [o["orderId"] for o in body["orders"]]


def test_the_lists_parameters_are_read_whatever_the_case_of_their_names(ops: OpsHarness) -> None:
    """FINDING. ``?State=Error`` listed the Pending order too (the filter ignored): a script cancelling what it
    takes for the failed orders would cancel orders in flight. ``?PageSize=1`` served 25, and a script paging with
    ``?Continuation=`` got the first page again, without end."""
    ops.error("o-err-1")
    ops.error("o-err-2")
    ops.pending("o-pending")
    status, body = ops.get("/api/ops/orders?State=Error")
    assert status == 200, body
    assert sorted(_ids(body)) == ["o-err-1", "o-err-2"]
    status, first = ops.get("/api/ops/orders?STATE=Error&PAGESIZE=1")
    assert status == 200, first
    assert len(first["orders"]) == 1 and first["continuation"], first
    status, second = ops.get(f"/api/ops/orders?state=Error&pagesize=1&Continuation={quote(first['continuation'])}")
    assert status == 200, second
    assert sorted(_ids(first) + _ids(second)) == ["o-err-1", "o-err-2"]


@pytest.mark.parametrize("query", ["status=Error", "processState=Error", "state=Error&orderId=o-err-1", "page=2"])
def test_a_parameter_the_list_does_not_read_is_400_naming_the_ones_it_does(ops: OpsHarness, query: str) -> None:
    """FINDING. A filter the list does not know was ignored: ``?status=Error`` served every order, 200."""
    ops.error("o-err-1")
    ops.pending("o-pending")
    status, body = ops.get(f"/api/ops/orders?{query}")
    assert status == 400, (status, body)
    assert "unknown query parameter" in body["error"] and "pageSize" in body["error"], body
