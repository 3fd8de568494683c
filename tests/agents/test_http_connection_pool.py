"""The HTTP remote service keeps its connections alive between calls (``adapters/remote/http_service.py``, "Connections
are kept"). Before, every call opened a new TCP (and TLS) connection through ``urllib`` and closed it: in Azure each
took a SNAT port, held for minutes after it closed, and a busy instance ran out of them (its calls then failed to
connect), besides a handshake per call. Against a real local HTTP/1.1 server that keeps connections alive and counts
the ones it accepted: reuse, and every case where a connection must not be reused (an answer not read to its end,
bytes after an answer, ``Connection: close``, a server that closed it, one idle too long), so that no call ever
reads what was left of another's answer."""

from __future__ import annotations

import base64
import logging
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from adapters.remote import http_service
from adapters.remote.http_service import MAX_ANSWER_BYTES, HttpRemoteService
from adapters.remote.interface import RemoteCall, RemoteError
from tests.agents.keepalive_server import (
    Certificates,
    KeepAliveServer,
    Received,
    Reply,
    TunnelProxy,
    answer,
    echo,
    issue,
    server_tls,
    serving,
    settle,
)

CALL = RemoteCall("payment", "charge", "order-7", "order-7:charge-payment", 3, {"amountCents": 700})


def call(service: HttpRemoteService, n: int) -> dict[str, object]:
    return service.call(replace(CALL, idempotency_key=f"key-{n}"))


def mine(result: dict[str, object], n: int) -> bool:
    """Whether ``result`` is the answer to call ``n`` (the server echoes the key it was sent)."""
    return result.get("key") == f"key-{n}"


@pytest.fixture
def default_server() -> Iterator[tuple[KeepAliveServer, str]]:
    with serving(KeepAliveServer()) as (server, port):
        yield server, f"http://127.0.0.1:{port}/api/"


def test_calls_reuse_one_connection(default_server):
    server, url = default_server
    service = HttpRemoteService(url, timeout_seconds=2)
    for n in range(5):
        assert mine(call(service, n), n)
    assert server.accepts == 1
    assert [(r.connection, r.nth) for r in server.received] == [(0, n) for n in range(5)]
    assert server.received[0].line == "POST /api/charge HTTP/1.1"
    assert "connection" not in server.received[0].headers  # urllib sent "Connection: close"
    service.close()
    assert settle(lambda: server.open_connections() == 0)


def scripted(first: Reply) -> KeepAliveServer:
    """A server whose first request gets ``first``, every other the default answer."""
    return KeepAliveServer(script=lambda request: first if request.key == "key-0" else Reply(answer(echo(request))))


def after_a_bad_answer_the_next_calls_get_a_new_connection_then_reuse_it(first: Reply, timeout: float = 2) -> None:
    with serving(scripted(first)) as (server, port):
        service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=timeout)
        with pytest.raises(RemoteError) as failed:
            call(service, 0)
        assert failed.value.transient is True
        time.sleep(0.3)  # whatever the server still sends after the first answer has come
        assert mine(call(service, 1), 1)  # its own answer, never what was left of the first
        assert mine(call(service, 2), 2)
        assert [r.connection for r in server.received] == [0, 1, 1]
        assert server.accepts == 2


def test_an_answer_cut_at_the_largest_readable_size_closes_its_connection():
    body = b'{"receipt": "' + b"x" * (MAX_ANSWER_BYTES + 10) + b'"}'
    after_a_bad_answer_the_next_calls_get_a_new_connection_then_reuse_it(Reply(answer(body)))


def test_a_timed_out_call_closes_its_connection_and_its_late_answer_reaches_no_other_call():
    late = Reply(answer(b'{"key": "key-1", "late": "the first call\'s answer"}'), delay=0.4)
    after_a_bad_answer_the_next_calls_get_a_new_connection_then_reuse_it(late, timeout=0.2)


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
        b"garbage\r\n\r\n",
    ],
    ids=["chunk size not hex", "a status line that is not HTTP"],
)
def test_a_malformed_answer_closes_its_connection(raw: bytes):
    after_a_bad_answer_the_next_calls_get_a_new_connection_then_reuse_it(Reply(raw + b'{"key": "key-1"}'))


