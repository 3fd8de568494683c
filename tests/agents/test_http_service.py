"""The HTTP remote service against a real local HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from adapters.remote.http_service import HttpRemoteService
from adapters.remote.interface import RemoteCall, RemoteError


class Endpoint:
    """What the fake remote endpoint answers, and what it received."""

    def __init__(self) -> None:
        self.status = 200
        self.body: bytes = b'{"chargeId": "ch-9", "amountCents": 700}'
        self.delay_s = 0.0
        self.received: list[dict[str, Any]] = []


@pytest.fixture
def endpoint() -> Iterator[tuple[Endpoint, str]]:
    state = Endpoint()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            state.received.append(
                {"path": self.path, "headers": dict(self.headers), "body": json.loads(self.rfile.read(length))}
            )
            time.sleep(state.delay_s)
            self.send_response(state.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(state.body)))
            self.end_headers()
            self.wfile.write(state.body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # the timeout test's client hangs up before the slow answer: not an error here

    server = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/api/"
    finally:
        server.shutdown()
        server.server_close()


CALL = RemoteCall("payment", "charge", "order-7", "order-7:charge-payment", 3, {"amountCents": 700})


def test_a_call_posts_json_with_the_idempotency_key_and_fencing_token(endpoint):
    state, url = endpoint
    result = HttpRemoteService(url).call(CALL)
    assert result == {"chargeId": "ch-9", "amountCents": 700}
    [received] = state.received
    assert received["path"] == "/api/charge"
    assert received["headers"]["Idempotency-Key"] == "order-7:charge-payment"
    assert received["headers"]["X-Fencing-Token"] == "3"
    assert received["headers"]["Content-Type"] == "application/json"
    assert received["body"] == {"service": "payment", "orderId": "order-7", "payload": {"amountCents": 700}}


def test_an_undo_names_the_forward_key_it_fences_and_a_refused_forward_call_is_permanent(endpoint):
    state, url = endpoint
    undo = RemoteCall("payment", "refund", "order-7", "order-7:charge-payment:undo", 1, {}, "order-7:charge-payment")
    HttpRemoteService(url).call(undo)
    assert state.received[0]["headers"]["X-Fences-Idempotency-Key"] == "order-7:charge-payment"
    HttpRemoteService(url).call(CALL)
    assert "X-Fences-Idempotency-Key" not in state.received[1]["headers"]
    state.status, state.body = 409, b'{"error": "idempotency key fenced by its undo"}'
    with pytest.raises(RemoteError) as refused:
        HttpRemoteService(url).call(CALL)
    assert refused.value.transient is False


@pytest.mark.parametrize(("status", "is_transient"), [(429, True), (500, True), (503, True), (408, True)])
def test_throttling_server_errors_and_request_timeouts_are_transient(endpoint, status, is_transient):
    state, url = endpoint
    state.status, state.body = status, b'{"error": "try later"}'
    with pytest.raises(RemoteError) as failed:
        HttpRemoteService(url).call(CALL)
    assert failed.value.transient is is_transient
    assert (failed.value.timed_out, failed.value.in_progress) == (False, False)  # an answer: a full failure
    assert f"HTTP {status}" in str(failed.value)
    assert "try later" in str(failed.value)


@pytest.mark.parametrize("status", [400, 402, 404, 409, 422])
def test_other_client_errors_are_permanent(endpoint, status):
    state, url = endpoint
    state.status, state.body = status, b'{"error": "no"}'
    with pytest.raises(RemoteError) as failed:
        HttpRemoteService(url).call(CALL)
    assert failed.value.transient is False


def test_a_timeout_is_transient(endpoint):
    state, url = endpoint
    state.delay_s = 0.5
    with pytest.raises(RemoteError) as failed:
        HttpRemoteService(url, timeout_seconds=0.1).call(CALL)
    assert failed.value.transient is True
    assert failed.value.timed_out is True  # no answer: half a failure to the circuit (docs/supervisor.md)


def test_an_unreachable_endpoint_is_transient():
    with socket.socket() as probe:  # bound, not listening: refused, and no other process can listen there meanwhile
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        with pytest.raises(RemoteError) as failed:
            HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=1).call(CALL)
    assert failed.value.transient is True
    assert failed.value.timed_out is False  # refused: a full failure


@pytest.mark.parametrize("body", [b"<html>ok</html>", b"[1, 2]"])
def test_a_success_whose_body_is_not_a_json_object_is_an_unknown_outcome_not_a_refusal(endpoint, body):
    """The provider acted (2xx): transient, as a timeout, so the step never goes to the fallback provider
    under the same key (a second charge)."""
    state, url = endpoint
    state.body = body
    with pytest.raises(RemoteError) as failed:
        HttpRemoteService(url).call(CALL)
    assert failed.value.transient is True


def test_only_http_urls_are_accepted():
    with pytest.raises(ValueError, match="http"):
        HttpRemoteService("ftp://example.com")


def test_an_answer_with_integers_up_to_2_to_the_53_is_read_exactly(endpoint):
    state, url = endpoint
    state.body = b'{"chargeId": "ch-9", "authorization": 9007199254740991, "neg": -9007199254740991}'
    result = HttpRemoteService(url).call(CALL)
    assert result["authorization"] == 2**53 - 1 and result["neg"] == -(2**53 - 1)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"chargeId": "ch-9", "n": ' + b"9" * 4400 + b"}", "'n'"),
        (b'{"chargeId": "ch-9", "authorization": 18446744073709551615}', "'authorization'"),
        (b'{"chargeId": "ch-9", "a": [{"n": -9007199254740992}]}', "'a.0.n'"),
        (b'{"chargeId": "ch-9", "a": [1, 1e999]}', "'a.1'"),
        (b'{"chargeId": "ch-9", "riskScore": NaN}', "NaN"),
        (b'{"chargeId": "ch-9", "limit": -Infinity}', "Infinity"),
        (b'{"chargeId": "ch-9", "deep": ' + b"[" * 40 + b"]" * 40 + b"}", "levels deep"),
    ],
    ids=["4,400 digits", "uint64", "-(2**53)", "1e999", "NaN", "-Infinity", "nested 41 deep"],
)
def test_an_answer_the_app_cannot_carry_is_refused_where_it_enters_with_the_reason(endpoint, body, words):
    """Refused here with the reason, not accepted and then lost (dead-lettered by the relay, rounded to
    null in a reply) after the call took effect; an unknown outcome (transient), never a refusal."""
    state, url = endpoint
    state.body = body
    with pytest.raises(RemoteError, match=r"cannot be carried|cannot carry") as caught:
        HttpRemoteService(url).call(CALL)
    assert caught.value.transient is True and words in str(caught.value), caught.value
