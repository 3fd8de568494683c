"""Red team: a remote service whose HTTP answer is malformed (the service, a proxy or the network mangles it).

``HttpRemoteService.call`` turned into ``RemoteError`` only ``HTTPError``, ``TimeoutError``, ``URLError`` and
``ConnectionError``; ``http.client`` reports a malformed answer with ``http.client.HTTPException``
(``BadStatusLine``, ``LineTooLong``, ``IncompleteRead``, "got more than 100 headers"), which is none of them. It
escaped the agent's retry loop (``order_agents.runtime.run_agent_request``) and its trigger: the host abandoned
the request, every redelivery called the service again, and Service Bus dead-lettered the request
``MaxDeliveryCountExceeded`` with no reason, no reply sent. The call was sent: whatever answer came back, its
outcome is unknown, so it is a transient ``RemoteError`` (as a timeout is, never a refusal: see the module)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from adapters.remote.http_service import HttpRemoteService
from adapters.remote.interface import RemoteCall, RemoteError

CALL = RemoteCall("payment", "charge", "order-7", "order-7:charge-payment", 3, {"amountCents": 700})

ANSWERS = {
    "a status line that is not HTTP": b"garbage\r\n\r\n",
    "a status code that is not a number": b"HTTP/1.1 abc OK\r\n\r\n",
    "a header line over 64 KiB": b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n{}",
    "101 headers": b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-H%d: 1\r\n" % n for n in range(101)) + b"\r\n{}",
    "a body shorter than its Content-Length": b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}",
    "an error status whose body is cut short": b"HTTP/1.1 503 Busy\r\nContent-Length: 100\r\n\r\n{}",
    "a chunk size that is not hex": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    # rt-hostile: before, the last chargeId was kept (json.loads), the one a refund would name a guess
    "JSON naming a field twice": b'HTTP/1.1 200 OK\r\nContent-Length: 36\r\n\r\n{"chargeId": "a", "chargeId": "b"}\r\n',
}


@pytest.fixture
def raw_server() -> Iterator[tuple[dict[str, bytes], str]]:
    """A TCP server that reads one request and answers the bytes in ``answer["raw"]``, then closes."""
    answer: dict[str, bytes] = {"raw": b""}
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                request = b""
                try:
                    while b"\r\n\r\n" not in request:
                        request += conn.recv(65536)
                    head, _, body = request.partition(b"\r\n\r\n")
                    length = next(
                        (
                            int(line.split(b":")[1])
                            for line in head.split(b"\r\n")
                            if line.lower().startswith(b"content-length")
                        ),
                        0,
                    )
                    while len(body) < length:
                        body += conn.recv(65536)
                    conn.sendall(answer["raw"])
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield answer, f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        listener.close()


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_a_malformed_http_answer_is_a_transient_remote_error(raw_server, case):
    answer, url = raw_server
    answer["raw"] = ANSWERS[case]
    with pytest.raises(RemoteError) as failed:
        HttpRemoteService(url, timeout_seconds=2).call(CALL)
    assert failed.value.transient is True
    if "twice" in case:
        assert "'chargeId' appears more than once" in str(failed.value)


# JSON the app cannot carry (``contracts.parsing.read_outside_json``): a lone surrogate made the agent's reply
# unsendable (``PydanticSerializationError``), so the request failed its trigger on every delivery, the service
# called again each time (tests/runtime/test_redteam_lone_surrogate_values.py).
LONE_SURROGATE_BODY = b'{"chargeId": "ch-\\udc80"}'
RUNTIME_ANSWERS = {
    "a status line that is not HTTP": ANSWERS["a status line that is not HTTP"],
    "JSON holding a lone surrogate": b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
    % (len(LONE_SURROGATE_BODY), LONE_SURROGATE_BODY),
}


@pytest.mark.cosmos
@pytest.mark.parametrize("case", sorted(RUNTIME_ANSWERS))
def test_an_agent_request_whose_service_answers_garbage_gets_a_reply_not_max_delivery_count(
    raw_server, cosmos_db, case
):
    """The same through the real runtime: the request is settled on its first delivery, with a transient failure
    reply to its orchestration, not abandoned on every delivery until ``MaxDeliveryCountExceeded``."""
    import json
    from datetime import timedelta

    from contracts.names import AGENT_REPLIES_QUEUE
    from domain.workflow import agent, request_queues
    from tests.runtime.harness import RuntimeHarness

    answer, url = raw_server
    answer["raw"] = RUNTIME_ANSWERS[case]
    harness = RuntimeHarness(cosmos_db=cosmos_db)
    try:
        harness.change_context(remote={agent("payment").service: HttpRemoteService(url, timeout_seconds=2)})
        queue = request_queues()["payment"]
        request = {
            "type": "AgentRequest",
            "schemaVersion": 1,
            "requestId": "ord-g1:1:charge-payment:payment",
            "instanceId": "ord-g1:1",
            "orderId": "ord-g1",
            "step": "charge-payment",
            "action": "do",
            "attempt": 1,
            "deadline": "2026-05-01T09:05:00Z",
            "idempotencyKey": "ord-g1:charge-payment",
            "payload": {},
        }
        harness.send(queue, json.dumps(request), "garbage-answer")

        def gone() -> bool:
            dead = any(d.message_id == "garbage-answer" for d in harness.broker.dead_letters(queue))
            return dead or harness.broker.counters(queue).completed > 0

        harness.host.run_until(harness.clock.now() + timedelta(minutes=15), stop=gone)
        dead = [(d.reason, d.delivery_count) for d in harness.broker.dead_letters(queue)]
        assert dead == [] and harness.broker.counters(queue).completed == 1, dead
        assert harness.broker.counters(AGENT_REPLIES_QUEUE).sent == 1  # the transient failure's reply
        assert harness.broker.dead_letters(AGENT_REPLIES_QUEUE) == []  # which the relay reads
    finally:
        harness.close()


@pytest.mark.parametrize("key", ["k\r\nX-Fencing-Token: 999", "k\n", "k\U0001f600", "k\x00"])
def test_a_header_no_request_can_carry_is_a_refusal_before_anything_is_sent(raw_server, key):
    """``http.client`` raised ``ValueError``/``UnicodeEncodeError`` for these while building the request (a NUL it
    sent as it is). The contract keeps such keys out of requests from the queue (``AgentRequest``); a caller that
    builds a ``RemoteCall`` itself gets a refusal: nothing was sent."""
    from dataclasses import replace

    _, url = raw_server
    with pytest.raises(RemoteError) as failed:
        HttpRemoteService(url, timeout_seconds=2).call(replace(CALL, idempotency_key=key))
    assert failed.value.transient is False


def test_an_answer_larger_than_a_reply_can_carry_is_a_transient_remote_error_read_no_further(raw_server):
    """An answer over ``MAX_BODY_BYTES`` could never reach the orchestration (the reply that carries it is refused
    at that size), and the whole body was read into memory whatever its size. It is refused where it enters, as an
    answer the app cannot carry (transient: the call acted), and reading stops past the limit."""
    from contracts.parsing import MAX_BODY_BYTES

    answer, url = raw_server
    body = b'{"receipt": "' + b"x" * (MAX_BODY_BYTES + 10) + b'"}'
    answer["raw"] = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    with pytest.raises(RemoteError) as failed:
        HttpRemoteService(url, timeout_seconds=2).call(CALL)
    assert failed.value.transient is True
    assert str(MAX_BODY_BYTES) in str(failed.value)


def test_an_answer_just_within_the_limit_is_read(raw_server):
    from contracts.parsing import MAX_BODY_BYTES

    answer, url = raw_server
    filler = MAX_BODY_BYTES - len(b'{"receipt": ""}')
    body = b'{"receipt": "' + b"x" * filler + b'"}'
    assert len(body) == MAX_BODY_BYTES
    answer["raw"] = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    assert HttpRemoteService(url, timeout_seconds=2).call(CALL) == {"receipt": "x" * filler}