def test_an_error_answer_read_in_part_closes_its_connection():
    """Only ``ERROR_DETAIL_BYTES`` of an error's body are read: the rest of it is never read by the next call."""
    stale = answer(b'{"key": "key-1"}')
    body = b"busy " * 2000 + stale  # 10,000 bytes, the next call's answer look-alike past the detail read
    with serving(scripted(Reply(answer(body, "503 Service Unavailable")))) as (server, port):
        service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=2)
        with pytest.raises(RemoteError, match="HTTP 503: busy busy") as failed:
            call(service, 0)
        assert failed.value.transient is True
        assert mine(call(service, 1), 1) and mine(call(service, 2), 2)
        assert [r.connection for r in server.received] == [0, 1, 1]


@pytest.mark.parametrize("status", ["404 Not Found", "503 Service Unavailable"])
def test_an_error_answer_read_to_its_end_keeps_its_connection(status: str):
    with serving(scripted(Reply(answer(b'{"error": "no"}', status)))) as (server, port):
        service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=2)
        with pytest.raises(RemoteError, match=f"HTTP {status[:3]}"):
            call(service, 0)
        assert mine(call(service, 1), 1)
        assert server.accepts == 1


def test_a_chunked_answer_read_to_its_end_keeps_its_connection():
    chunked = Reply(b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n{"key": \r\n8\r\n"key-0"}\r\n0\r\n\r\n')
    with serving(scripted(chunked)) as (server, port):
        service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=2)
        assert mine(call(service, 0), 0) and mine(call(service, 1), 1)
        assert server.accepts == 1


@pytest.mark.parametrize("then_after", [0.0, 0.1], ids=["with the answer", "after it"])
def test_bytes_after_an_answer_never_reach_the_next_call(then_after: float):
    """A server (or proxy) that sends more than its answer said, here a whole answer more: the next call on that
    connection would read it as its own. The pool checks a connection before it keeps it and before it reuses it."""
    first = Reply(answer(b'{"key": "key-0"}'), then=answer(b'{"key": "key-1", "stale": true}'), then_after=then_after)
    with serving(scripted(first)) as (server, port):
        service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=2)
        assert mine(call(service, 0), 0)
        assert settle(lambda: server.sent_after == 1)  # the bytes after the answer left before the next call
        time.sleep(0.05)
        result = call(service, 1)
        assert mine(result, 1) and "stale" not in result
        assert mine(call(service, 2), 2)
        assert server.received[1].connection == server.received[2].connection  # and the good one is reused


def test_an_answer_saying_connection_close_is_not_reused():
    server = KeepAliveServer(script=lambda r: Reply(answer(echo(r), headers="Connection: close\r\n"), close=True))
    with serving(server) as (server, port):
        service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=2)
        for n in range(3):
            assert mine(call(service, n), n)
        assert server.accepts == 3


def test_a_connection_the_server_closed_while_idle_is_replaced_before_use():
    """Servers close idle keep-alive connections after their own timeout (Node: 5 s); the next call must not
    fail for it."""
    server = KeepAliveServer(script=lambda r: Reply(answer(echo(r)), then_after=0.05, close=True))
    with serving(server) as (server, port):
        service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=2)
        assert mine(call(service, 0), 0)
        assert settle(lambda: server.closed_by_server == 1)
        time.sleep(0.05)
        assert mine(call(service, 1), 1)
        assert [r.key for r in server.received] == ["key-0", "key-1"]  # found closed: nothing sent on it
        assert server.accepts == 2


def hang_up_on_reused(request: Received) -> Reply:
    """Answers a connection's first request; closes the connection on its next without an answer (the server's
    idle timeout meeting the request: the keep-alive race)."""
    return Reply(answer(echo(request))) if request.nth == 0 else Reply(None)


def test_a_request_lost_with_a_reused_connection_is_sent_again_once_on_a_new_one():
    """Safe only because a call with the same ``Idempotency-Key`` is idempotent (the contract in the module)."""
    with serving(KeepAliveServer(script=hang_up_on_reused)) as (server, port):
        service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=2)
        assert mine(call(service, 0), 0)
        assert mine(call(service, 1), 1)
        assert [(r.key, r.connection) for r in server.received] == [("key-0", 0), ("key-1", 0), ("key-1", 1)]
        sent = [r for r in server.received if r.key == "key-1"]
        assert sent[0].headers == sent[1].headers and sent[0].body == sent[1].body  # the same request


