"""Red team of the remote services' proxy support (``adapters/remote/http_service.py``, ``Route``): an ``https``
call through a proxy opens a ``CONNECT`` tunnel, whose answer ``http.client`` reads inside ``request``. A proxy that
answers it with what ``http.client`` cannot read (a status line that is not HTTP, a header line too long, too many
headers) raised ``http.client.HTTPException`` from ``request``, where only ``OSError`` was caught: it left
``HttpRemoteService.call`` as itself, not a ``RemoteError``, and escaped the agent's retry loop and its trigger (the
host abandoned the request and Service Bus redelivered it until it dead-lettered it,
``tests/agents/test_redteam_malformed_http_answers.py``). Through ``urllib``, before the pool, it was a transient
``RemoteError``. Nothing reached the provider: the service is unreachable, a transient failure."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from adapters.remote.http_service import HttpRemoteService
from adapters.remote.interface import RemoteError
from tests.agents.keepalive_server import serving
from tests.agents.test_http_connection_pool import call


@dataclass
class AnsweringProxy:
    """A proxy that reads a ``CONNECT`` head, answers ``raw`` and closes."""

    raw: bytes

    def accept(self, client: socket.socket, stop: threading.Event) -> None:
        with client:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(4096)
                if not chunk:
                    return
                head += chunk
            client.sendall(self.raw)


@pytest.fixture
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in ("no_proxy", "NO_PROXY", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    yield monkeypatch


CONNECT_ANSWERS = {
    "a status line that is not HTTP": b"garbage\r\n\r\n",
    "a header line over 64 KiB": b"HTTP/1.1 200 Connection established\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n",
    "101 headers": b"HTTP/1.1 200 Connection established\r\n" + b"".join(b"X-H%d: 1\r\n" % n for n in range(101)),
    "407": b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\nContent-Length: 0\r\n\r\n",
}


@pytest.mark.parametrize("raw", CONNECT_ANSWERS.values(), ids=CONNECT_ANSWERS.keys())
def test_a_proxy_answering_connect_with_what_cannot_be_read_is_a_transient_remote_error(no_proxy_settings, raw):
    with serving(AnsweringProxy(raw + b"\r\n")) as (_proxy, port):
        no_proxy_settings.setenv("https_proxy", f"http://127.0.0.1:{port}")
        service = HttpRemoteService("https://payments.invalid/api", timeout_seconds=2)
        with pytest.raises(RemoteError, match="unreachable") as failed:
            call(service, 0)
        assert (failed.value.transient, failed.value.timed_out) == (True, False)
