"""Red team: query parameters on the reads that take none, as the Functions host hands them over (names compared
case-insensitively, the first spelling kept: ``localrun/worker/http.py`` ``host_query``). The summary and the order
page read no query, and ignored one: ``GET ops/summary?state=Error`` or ``GET ops/orders/o-1?attempt=2`` answered
200 with everything, as if the filter had been applied. They refuse it as the list refuses a name it does not read
(``test_list_query_names.py``). The console's page and files keep taking any query: they are the same files
whatever it says (nothing is filtered), and a browser or a link may add one (a ``?v=`` cache buster)."""

from __future__ import annotations

import pytest

from tests.operations.harness import OpsHarness

pytestmark = pytest.mark.cosmos


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/api/ops/summary?state=Error", "state"),
        ("/api/ops/summary?State=Error", "State"),
        ("/api/ops/summary?pageSize=5", "pageSize"),
        ("/api/ops/orders/o-read?attempt=2", "attempt"),
        ("/api/ops/orders/o-read?showHistory=false", "showHistory"),
        ("/api/ops/orders/o-read?STATE=Error", "STATE"),
    ],
)
def test_a_query_parameter_on_a_read_that_takes_none_is_400_naming_it(ops: OpsHarness, path: str, name: str) -> None:
    """FINDING: 200, the whole summary (every state's counts and lists), the whole order page (every attempt)."""
    ops.error("o-read")
    status, body = ops.get(path)
    assert status == 400, (status, body)
    assert body["error"].startswith(f"unknown query parameter {name!r}:"), body
    assert "takes no query parameter" in body["error"], body


def test_the_summary_and_the_order_page_without_a_query_are_served(ops: OpsHarness) -> None:
    ops.error("o-read")
    status, summary = ops.get("/api/ops/summary")
    assert status == 200 and summary["counts"]["Error"] == 1, (status, summary)
    status, page = ops.get("/api/ops/orders/o-read")
    assert status == 200 and page["orderId"] == "o-read", (status, page)


@pytest.mark.parametrize("path", ["/api/ops/console?v=3", "/api/ops/console/console.js?v=3&x=1"])
def test_the_console_takes_any_query_a_browser_adds(ops: OpsHarness, path: str) -> None:
    answer = ops.request("GET", path)
    assert answer.status == 200, (answer.status, answer.body[:200])
    assert answer.headers["Content-Type"].startswith(("text/html", "text/javascript")), answer.headers