def test_a_request_is_sent_again_at_most_once():
    never_twice = KeepAliveServer(script=lambda r: Reply(answer(echo(r))) if r.key == "key-0" else Reply(None))
    with serving(never_twice) as (server, port):
        service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=2)
        assert mine(call(service, 0), 0)
        with pytest.raises(RemoteError, match="unreachable") as failed:
            call(service, 1)  # on the reused connection, then once on a new one
        assert (failed.value.transient, failed.value.timed_out) == (True, False)
        with pytest.raises(RemoteError, match="unreachable"):
            call(service, 2)  # on a new connection: not sent again
        assert [r.key for r in server.received] == ["key-0", "key-1", "key-1", "key-2"]


def test_a_request_whose_answer_began_is_not_sent_again():
    def cut_on_reused(request: Received) -> Reply:
        return Reply(answer(echo(request))) if request.nth == 0 else Reply(b"HTTP/1.1 20", close=True)

    with serving(KeepAliveServer(script=cut_on_reused)) as (server, port):
        service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=2)
        assert mine(call(service, 0), 0)
        with pytest.raises(RemoteError, match="malformed") as failed:
            call(service, 1)
        assert failed.value.transient is True
        assert [r.key for r in server.received] == ["key-0", "key-1"]


def resent(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == "RemoteCallResent"]


def test_a_request_sent_again_is_logged_once_with_its_service_key_and_why(caplog):
    """Every recovery shows in the structured logs: the one resend names the call (a provider's duplicate, its
    ``Idempotency-Key`` not honoured, is traced to it) and how long the kept connection had waited idle."""
    with serving(KeepAliveServer(script=hang_up_on_reused)) as (server, port), caplog.at_level(logging.INFO):
        service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=2)
        assert mine(call(service, 0), 0)
        assert resent(caplog) == []  # a first call on a new connection: nothing sent again
        time.sleep(0.2)
        assert mine(call(service, 1), 1)
        assert [r.key for r in server.received] == ["key-0", "key-1", "key-1"]
    [event] = resent(caplog)
    assert event.levelno == logging.INFO and event.name == "orders"
    fields = vars(event)
    assert {name: fields[name] for name in ("service", "action", "orderId", "idempotencyKey", "reason")} == {
        "service": "payment",
        "action": "charge",
        "orderId": "order-7",
        "idempotencyKey": "key-1",
        "reason": "kept connection closed by the peer",
    }
    assert 0.2 <= fields["idleSeconds"] < 2
    assert fields["error"].split(":")[0] in {"RemoteDisconnected", "ConnectionResetError"}
    assert "payment.charge" in event.getMessage() and "sent once more" in event.getMessage()


def test_a_failure_on_a_new_connection_or_a_resend_is_not_logged_as_one(caplog):
    """A request lost on a new connection is not sent again, nor is the resend itself: one event per resend made,
    none for a call that only failed; nor for a kept connection found closed before anything went out on it."""
    never_twice = KeepAliveServer(script=lambda r: Reply(answer(echo(r))) if r.key == "key-0" else Reply(None))
    with serving(never_twice) as (server, port), caplog.at_level(logging.INFO):
        service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=2)
        assert mine(call(service, 0), 0)
        with pytest.raises(RemoteError, match="unreachable"):
            call(service, 1)  # on the reused connection, then once on a new one, which fails too
        assert [vars(r)["idempotencyKey"] for r in resent(caplog)] == ["key-1"]
        with pytest.raises(RemoteError, match="unreachable"):
            call(service, 2)  # on a new connection: failed, not sent again, not logged
        assert [r.key for r in server.received] == ["key-0", "key-1", "key-1", "key-2"]
    assert len(resent(caplog)) == 1
    closed_while_idle = KeepAliveServer(script=lambda r: Reply(answer(echo(r)), then_after=0.05, close=True))
    with serving(closed_while_idle) as (server, port), caplog.at_level(logging.INFO):
        service = HttpRemoteService(f"http://127.0.0.1:{port}", timeout_seconds=2)
        assert mine(call(service, 10), 10)
        assert settle(lambda: server.closed_by_server == 1)
        time.sleep(0.05)
        assert mine(call(service, 11), 11)  # the closed one found so before use (``_dropped``): nothing resent
        assert [r.key for r in server.received] == ["key-10", "key-11"]
    assert len(resent(caplog)) == 1


