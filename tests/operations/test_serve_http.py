"""``python -m localrun serve``'s HTTP server (``localrun.serve``) in front of the runner's host, over a
real socket: it answers only requests addressed to it (a page that rebinds its own DNS name to 127.0.0.1
sends its requests with its own ``Host``: DNS rebinding), and a request it cannot read is 400, not an
exception in the server's thread."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator

import pytest

from domain.states import ProcessState
from localrun.serve import _Server
from tests.operations.harness import OpsHarness

pytestmark = pytest.mark.cosmos


@pytest.fixture
def served(ops: OpsHarness) -> Iterator[tuple[OpsHarness, int]]:
    """The serve HTTP server on a free port over ``ops``'s host; the test pumps the host (``_answer``)."""
    server = _Server(0, ops.host, threading.Event())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield ops, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


Headers = dict[str, str] | list[tuple[str, str]]  # a list: a header may be sent twice


def _answer(ops: OpsHarness, port: int, method: str, path: str, headers: Headers, body: bytes = b"") -> int:
    """Sends the request from a thread while this one runs the host, as ``paced_drive`` does."""
    result: dict[str, int] = {}

    def send() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items() if isinstance(headers, dict) else headers:
            connection.putheader(name, value)
        connection.endheaders(body or None)
        result["status"] = connection.getresponse().status
        connection.close()

    client = threading.Thread(target=send)
    client.start()
    while client.is_alive():
        ops.host.pump()
        if not ops.scheduler.run_one():
            client.join(timeout=0.01)
    return result["status"]


def _still_error(ops: OpsHarness, order_id: str) -> None:
    assert ops.ctx is not None
    record = ops.ctx.states.get(order_id)
    assert record is not None and record.process_state is ProcessState.ERROR, "a refused request acted"


def test_a_request_addressed_to_another_host_is_refused(served: tuple[OpsHarness, int]) -> None:
    """Found by the red team (session 32) on 36c310f: the server answered whatever ``Host`` a request
    named. A page on ``http://rebound.example:PORT`` whose name then resolves to 127.0.0.1 reads the
    summary and, its own origin being the one ``Host`` names, passes the same-origin check of an action,
    which runs as the developer's principal (both roles)."""
    ops, port = served
    ops.error("o-rebind")
    for host in (f"rebound.example:{port}", "rebound.example", f"127.0.0.1:{port + 1}", ""):
        status = _answer(ops, port, "GET", "/api/ops/summary", {"Host": host} if host else {})
        assert status == 421, (host, status)
    rebound = {"Host": f"rebound.example:{port}", "Origin": f"http://rebound.example:{port}"}
    body = b'{"reason": "from another site"}'
    headers = {**rebound, "Content-Type": "application/json", "Content-Length": str(len(body))}
    assert _answer(ops, port, "POST", "/api/ops/orders/o-rebind/resubmit", headers, body) == 421
    _still_error(ops, "o-rebind")
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
        assert _answer(ops, port, "GET", "/api/ops/summary", {"Host": host}) == 200, host


@pytest.mark.parametrize(
    ("length", "status"),
    [("abc", 400), ("1e3", 400), ("0x10", 400), ("9" * 5000, 413), (str(64 * 1024 + 1), 413)],
)
def test_a_content_length_that_is_not_a_number_is_400_and_one_too_large_413(
    served: tuple[OpsHarness, int], length: str, status: int
) -> None:
    """Found by the red team (session 32) on 36c310f: ``int(Content-Length)`` unguarded raised in the
    server's thread (a traceback on stderr, the connection dropped, no answer); ``int`` also refuses
    more than 4,300 digits."""
    ops, port = served
    ops.error("o-length")
    headers = {"Host": f"127.0.0.1:{port}", "Content-Type": "application/json", "Content-Length": length}
    assert _answer(ops, port, "POST", "/api/ops/orders/o-length/resubmit", headers) == status
    _still_error(ops, "o-length")


@pytest.mark.parametrize(
    "repeated",
    [
        [("Content-Type", "text/plain"), ("Content-Type", "application/json")],
        [("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Site", "same-origin")],
        [("Origin", "http://evil.example"), ("origin", "http://127.0.0.1:{port}")],
    ],
    ids=["content-type", "sec-fetch-site", "origin"],
)
def test_a_header_sent_twice_reaches_the_app_as_the_host_joins_it(
    served: tuple[OpsHarness, int], repeated: list[tuple[str, str]]
) -> None:
    """Red team (rt-hostile): the Functions host hands the worker a header sent twice as its values joined by commas
    (``text/plain,application/json``), which the API refuses. Before, ``serve`` kept the last one
    (``dict(self.headers.items())``): locally an action whose first ``Content-Type``, ``Sec-Fetch-Site`` or
    ``Origin`` the app would refuse on Azure was taken."""
    ops, port = served
    ops.error("o-twice")
    body = b'{"reason": "sent twice"}'
    headers = [("Host", f"127.0.0.1:{port}"), ("Content-Length", str(len(body)))]
    headers += [(name, value.format(port=port)) for name, value in repeated]
    if not any(name.lower() == "content-type" for name, _ in repeated):
        headers.append(("Content-Type", "application/json"))
    assert _answer(ops, port, "POST", "/api/ops/orders/o-twice/resubmit", headers, body) in (403, 415)
    _still_error(ops, "o-twice")
