"""The HTTP client gives a call ``timeout_seconds`` in all, as ``settings.REMOTE_CALL_TIMEOUT`` says ("the longest
one call to a remote service takes before it is given up") and ``settings.agent_request_longest`` counts (an
agent's request within the lock renewal). ``urllib``'s ``timeout`` is a socket timeout: it bounds each wait
(the connection, each send, each receive), not the call. An answer that trickles in, a byte now and then (an
overloaded provider, a proxy, a slow link), held the agent for as long as it kept coming: here 2 s against a
0.5 s timeout, in the real setting minutes against 10 s, past the step deadline and the message lock."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from adapters.remote.http_service import HttpRemoteService
from adapters.remote.interface import RemoteCall, RemoteError

CALL = RemoteCall("payment", "charge", "order-7", "order-7:charge-payment", 3, {"amountCents": 700})
BODY = b'{"chargeId": "ch-9", "amountCents": 700}'
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(BODY)
DRIP_S = 0.05  # a byte every 50 ms: each wait far under the client's timeout


def _serve(answer: list[tuple[bytes, bool]]) -> Iterator[str]:
    """A server that reads the request, then sends each part of ``answer``, byte by byte when its flag says so."""
    listener = socket.create_server(("127.0.0.1", 0))

    def run() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.settimeout(5)
            received = b""
            while b"\r\n\r\n" not in received:
                received += connection.recv(4096)
            head, _, body = received.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
            )
            while len(body) < length:  # the whole request: a socket closed with data unread is reset
                body += connection.recv(4096)
            try:
                for part, drip in answer:
                    for chunk in [part[i : i + 1] for i in range(len(part))] if drip else [part]:
                        connection.sendall(chunk)
                        if drip:
                            time.sleep(DRIP_S)
            except OSError:
                pass  # the client gave up and hung up

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/api/"
    finally:
        listener.close()
        thread.join(timeout=10)


@pytest.fixture
def trickled_body() -> Iterator[str]:
    yield from _serve([(HEAD + b"\r\n", False), (BODY, True)])


@pytest.fixture
def trickled_headers() -> Iterator[str]:
    yield from _serve([(HEAD + b"X-Padding: " + b"x" * 40 + b"\r\n\r\n", True), (BODY, False)])


@pytest.mark.parametrize("server", ["trickled_body", "trickled_headers"])
def test_an_answer_that_trickles_in_is_given_up_at_the_call_timeout(server: str, request: pytest.FixtureRequest):
    url = request.getfixturevalue(server)
    began = time.monotonic()
    with pytest.raises(RemoteError, match="timed out") as failed:
        HttpRemoteService(url, timeout_seconds=0.5).call(CALL)
    took = time.monotonic() - began
    assert failed.value.transient is True  # it may have acted: an unknown outcome, never a refusal
    assert took < 1.0, f"the call took {took:.2f}s against a 0.5s timeout"


def test_an_answer_that_trickles_in_within_the_timeout_is_read(trickled_body: str):
    assert HttpRemoteService(trickled_body, timeout_seconds=10).call(CALL) == {"chargeId": "ch-9", "amountCents": 700}