def test_a_connection_idle_longer_than_the_bound_is_closed_not_reused(monkeypatch, default_server):
    server, url = default_server
    monkeypatch.setattr(http_service, "IDLE_SECONDS", 1.0)
    service = HttpRemoteService(url, timeout_seconds=2)
    assert mine(call(service, 0), 0) and mine(call(service, 1), 1)
    assert server.accepts == 1
    time.sleep(1.2)
    assert mine(call(service, 2), 2)
    assert server.accepts == 2
    assert settle(lambda: server.closed_by_client == 1)  # the old one closed by the client, not left open


def test_concurrent_calls_each_get_their_own_answer_and_the_pool_keeps_at_most_its_bound(default_server):
    server, url = default_server
    server.script = lambda r: Reply(answer(echo(r)), delay=0.05)
    service = HttpRemoteService(url, timeout_seconds=5, connections=3)
    start = threading.Barrier(12)

    def one(n: int) -> bool:
        start.wait()
        return mine(call(service, n), n)

    with ThreadPoolExecutor(12) as threads:
        assert all(threads.map(one, range(12)))
    assert server.accepts <= 12
    assert settle(lambda: server.open_connections() == 3), server.open_connections()  # 3 kept, the others closed
    opened = server.accepts
    with ThreadPoolExecutor(3) as threads:
        assert all(threads.map(lambda n: mine(call(service, n), n), range(100, 106)))
    assert server.accepts == opened  # the kept ones served the next calls


def test_a_redirect_is_a_refusal_not_followed():
    """``urllib`` followed a 302 to a POST with a GET (no body): a provider's answer to a request never made."""
    moved = Reply(answer(b"", "302 Found", headers="Location: /api/elsewhere\r\n"))
    with serving(scripted(moved)) as (server, port):
        service = HttpRemoteService(f"http://127.0.0.1:{port}/api", timeout_seconds=2)
        with pytest.raises(RemoteError, match="HTTP 302") as refused:
            call(service, 0)
        assert refused.value.transient is False
        assert [r.line for r in server.received] == ["POST /api/charge HTTP/1.1"]


