"""Red team of the remote services' connection pool (``adapters/remote/http_service.py``): answers whose end the
client and the server do not agree on. A kept-alive connection is safe only if the client reads exactly the answer
the server sent; where they disagree, what the server sends next waits on the connection, and the next call that
takes it reads it as its own answer: a charge confirmed for another order's key, the worst a pool can do.

- An interim answer (``1xx``: 102 Processing, 103 Early Hints, RFC 9110 15.2) comes before the final one.
  ``http.client`` skips only 100 Continue and took a 102 or 103 for the final answer: the call succeeded with an
  empty result while the provider was still charging, and the connection went back to the pool, where the next
  call (another key) read the first call's ``200`` as its own. (Before the pool, ``urllib`` refused a 1xx as an
  HTTP error: a refusal, the step sent to its fallback provider while the first may charge.) An interim answer is
  skipped; the final one is the call's; a ``101 Switching Protocols`` to a request that asked for none is malformed.
- A 204 or 304 has no body whatever its headers say (RFC 9112 6.3); one declaring a body, two ``Content-Length``
  that differ (RFC 9112 6.3: an unrecoverable error, "the user agent MUST close the connection"), a
  ``Transfer-Encoding`` ``http.client`` cannot read (it then framed the answer by ``Content-Length``), or both a
  ``Transfer-Encoding`` and a ``Content-Length``: the connection is closed, never reused."""

from __future__ import annotations

import json
import os
import resource
import socket
import threading

import pytest

from adapters.remote.http_service import HttpRemoteService
from adapters.remote.interface import RemoteError
from tests.agents.keepalive_server import KeepAliveServer, Received, Reply, answer, echo, serving
from tests.agents.test_http_connection_pool import call, mine

# What the server sends after a framing it and the client read differently: an answer naming the next call's key.
STALE = answer(b'{"key": "key-1", "stale": true}')


def own_answer(result: dict[str, object], n: int, connection: int) -> bool:
    return result == {"key": f"key-{n}", "connection": connection}


@pytest.mark.parametrize(
    "interim",
    [
        b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n",
        b"HTTP/1.1 102 Processing\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n",
    ],
    ids=["103 Early Hints", "102 Processing", "100, 103 and 102"],
)
def test_an_interim_answer_is_skipped_and_the_final_answer_is_its_calls_own(interim: bytes):
    def script(request: Received) -> Reply:
        if request.key == "key-0":  # the provider says it is working on it, then answers when it has charged
            return Reply(interim, then=answer(echo(request)), then_after=0.3)
        return Reply(answer(echo(request)))

    with serving(KeepAliveServer(script=script)) as (server, port):
        service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=2)
        assert own_answer(call(service, 0), 0, 0)  # not {}: the charge's own answer
        assert own_answer(call(service, 1), 1, 0)  # not the first call's answer; the connection kept
        assert server.accepts == 1


def test_switching_protocols_unasked_is_a_malformed_answer_and_its_connection_closed():
    def script(request: Received) -> Reply:
        if request.key == "key-0":
            return Reply(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", then=STALE, then_after=0.3)
        return Reply(answer(echo(request)))

    with serving(KeepAliveServer(script=script)) as (server, port):
        service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=2)
        with pytest.raises(RemoteError, match=r"malformed HTTP.*101") as failed:
            call(service, 0)
        assert failed.value.transient is True  # sent: an unknown outcome, never a refusal
        assert own_answer(call(service, 1), 1, 1)
        assert server.accepts == 2


NO_BODY = {  # a 204 or 304 ends at its headers, whatever they declare
    "204 with a Content-Length": b"HTTP/1.1 204 No Content\r\nContent-Length: %d\r\n\r\n" % len(STALE),
    "204 chunked": b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n",
    "304 with a Content-Length": b"HTTP/1.1 304 Not Modified\r\nContent-Length: %d\r\n\r\n" % len(STALE),
}


@pytest.mark.parametrize("head", NO_BODY.values(), ids=NO_BODY.keys())
def test_an_answer_without_a_body_that_declares_one_closes_its_connection(head: bytes):
    def script(request: Received) -> Reply:
        return Reply(head, then=STALE, then_after=0.3) if request.key == "key-0" else Reply(answer(echo(request)))

    with serving(KeepAliveServer(script=script)) as (server, port):
        service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=2)
        if head.startswith(b"HTTP/1.1 204"):
            assert call(service, 0) == {}  # at once: a 204 has no body, not even a chunked one
        else:
            with pytest.raises(RemoteError, match="HTTP 304"):
                call(service, 0)
        assert own_answer(call(service, 1), 1, 1)
        assert server.accepts == 2


MISFRAMED = {
    "two Content-Length that differ": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: %d\r\n\r\n{}"
    % (2 + len(STALE)),
    "a Transfer-Encoding that is not chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n"
    b"Content-Length: 2\r\n\r\n{}",
    "chunked not the only coding": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n"
    b"Content-Length: 2\r\n\r\n{}",
}


