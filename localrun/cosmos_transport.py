"""A lighter HTTP path for the runner's Cosmos DB client, for a server on this machine.

The production adapters still issue every call through the ``azure-cosmos`` SDK (request building,
authorisation signatures, session and retry handling, response and error mapping), and the calls
still go over HTTPS with keep-alive to the Cosmos DB protocol server. What changes is below the SDK:

- the transport is a minimal HTTP/1.1 client on a few persistent TLS connections instead of ``requests`` +
  ``urllib3`` (about half of the SDK's per-request CPU time went there): each request leaves in one write, and
  the answer's head is split by hand (``http.client`` built the head with a regex check per header and parsed
  the answer's through the ``email`` package: 4 % of a 200-order run's CPU, 2026-12-06, docs/benchmark.md);
- the pipeline keeps only the SDK's own connection retry policy and the headers policy (headers the SDK hands to
  the pipeline), dropping the policies that only log, trace, set headers nobody reads or decode a body the SDK
  decodes again itself.

As urllib3 under the stock pipeline, it never sends a request twice: an idle connection the server closed is
replaced before a request goes out on it, and a request whose answer is lost fails with ``ServiceResponseError``
(it may have been carried out; the SDK retries a read, never a write).

Measured per point read against ``@vercel/cosmosdb-server``: about 1.1 ms with the stock client,
about 0.55 ms with this one over ``http.client``.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.core.pipeline import Pipeline
from azure.core.pipeline.transport import HttpRequest, HttpResponse, HttpTransport
from azure.core.utils import case_insensitive_dict

from adapters.remote.http_service import readable_now

if TYPE_CHECKING:
    from azure.cosmos import CosmosClient


# methods whose request always states a body length, as ``http.client`` sends them (``Content-Length: 0`` without one)
_BODY_METHODS = frozenset({"PATCH", "POST", "PUT"})


class LoopbackConnection:
    """One keep-alive HTTP/1.1 connection over TLS: a request is written at once (head and body in one
    ``sendall``) and its answer read in full. What it sends is what ``http.client`` sent (the same request line,
    ``Host``, ``Accept-Encoding: identity``, the SDK's headers in its order, ``Content-Length``); what it reads is
    an answer with a ``Content-Length``, a chunked one, or one ended by the server closing the connection.
    An answer cut short raises ``http.client.IncompleteRead``; no answer, ``http.client.RemoteDisconnected``."""

    def __init__(self, host: str, port: int, timeout: float, context: ssl.SSLContext) -> None:
        self._host = host
        self._port = port
        self._timeout = timeout
        self._context = context
        self._host_header = f"Host: {host}:{port}\r\n" if port != 443 else f"Host: {host}\r\n"
        self.sock: ssl.SSLSocket | None = None
        self._reader: Any = None

    def connect(self) -> None:
        raw = socket.create_connection((self._host, self._port), self._timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as http.client does
        try:
            self.sock = self._context.wrap_socket(raw, server_hostname=self._host)
        except BaseException:
            raw.close()
            raise
        self._reader = self.sock.makefile("rb")

    def close(self) -> None:
        reader, sock = self._reader, self.sock
        self._reader = self.sock = None
        if reader is not None:
            reader.close()
        if sock is not None:
            sock.close()

    def exchange(self, method: str, target: str, headers: Mapping[str, str], body: bytes | None) -> _Answer:
        """Sends one request and reads its answer; the connection stays open unless the answer says otherwise."""
        if self.sock is None:
            raise http.client.NotConnected()
        head = [f"{method} {target} HTTP/1.1\r\n", self._host_header, "Accept-Encoding: identity\r\n"]
        length_given = False
        for name, value in headers.items():
            head.append(f"{name}: {value}\r\n")
            length_given = length_given or name.lower() == "content-length"
        if not length_given and (body is not None or method in _BODY_METHODS):
            head.append(f"Content-Length: {len(body) if body is not None else 0}\r\n")
        head.append("\r\n")
        data = "".join(head).encode("latin-1")
        self.sock.sendall(data + body if body else data)
        answer = self._read_answer(method)
        if answer.will_close:
            self.close()
        return answer

    def _read_answer(self, method: str) -> _Answer:
        reader = self._reader
        while True:
            line = reader.readline(65537)
            if not line:
                raise http.client.RemoteDisconnected("Remote end closed connection without response")
            if len(line) > 65536:
                raise http.client.LineTooLong("status line")
            version, _, rest = line.decode("iso-8859-1").rstrip("\r\n").partition(" ")
            code, _, reason = rest.partition(" ")
            if not version.startswith("HTTP/") or len(code) != 3 or not code.isdigit():
                raise http.client.BadStatusLine(line.decode("iso-8859-1"))
            status = int(code)
            headers: list[tuple[str, str]] = []
            while True:
                header = reader.readline(65537)
                if len(header) > 65536:  # http.client's limits on a head
                    raise http.client.LineTooLong("header line")
                if header in (b"\r\n", b"\n", b""):
                    break
                if len(headers) == 100:
                    raise http.client.HTTPException("got more than 100 headers")
                name, _, value = header.decode("iso-8859-1").partition(":")
                headers.append((name, value.strip()))
            if status != 100:  # an interim answer (only to ``Expect: 100-continue``, which the SDK never sends)
                break
        fields = {name.lower(): value for name, value in headers}
        will_close = fields.get("connection", "").lower() == "close" or (
            version == "HTTP/1.0" and fields.get("connection", "").lower() != "keep-alive"
        )
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            body = b""
        elif fields.get("transfer-encoding", "").lower() == "chunked":
            body = self._read_chunked()
        elif "content-length" in fields:
            body = self._read_exactly(int(fields["content-length"]))
        else:  # ended by the server closing the connection
            body = reader.read()
            will_close = True
        return _Answer(status, reason, headers, body, will_close)

    def _read_exactly(self, size: int) -> bytes:
        data = self._reader.read(size)
        if len(data) < size:
            raise http.client.IncompleteRead(data, size - len(data))
        return bytes(data)

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            line = self._reader.readline(65537)
            if not line:
                raise http.client.IncompleteRead(b"".join(parts))
            size = int(line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while self._reader.readline(65537) not in (b"\r\n", b"\n", b""):  # trailers
                    pass
                return b"".join(parts)
            parts.append(self._read_exactly(size))
            self._read_exactly(2)  # the chunk's CRLF


class _Answer:
    __slots__ = ("body", "headers", "reason", "status", "will_close")

    def __init__(self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes, will_close: bool) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body
        self.will_close = will_close


def _dropped(connection: LoopbackConnection) -> bool:
    """Whether an idle keep-alive connection was closed by the server: it has something to read (the end of the
    stream) where it should have nothing, as urllib3 checks before reusing one (``is_connection_dropped``). With
    ``poll`` (``readable_now``): ``select.select`` refused a descriptor past 1024, and every connection kept on one
    was taken for dropped, a new one opened for each request (tests/localrun/test_cosmos_transport.py)."""
    sock = connection.sock
    if sock is None:
        return True
    try:
        return readable_now(sock)
    except (OSError, ValueError):
        return True


class LoopbackResponse(HttpResponse):
    """An azure-core response over an answer read in full (so the connection is free for the next request)."""

    def __init__(self, request: HttpRequest, response: _Answer) -> None:
        super().__init__(request, response)
        self.status_code = response.status
        self.headers = case_insensitive_dict(response.headers)
        self.reason = response.reason
        self.content_type = self.headers.get("Content-Type")
        self._body = response.body

    def body(self) -> bytes:
        return self._body


class LoopbackTransport(HttpTransport[HttpRequest, HttpResponse]):
    """HTTPS with keep-alive to one host and port, certificate not verified (a local server's
    self-signed certificate). Thread-safe: each request takes an idle connection or opens one."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout: float = 60.0,
        faults: Callable[[str, str, Mapping[str, str]], str | None] | None = None,
        connection_failed: Callable[[bool], None] | None = None,
    ) -> None:
        self._host = host
        # Given a request's method, path and headers, the fault the server is to answer instead (its
        # ``x-localrun-fault`` header, ``localrun/cosmos_faults.cjs``), or None (``localrun/service_faults.py``)
        self._faults = faults
        # Told of a request that failed on its connection (True: refused, nothing listens) before the SDK's error is
        # raised; it may raise instead (``CosmosServer.connection_failed``: the server exited). Off the path of a
        # request answered: it costs nothing per request.
        self._connection_failed = connection_failed
        self._port = port
        self._timeout = timeout
        self._tls = ssl._create_unverified_context()
        self._idle: list[LoopbackConnection] = []
        self._lock = threading.Lock()
        self.connections_opened = 0

    def _take(self) -> LoopbackConnection:
        """An idle connection the server has not closed, or a new one."""
        while True:
            with self._lock:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return self._open()
            if not _dropped(connection):
                return connection
            connection.close()

    def _open(self) -> LoopbackConnection:
        with self._lock:
            self.connections_opened += 1
        return LoopbackConnection(self._host, self._port, self._timeout, self._tls)

    def send(self, request: HttpRequest, **kwargs: Any) -> HttpResponse:
        """Sends ``request`` once: a request whose answer is lost is never sent again here (it may have been carried
        out), as with the production pipeline's ``requests``/urllib3, which does not retry one either; the SDK's
        policies decide (a read again, a write not: the app gets ``ServiceResponseError``)."""
        parts = urlsplit(request.url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")  # as http.client: "" is "/"
        body: Any = request.data
        if isinstance(body, str):
            body = body.encode("utf-8")
        elif isinstance(body, bytearray | memoryview):
            body = bytes(body)
        elif body is not None and not isinstance(body, bytes):  # the SDK sends JSON text, or nothing
            raise TypeError(f"a request body of type {type(body).__name__} is not sent by this transport")
        connection = self._take()
        try:
            if connection.sock is None:
                connection.connect()
        except OSError as exc:  # nothing sent (urllib3's NewConnectionError)
            connection.close()
            if self._connection_failed is not None:
                self._connection_failed(isinstance(exc, ConnectionRefusedError))
            raise ServiceRequestError(f"cannot connect to the Cosmos DB server: {exc}", error=exc) from exc
        try:  # sent, or partly: urllib3's ProtocolError, what azure-core makes a ServiceResponseError
            headers = request.headers
            fault = self._faults(request.method, parts.path, request.headers) if self._faults is not None else None
            if fault is not None:  # on this try only: the SDK sends the same request object again
                headers = {**headers, "x-localrun-fault": fault}
            response = LoopbackResponse(request, connection.exchange(request.method, target, headers, body))
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            if self._connection_failed is not None:
                self._connection_failed(False)
            raise ServiceResponseError(f"no answer from the Cosmos DB server: {exc}", error=exc) from exc
        if connection.sock is not None:  # else closed as its answer asked
            with self._lock:
                self._idle.append(connection)
        return response

    def open(self) -> None:
        pass

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def __enter__(self) -> LoopbackTransport:
        return self

    def __exit__(self, *exc_details: Any) -> None:
        self.close()


def use_lean_pipeline(client: CosmosClient, transport: LoopbackTransport) -> None:
    """Rebuilds ``client``'s request pipeline as [its ``HeadersPolicy``, the SDK's connection retry policy,
    ``transport``]. The headers policy stays: the SDK hands some requests' headers to the pipeline rather than to the
    request (its routing map's incremental read: ``A-IM``, ``If-None-Match``); without them the SDK read its
    partition key ranges again and again once a 410 made it refresh them."""
    from azure.core.pipeline.policies import HeadersPolicy
    from azure.cosmos._retry_utility import ConnectionRetryPolicy

    pipeline_client = client.client_connection.pipeline_client
    kept: list[Any] = []
    for runner in pipeline_client._pipeline._impl_policies:
        policy = getattr(runner, "_policy", runner)  # a SansIO policy runs inside a runner
        if isinstance(policy, HeadersPolicy | ConnectionRetryPolicy):
            kept.append(policy)
    if [type(p) for p in kept] != [HeadersPolicy, ConnectionRetryPolicy]:
        raise RuntimeError("the azure-cosmos pipeline no longer has one HeadersPolicy, then one ConnectionRetryPolicy")
    pipeline_client._pipeline = Pipeline(transport, policies=kept)