def test_an_http_proxy_from_the_environment_is_used_with_its_credentials(monkeypatch):
    """As ``urllib`` did: the absolute URL to the proxy, ``Proxy-Authorization`` from the proxy URL."""
    with serving(KeepAliveServer()) as (proxy, port):
        for name in ("no_proxy", "NO_PROXY", "HTTP_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("http_proxy", f"http://agent:s%3Ecret@127.0.0.1:{port}")
        service = HttpRemoteService("http://payments.invalid:8080/api", timeout_seconds=2)
        assert mine(call(service, 0), 0) and mine(call(service, 1), 1)
        assert proxy.accepts == 1
        first = proxy.received[0]
        assert first.line == "POST http://payments.invalid:8080/api/charge HTTP/1.1"
        assert first.headers["host"] == "payments.invalid:8080"
        assert first.headers["proxy-authorization"] == "Basic " + base64.b64encode(b"agent:s>cret").decode()


# HTTPS: a CA of the test's own, trusted through ``SSL_CERT_FILE`` (read by ``ssl.create_default_context``, what the
# service uses), so that the service's own verification is what is tested.


@pytest.fixture
def certificates(tmp_path) -> Certificates:
    return issue(str(tmp_path), ["localhost"], ["127.0.0.1"])


def trust(monkeypatch: pytest.MonkeyPatch, certificates: Certificates) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", certificates.ca)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)


def test_https_calls_reuse_one_verified_connection(monkeypatch, certificates):
    trust(monkeypatch, certificates)
    with serving(KeepAliveServer(tls=server_tls(certificates))) as (server, port):
        service = HttpRemoteService(f"https://127.0.0.1:{port}/api", timeout_seconds=2)
        for n in range(4):
            assert mine(call(service, n), n)
        assert server.accepts == 1


def test_https_bytes_after_an_answer_never_reach_the_next_call(monkeypatch, certificates):
    trust(monkeypatch, certificates)
    first = Reply(answer(b'{"key": "key-0"}'), then=answer(b'{"key": "key-1", "stale": true}'), then_after=0.1)
    with serving(
        KeepAliveServer(
            script=lambda r: first if r.key == "key-0" else Reply(answer(echo(r))), tls=server_tls(certificates)
        )
    ) as (server, port):
        service = HttpRemoteService(f"https://localhost:{port}/api", timeout_seconds=2)
        assert mine(call(service, 0), 0)
        assert settle(lambda: server.sent_after == 1)  # the bytes after the answer left before the next call
        time.sleep(0.05)
        result = call(service, 1)
        assert mine(result, 1) and "stale" not in result
        assert mine(call(service, 2), 2)
        assert server.received[1].connection == server.received[2].connection


def test_an_https_proxy_from_the_environment_tunnels_one_verified_kept_connection(monkeypatch, certificates):
    """As ``urllib`` did: a ``CONNECT`` tunnel with the proxy URL's credentials, TLS to the host inside it (its
    name verified: ``localhost``, not the proxy's address)."""
    trust(monkeypatch, certificates)
    with (
        serving(KeepAliveServer(tls=server_tls(certificates))) as (server, port),
        serving(TunnelProxy()) as (proxy, proxy_port),
    ):
        for name in ("no_proxy", "NO_PROXY", "HTTPS_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("https_proxy", f"http://agent:pw@127.0.0.1:{proxy_port}")
        service = HttpRemoteService(f"https://localhost:{port}/api", timeout_seconds=2)
        assert mine(call(service, 0), 0) and mine(call(service, 1), 1)
        [head] = proxy.heads  # one tunnel, kept
        assert head.startswith(f"CONNECT localhost:{port} HTTP/1.1\r\n")
        assert "Proxy-Authorization: Basic " + base64.b64encode(b"agent:pw").decode() in head
        assert server.accepts == 1 and [r.line for r in server.received] == ["POST /api/charge HTTP/1.1"] * 2
        assert "proxy-authorization" not in server.received[0].headers  # for the proxy only, never the host


@pytest.mark.parametrize("case", ["a CA not trusted", "a certificate for another host"])
def test_https_refuses_a_certificate_it_cannot_verify(monkeypatch, tmp_path, certificates, case: str):
    if case == "a certificate for another host":
        trust(monkeypatch, certificates)
        os.makedirs(tmp_path / "other")
        served = issue(str(tmp_path / "other"), ["payments.example"], [])
        monkeypatch.setenv("SSL_CERT_FILE", served.ca)
    else:
        served = certificates  # SSL_CERT_FILE left as it is: the system's CAs
    with serving(KeepAliveServer(tls=server_tls(served))) as (server, port):
        with pytest.raises(RemoteError, match=r"certificate verify failed") as failed:
            call(HttpRemoteService(f"https://127.0.0.1:{port}", timeout_seconds=2), 0)
        assert (failed.value.transient, failed.value.timed_out) == (True, False)
        assert server.received == []


def test_tls_failing_under_an_answer_is_a_transient_remote_error(monkeypatch, certificates):
    """Bytes that are not TLS where an answer's TLS records should be: ``ssl.SSLError`` escaped the service (an
    ``OSError`` that is no ``ConnectionError``), and the agent's trigger with it."""

    trust(monkeypatch, certificates)
    server = KeepAliveServer(tls=server_tls(certificates))
    server.script = lambda r: Reply(b"\x17\x03\x03\x00\x10" + b"\x00" * 16, beneath_tls=True)  # sealed by no key
    with serving(server) as (server, port):
        with pytest.raises(RemoteError) as failed:
            call(HttpRemoteService(f"https://127.0.0.1:{port}", timeout_seconds=2), 0)
        assert failed.value.transient is True


def test_the_agents_services_keep_as_many_connections_as_their_agents_make_calls_at_once():
    from adapters.clock import SystemClock
    from adapters.remote.services import remote_services
    from settings import MAX_CONCURRENT_ACTIVITIES, SERVICE_BUS_MAX_CONCURRENT_CALLS, Settings

    urls = {f"{name.upper()}_SERVICE_URL": "http://127.0.0.1:9" for name in ("inventory", "payment", "shipping")}
    services = remote_services(Settings.from_env(urls), SystemClock())
    kept = {name: s.connections for name, s in services.items() if isinstance(s, HttpRemoteService)}
    assert kept == {
        "inventory": MAX_CONCURRENT_ACTIVITIES,  # an in-process agent: called from activities
        "payment": SERVICE_BUS_MAX_CONCURRENT_CALLS,
        "shipping": SERVICE_BUS_MAX_CONCURRENT_CALLS,
    }