@pytest.mark.parametrize("raw", MISFRAMED.values(), ids=MISFRAMED.keys())
def test_an_answer_whose_length_cannot_be_told_is_malformed_and_its_connection_closed(raw: bytes):
    def script(request: Received) -> Reply:
        return Reply(raw, then=STALE, then_after=0.3) if request.key == "key-0" else Reply(answer(echo(request)))

    with serving(KeepAliveServer(script=script)) as (server, port):
        service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=2)
        with pytest.raises(RemoteError, match="malformed HTTP") as failed:
            call(service, 0)
        assert failed.value.transient is True
        assert own_answer(call(service, 1), 1, 1)
        assert server.accepts == 2


def test_a_chunked_answer_that_also_has_a_content_length_is_read_chunked_and_its_connection_closed():
    """RFC 9112 6.1: ``Transfer-Encoding`` overrides ``Content-Length``; such an answer "ought to be handled as an
    error" (request smuggling, response splitting): read as chunked, as before, and its connection not reused."""
    body = json.dumps({"key": "key-0"}).encode()
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (
        len(body),
        body,
    )

    def script(request: Received) -> Reply:
        return Reply(raw, then=STALE, then_after=0.3) if request.key == "key-0" else Reply(answer(echo(request)))

    with serving(KeepAliveServer(script=script)) as (server, port):
        service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=2)
        assert mine(call(service, 0), 0)
        assert own_answer(call(service, 1), 1, 1)
        assert server.accepts == 2


def test_connections_are_reused_when_the_process_has_more_than_1024_files_open():
    """``_dropped`` checked a kept connection with ``select.select``, which refuses a descriptor past ``FD_SETSIZE``
    (1024) with ``ValueError``: taken for a dropped connection, so a worker with that many files and sockets open
    (its Service Bus, Cosmos DB and telemetry connections among them) closed every kept connection and opened a new
    one per call, the SNAT exhaustion the pool is for, and said nothing."""
    spare: list[int] = []
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 2048:  # a shell's default is often 1024
        resource.setrlimit(resource.RLIMIT_NOFILE, (2048 if hard == resource.RLIM_INFINITY else min(hard, 2048), hard))
    try:
        while (fd := os.open(os.devnull, os.O_RDONLY)) <= 1100:  # every lower number taken: the sockets get more
            spare.append(fd)
        spare.append(fd)
        with serving(KeepAliveServer()) as (server, port):
            service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=2)
            for n in range(3):
                assert own_answer(call(service, n), n, 0)
            assert server.accepts == 1
            service.close()
    finally:
        for fd in spare:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_negative_chunk_size_is_malformed_not_a_read_of_everything_the_server_sends():
    """``http.client`` reads a chunk size with ``int(line, 16)``, which takes ``-1``; it then read ``-1`` bytes: the
    whole stream, to its end, into memory, past ``MAX_ANSWER_BYTES`` (a worker's memory, and with it every invocation
    it runs, at the mercy of what a provider or a proxy sends within the call's deadline). A chunk size is hex digits
    (RFC 9112 7.1); one below zero is malformed. (Older than the pool: ``urllib`` read it the same way.)"""
    listener = socket.create_server(("127.0.0.1", 0))
    sent: list[int] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n")
            total = 0
            try:
                for _ in range(64):
                    conn.sendall(b"x" * 1_000_000)
                    total += 1_000_000
            except OSError:
                pass  # the client closed the connection
            sent.append(total)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with listener:
        service = HttpRemoteService(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout_seconds=5)
        with pytest.raises(RemoteError, match="malformed HTTP") as failed:
            call(service, 0)
        assert failed.value.transient is True
        thread.join(timeout=10)
    assert sent and sent[0] < 32_000_000  # the rest refused unread (what the sockets' buffers held at most)


def test_bytes_read_past_an_answer_with_it_close_its_connection():
    """The answer is read through a buffer: bytes the server sent with it, past its end, were read into the buffer
    and dropped with it, and the connection (nothing left on the socket) went back to the pool, although the server
    had sent more than its answer: its framing and the client's disagree, and what it sends next (here a second
    answer, late) the next call read as its own."""
    first = Reply(answer(echo_key(0)) + STALE, then=STALE, then_after=0.3)

    def script(request: Received) -> Reply:
        return first if request.key == "key-0" else Reply(answer(echo(request)))

    with serving(KeepAliveServer(script=script)) as (server, port):
        service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=2)
        assert mine(call(service, 0), 0)
        assert own_answer(call(service, 1), 1, 1)
        assert server.accepts == 2


def echo_key(n: int) -> bytes:
    return json.dumps({"key": f"key-{n}"}).encode()
