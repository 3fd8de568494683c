"""``RemoteService`` over HTTP, for a real endpoint: ``POST {base_url}/{action}`` with a JSON body
and the idempotency key and fencing token as headers.

429, 408, 5xx, timeouts and connection failures are transient (the same call may succeed later);
any other 4xx is permanent. A 2xx whose body the app cannot read (not UTF-8, not JSON, not an object,
a number or a nesting it cannot carry) is transient too: the provider acted, and the app does not know
what it did, so it is an unknown outcome, as a timeout is, never a refusal (a refusal sends the step
to the fallback provider under the same key, which charged a second time). So is an answer
``http.client`` cannot read at all (a status line, headers or body it refuses: ``HTTPException``, or the
``ValueError`` of a chunk size that is not hex or is below zero): the call was sent. So is an answer over
``MAX_ANSWER_BYTES`` (the reply that carries it could not), read no further. Uses only the standard library.

``timeout_seconds`` bounds the call, not each wait: ``http.client``'s ``timeout`` is a socket timeout (the
connection to each address, each send, each receive), so an answer trickling in a byte at a time would hold the
agent for as long as it kept coming. Each receive waits only what is left of the call's time, counted from its
start (``_Deadline``); connecting and sending keep the socket timeout.

Connections are kept (``Pool``): the services are made once per worker process (``dependencies.get_context``),
and each keeps its idle keep-alive connections to its base URL between calls and invocations, as Microsoft's
"Manage connections in Azure Functions" asks (learn.microsoft.com/azure/azure-functions/manage-connections:
reuse clients rather than make one per invocation; an instance has a limit of outbound connections). In Azure
every new outbound connection to a public address takes a SNAT port, which is kept for 4 minutes after the
connection closes (learn.microsoft.com/azure/api-management/troubleshoot-response-timeout-and-errors); a busy
instance that opened one per call ran out of them (its calls then failed to connect: transient failures,
steps timed out), and paid a TCP and TLS handshake on every call. What is reused, and what is not:

- a connection goes back to the pool only after an answer read to its end, with nothing after it (on the wire,
  or read into the buffer with it) and no ``Connection: close``; one whose answer was cut (``MAX_ANSWER_BYTES``),
  timed out, malformed or whose error body was read in part is closed, so no later call reads what was left of an
  earlier answer; so is one whose end the server may see elsewhere (a 204 or 304 declaring a body, a
  ``Content-Length`` beside a chunked ``Transfer-Encoding``), and an answer whose length cannot be told (two
  ``Content-Length`` that differ, a ``Transfer-Encoding`` other than chunked) is malformed; interim answers (1xx:
  102 Processing, 103 Early Hints) are skipped, never taken for the answer (``_Answer``);
- at most ``connections`` idle connections are kept (more calls at once open more, closed after);
- an idle connection older than ``IDLE_SECONDS`` is never reused, and closed at the service's next call (well
  under the 4 minutes after which Azure's SNAT drops an idle flow without telling either end), so no TCP keep-alive
  probes are needed; no thread watches the pool between calls;
- before one is reused it is checked (``_dropped``, as ``localrun/cosmos_transport.py`` does): one the server
  closed, or with anything to read, is closed and another taken;
- a request sent on a reused connection that failed before any byte of an answer came (the server closed it
  as the request left: a reset, an end of stream) is sent once more on a new connection, within the same
  deadline, and logged (``RemoteCallResent``: the service, action, order, idempotency key, how long the connection
  had been idle and the error). That is safe only because the contract below makes a call with the same
  ``Idempotency-Key`` idempotent (at worst the provider sees the same call twice and answers the second with the
  first's result or 429/503). A request that failed on a new connection, or after an answer began, is not sent
  again here.

TLS is verified (``ssl.create_default_context``: the system's CAs, host name checked). A proxy is used as
``urllib`` used it before the pool: from ``http_proxy``/``https_proxy``/``no_proxy`` (read when the service is
made), a ``CONNECT`` tunnel for ``https``, the absolute URL for ``http``, ``Proxy-Authorization`` from the
proxy URL's user and password. Redirects are not followed (``urllib`` followed a 301, 302 or 303 answer to a
POST with a GET without the body): a 3xx is a refusal, as a 307 or 308 was.

The contract a real provider must honour (docs/compensation.md, "What a remote service must offer"):

- ``Idempotency-Key``: the same key and action give the same result and no second side effect (every layer
  retries with one key, and this client sends a request once more when the kept connection it went on was closed
  before any answer came, above);
- a second call with a key whose first call is still running waits for it or answers 429/503, never
  409 (any other 4xx is read as a refusal, and a refusal while the first call may still charge sends
  the step to the fallback provider or to compensation);
- ``X-Fencing-Token``: a token lower than the highest seen for the key is refused (4xx);
- ``X-Fences-Idempotency-Key`` (undo calls only): the forward key this undo cancels. Taking the undo
  fences that key, atomically with the undo: the undo reverses whatever the key did before it, and
  any forward call with that key that arrives or commits after it is refused (409 or another permanent 4xx),
  never performed. Without it a forward call still in flight when its undo ran (outcome unknown) would take
  effect after the order was compensated. The fence is permanent (a tombstone), per provider;
- an undo undoes whatever its forward key did at this provider (or nothing), found by the key, not only by a
  reference the caller may never have received (the forward call's reply may have been lost);
- an undo's answer says what it undid: a refund answers ``refundId`` (null when there was nothing to
  refund) and ``amountCents``; the compensation log keeps it, and a prepaid order none of whose
  refunds returned money raises ``PrepaymentToRelease``;
- one answer per request, framed by ``Content-Length`` or chunked coding, and no bytes after it: bytes a server
  sends once the next call has taken the kept connection are that call's answer to it (no HTTP/1.1 client can tell;
  tests/agents/test_redteam_pool_answer_framing.py)."""

from __future__ import annotations

import base64
import functools
import http
import http.client
import io
import json
import select
import socket
import ssl
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from adapters.remote.interface import RemoteCall, RemoteError
from contracts.parsing import MAX_BODY_BYTES, read_outside_json
from observability.events import app_event
from settings import REMOTE_CALL_TIMEOUT, SERVICE_BUS_MAX_CONCURRENT_CALLS

TRANSIENT_STATUSES = frozenset({408, 429})
FENCES_HEADER = "X-Fences-Idempotency-Key"


def is_transient_status(status: int) -> bool:
    return status in TRANSIENT_STATUSES or status >= 500


# The largest answer read: the agent's reply carries it to the orchestration, and a reply body over
# ``MAX_BODY_BYTES`` is refused (a larger answer could never be carried; reading it all only cost memory).
MAX_ANSWER_BYTES = MAX_BODY_BYTES
# How much of an error answer's body is read for the failure's detail (300 characters of it are kept).
ERROR_DETAIL_BYTES = 4096
# The idle connections a service keeps when none is given: the calls one Service Bus agent makes at once on an
# instance (``services.remote_services`` gives each service its own count, ``services.callers_at_once``).
POOL_CONNECTIONS = SERVICE_BUS_MAX_CONCURRENT_CALLS
# How long a connection may wait idle in the pool before it is closed rather than reused: well under the 4 minutes
# after which Azure's SNAT (and its load balancers) drop an idle flow silently (learn.microsoft.com/azure/
# load-balancer/load-balancer-tcp-reset), and about what servers keep an idle keep-alive connection open (nginx
# 75 s; many less: those are caught by ``_dropped`` or sent again, see the module). A connection never idles long
# enough for TCP keep-alive probes (``adapters/cosmos/client.py``: the first after 120 s) to matter: none are set.
IDLE_SECONDS = 60.0
# What ``urllib`` sent (its opener's default), kept: a provider or its firewall may want one.
USER_AGENT = f"Python-urllib/{sys.version_info[0]}.{sys.version_info[1]}"
# How a reused connection fails when the server closed it as the request left (a reset, the end of the stream): a
# request that failed so before any byte of its answer came is sent again once, on a new connection (``call``).
_DROPPED_ERRORS = (ConnectionError, ssl.SSLEOFError, ssl.SSLZeroReturnError)


@dataclass(frozen=True)
class Outgoing:
    """A request as it is sent: its target (the path, or the absolute URL to a proxy), body and headers."""

    target: str
    body: bytes
    headers: dict[str, str]


class HttpRemoteService:
    def __init__(
        self,
        base_url: str,
        timeout_seconds: float = REMOTE_CALL_TIMEOUT.total_seconds(),
        *,
        connections: int = POOL_CONNECTIONS,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"service URL must be http(s), got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout_seconds = timeout_seconds
        self.connections = connections  # idle ones kept at most
        self._route = Route.to(self.base_url)
        self._pool = Pool(self._route.connect, timeout_seconds, connections)

    def build_request(self, call: RemoteCall) -> Outgoing:
        body = {"service": call.service, "orderId": call.order_id, "payload": call.payload}
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Idempotency-Key": call.idempotency_key,
            "X-Fencing-Token": str(call.fencing_token),
        }
        if call.fences_key is not None:
            headers[FENCES_HEADER] = call.fences_key
        for name, value in headers.items():
            # what ``http.client`` would refuse while sending, refused here, before anything is sent: a
            # refusal (nothing was done), not the unknown outcome of an answer it cannot read
            if not (value.isascii() and value.isprintable()):
                raise RemoteError(f"header {name} {value[:40]!r} cannot be sent (visible ASCII only)", transient=False)
        return self._route.outgoing(call.action, json.dumps(body).encode("utf-8"), headers)

    def close(self) -> None:
        """Closes the idle connections (a call after it opens new ones)."""
        self._pool.close()

    def call(self, request: RemoteCall) -> dict[str, Any]:
        where = f"{request.service}.{request.action} at {self.base_url}"
        outgoing = self.build_request(request)
        deadline = time.monotonic() + self.timeout_seconds
        connection, idle = self._pool.take()
        while True:
            try:
                status, reason, raw = self._exchange(where, connection, outgoing, deadline)
            except _NoAnswer as lost:
                connection.close()
                left = deadline - time.monotonic()
                if idle is None or left <= 0:  # sent again once only: the new connection is not reused
                    raise RemoteError(f"{where} unreachable: {lost.cause}", transient=True) from lost.cause
                _log_resent(where, request, idle, lost.cause)
                connection, idle = self._pool.fresh(min(self.timeout_seconds, left)), None
                continue
            except BaseException:
                connection.close()  # whatever is left of its answer is never read by another call
                raise
            break
        if len(raw) > MAX_ANSWER_BYTES:
            connection.close()  # read no further: the rest of the answer is on the wire
            raise RemoteError(
                f"{where} answered more than {MAX_ANSWER_BYTES} bytes, more than its reply can carry", transient=True
            )
        self._pool.give_back(connection)
        if status >= 300:  # 3xx too: not followed (see the module), a refusal as any 4xx
            detail = raw.decode("utf-8", errors="replace").strip()[:300] or reason
            raise RemoteError(f"{where} answered HTTP {status}: {detail}", transient=is_transient_status(status))
        return _result(where, raw)

    def _exchange(
        self, where: str, connection: http.client.HTTPConnection, outgoing: Outgoing, deadline: float
    ) -> tuple[int, str, bytes]:
        """Sends ``outgoing`` on ``connection`` and reads its answer: status, reason and body (up to
        ``MAX_ANSWER_BYTES`` + 1 bytes of a success, ``ERROR_DETAIL_BYTES`` of an error). Raises ``_NoAnswer``
        when the connection failed before any byte of an answer came, ``RemoteError`` for any other failure.
        ``connection`` is left open only if its answer was read to its end."""
        received = _Received()
        connection.response_class = functools.partial(_Answer, deadline=deadline, received=received)  # type: ignore[assignment]
        try:
            connection.request("POST", outgoing.target, outgoing.body, outgoing.headers)
        except _DROPPED_ERRORS as exc:
            raise _NoAnswer(exc) from exc
        except OSError as exc:  # cannot connect (refused, TLS not verified, a timeout), or the send failed
            raise RemoteError(f"{where} unreachable: {exc}", transient=True) from exc
        except (http.client.HTTPException, ValueError) as exc:  # a proxy's answer to ``CONNECT`` it cannot read
            raise RemoteError(f"{where} unreachable: {type(exc).__name__}: {exc}", transient=True) from exc
        try:
            response = connection.getresponse()
            if response.status >= 300:
                try:
                    raw = response.read(ERROR_DETAIL_BYTES)
                except (OSError, http.client.HTTPException, ValueError):  # an error body cut short or malformed
                    raw = b""
                    connection.close()
            else:
                raw = response.read(MAX_ANSWER_BYTES + 1)  # never more than the app could carry, whatever is sent
                if len(raw) <= MAX_ANSWER_BYTES and response.length:  # a read with a limit returns a body cut
                    raise http.client.IncompleteRead(raw, response.length)  # short as it came: it is malformed
        except TimeoutError as exc:
            raise RemoteError(
                f"{where} timed out after {self.timeout_seconds}s", transient=True, timed_out=True
            ) from exc
        except _DROPPED_ERRORS as exc:
            if received.count == 0:
                raise _NoAnswer(exc) from exc
            raise RemoteError(f"{where} unreachable: {exc}", transient=True) from exc
        except OSError as exc:  # TLS failing under an answer
            raise RemoteError(f"{where} unreachable: {exc}", transient=True) from exc
        except (http.client.HTTPException, ValueError) as exc:
            # After ``build_request``, whose headers are checked: the call was sent, its answer is unreadable.
            raise RemoteError(f"{where} answered malformed HTTP: {type(exc).__name__}: {exc}", transient=True) from exc
        if not isinstance(response, _Answer):  # ``response_class`` above makes every answer one: never reached
            connection.close()
            raise TypeError(f"{where}: an answer read by {type(response).__name__}, not the pool's _Answer")
        if not response.isclosed() or not response.reusable:  # an answer not read to its end (an error's body past
            connection.close()  # its detail, one too long), or whose end the server may see elsewhere
        return response.status, response.reason, raw


def _log_resent(where: str, request: RemoteCall, idle: float, cause: OSError) -> None:
    """The one recovery of the pool (``call``): a request sent once more, on a new connection, because the kept one it
    went on was closed by the service before any byte of an answer came. Logged so that a provider's duplicate (its
    ``Idempotency-Key`` not honoured) can be traced to it, and a provider that closes idle connections sooner than
    ``IDLE_SECONDS`` be seen (``idleSeconds``: how long the connection had waited in the pool)."""
    error = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
    app_event(
        "RemoteCallResent",
        f"{where}: the kept connection was closed by the service before any answer ({error}), "
        f"idle {idle:.1f} s: the request is sent once more on a new connection, under the same idempotency key",
        service=request.service,
        action=request.action,
        orderId=request.order_id,
        idempotencyKey=request.idempotency_key,
        idleSeconds=round(idle, 3),
        reason="kept connection closed by the peer",
        error=error,
    )


def _result(where: str, raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RemoteError(f"{where} answered a body that is not UTF-8 JSON", transient=True) from exc
    try:
        # Read so that what is accepted is carried exactly (replies, activities, documents, undo
        # requests); what cannot be is refused here, with the reason, not lost after the call. It
        # acted: an unknown outcome (transient), never a refusal (see the module's docstring).
        result = read_outside_json(text) if text else {}
    except json.JSONDecodeError as exc:
        raise RemoteError(f"{where} answered a body that is not JSON", transient=True) from exc
    except ValueError as exc:
        raise RemoteError(f"{where} answered a body the app cannot carry: {exc}", transient=True) from exc
    if not isinstance(result, dict):
        raise RemoteError(f"{where} answered JSON {type(result).__name__}, not an object", transient=True)
    return result


class _NoAnswer(Exception):
    """The connection failed before any byte of an answer came (``_DROPPED_ERRORS``)."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Received:
    """How many bytes of an answer came."""

    def __init__(self) -> None:
        self.count = 0


@dataclass(frozen=True)
class Route:
    """How a base URL is reached: its scheme, host and port, the path prefix, and the proxy if one is used
    (``urllib``'s rules: ``getproxies`` and ``proxy_bypass``, read once)."""

    tls: bool
    host: str
    port: int | None
    prefix: str  # everything of the base URL after its host: ``/api`` (or the whole URL, through a proxy)
    proxy: tuple[str, str, int | None] | None = None  # scheme, host, port
    proxy_authorization: str | None = None

    @staticmethod
    def to(base_url: str) -> Route:
        parts = urllib.parse.urlsplit(base_url)
        tls = parts.scheme == "https"
        path = base_url[len(f"{parts.scheme}://{parts.netloc}") :]
        host, port = parts.hostname or "", parts.port
        proxy_url = urllib.request.getproxies().get(parts.scheme)
        if not proxy_url or urllib.request.proxy_bypass(parts.netloc):
            return Route(tls, host, port, path)
        if "://" not in proxy_url:
            proxy_url = f"{parts.scheme}://{proxy_url}"
        proxy = urllib.parse.urlsplit(proxy_url)
        authorization = None
        if proxy.username and proxy.password:
            pair = f"{urllib.parse.unquote(proxy.username)}:{urllib.parse.unquote(proxy.password)}"
            authorization = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        prefix = path if tls else base_url  # through a proxy, ``http`` asks for the absolute URL; ``https`` tunnels
        return Route(tls, host, port, prefix, (proxy.scheme, proxy.hostname or "", proxy.port), authorization)

    def outgoing(self, action: str, body: bytes, headers: dict[str, str]) -> Outgoing:
        sent = {**headers, "User-Agent": USER_AGENT}
        if self.proxy is not None and not self.tls and self.proxy_authorization:
            sent["Proxy-Authorization"] = self.proxy_authorization
        return Outgoing(f"{self.prefix}/{action}", body, sent)

    def connect(self, timeout: float, context: ssl.SSLContext | None) -> http.client.HTTPConnection:
        """A new connection (not opened yet: ``request`` opens it) to the host, or to the proxy."""
        if self.proxy is None:
            if self.tls:
                return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=context)
            return http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        scheme, host, port = self.proxy
        if self.tls:  # a CONNECT tunnel through the proxy, TLS to the host inside it (its name verified)
            tunnel = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
            authorization = {"Proxy-Authorization": self.proxy_authorization} if self.proxy_authorization else None
            tunnel.set_tunnel(self.host, self.port, headers=authorization)
            return tunnel
        if scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
        return http.client.HTTPConnection(host, port, timeout=timeout)  # any other proxy is spoken to as http


def tls_context() -> ssl.SSLContext:
    """What ``http.client`` (and so ``urllib``) makes for a connection given none: the system's CAs, the
    certificate and host name verified, HTTP/1.1 offered."""
    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    context.post_handshake_auth = True
    return context


class Pool:
    """Up to ``size`` idle keep-alive connections to one route, each idle at most ``IDLE_SECONDS``. Thread-safe:
    a call takes one (an idle one the server has not closed, or a new one) and gives it back when its answer was
    read to its end; it is never shared while a call holds it."""

    def __init__(
        self,
        connect: Callable[[float, ssl.SSLContext | None], http.client.HTTPConnection],
        timeout: float,
        size: int,
    ) -> None:
        self._connect = connect
        self._timeout = timeout
        self._size = size
        self._context: ssl.SSLContext | None = None
        self._idle: list[tuple[float, http.client.HTTPConnection]] = []  # (idle since, connection), oldest first
        self._lock = threading.Lock()

    def take(self) -> tuple[http.client.HTTPConnection, float | None]:
        """A connection and, if it was used before, how many seconds it waited idle in the pool (None: a new one)."""
        while True:
            with self._lock:
                expired = self._expire()
                since, connection = self._idle.pop() if self._idle else (0.0, None)
            for old in expired:
                old.close()
            if connection is None:
                return self.fresh(self._timeout), None
            if not _dropped(connection) and connection.sock is not None:  # (``_dropped``: a socket, not None)
                connection.sock.settimeout(self._timeout)  # a receive left it at what was left of a call's time
                return connection, time.monotonic() - since
            connection.close()

    def fresh(self, timeout: float) -> http.client.HTTPConnection:
        with self._lock:
            if self._context is None:
                self._context = tls_context()  # one per pool: loading the CAs again for each connection costs
        return self._connect(timeout, self._context)

    def give_back(self, connection: http.client.HTTPConnection) -> None:
        """Kept idle if it is open, has nothing more to read (bytes after its answer: closed) and there is room."""
        if connection.sock is None or _dropped(connection):
            connection.close()
            return
        with self._lock:
            expired = self._expire()
            kept = len(self._idle) < self._size
            if kept:
                self._idle.append((time.monotonic(), connection))
        for old in expired:
            old.close()
        if not kept:
            connection.close()

    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for _, connection in idle:
            connection.close()

    def _expire(self) -> list[http.client.HTTPConnection]:
        """Takes the connections idle longer than ``IDLE_SECONDS`` out of the pool (the lock held)."""
        cutoff = time.monotonic() - IDLE_SECONDS
        expired = [connection for since, connection in self._idle if since < cutoff]
        if expired:
            self._idle = [(since, connection) for since, connection in self._idle if since >= cutoff]
        return expired


def _dropped(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle keep-alive connection is unusable: closed, or with something to read where it should have
    nothing (the end of the stream when the server closed it, or bytes it sent after its answer), as urllib3
    checks before reusing one (``localrun/cosmos_transport.py`` too); TLS bytes already decrypted count."""
    sock = connection.sock
    if sock is None:
        return True
    try:
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        return readable_now(sock)
    except (OSError, ValueError):
        return True


def readable_now(sock: socket.socket) -> bool:
    """Whether reading ``sock`` would not wait: bytes came, the end of the stream, or an error (what
    ``select.select([sock], [], [], 0)`` says, the descriptor only: not TLS bytes already decrypted). With ``poll``:
    ``select.select`` refuses a descriptor past 1024 (``ValueError``), which a busy worker has; Windows has no
    ``poll``, and no such limit. Raises ``OSError`` for a socket closed under it."""
    if hasattr(select, "poll"):
        readable = select.poll()
        readable.register(sock, select.POLLIN)
        return bool(readable.poll(0))
    return bool(select.select([sock], [], [], 0)[0])


class _Deadline(io.RawIOBase):
    """A response's socket, read so that each receive waits at most until ``deadline`` (``time.monotonic``);
    counts the bytes that came in ``received``."""

    def __init__(self, sock: socket.socket, deadline: float, received: _Received) -> None:
        super().__init__()
        self._sock = sock
        self._raw = sock.makefile("rb", buffering=0)  # holds the socket open once the connection lets it go
        self._deadline = deadline
        self._received = received
        self.waiting = True  # False: a read returns at once, with nothing (``_Answer._close_conn``)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        if not self.waiting:
            return None  # nothing without waiting, as a non-blocking stream says it
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        self._sock.settimeout(left)
        count = self._raw.readinto(buffer)
        self._received.count += count or 0
        return count

    def close(self) -> None:
        self._raw.close()
        super().close()


class _Answer(http.client.HTTPResponse):
    """An answer read within the call's deadline, whose end the client and the server agree on, or else
    ``reusable`` False (its connection closed after it) or malformed (``HTTPException``): where they disagree,
    what the server sends next waits on the kept connection for the next call to read as its own answer."""

    def __init__(self, sock: socket.socket, *args: Any, deadline: float, received: _Received, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self._stream = _Deadline(sock, deadline, received)
        bounded = io.BufferedReader(self._stream)
        self.fp.close()
        self.fp = bounded  # type: ignore[assignment]  # a raw stream of the same socket, as ``makefile`` gives
        self.reusable = True

    def _close_conn(self) -> None:
        """At the answer's end (or a failure): bytes the server sent past it, already read into the buffer, would
        be dropped with it and the connection look clean, its framing and the server's at odds: not reused."""
        fp = self.fp
        if fp is not None and not fp.closed:
            self._stream.waiting = False
            if fp.peek(1):  # type: ignore[attr-defined]  # what is buffered, no read of the socket
                self.reusable = False
        super()._close_conn()  # type: ignore[misc]

    def _read_status(self) -> tuple[str, int, str]:
        """The final answer's status line: interim answers (1xx: 100 Continue, 102 Processing, 103 Early Hints, RFC
        9110 15.2) come before it and are skipped with their headers. ``http.client`` skips only 100 and took a 102
        or 103 for the answer: an empty success while the provider was still at work, its real answer left on the
        kept connection for the next call. A 101 (no upgrade was asked for) is malformed."""
        while True:
            version, status, reason = super()._read_status()  # type: ignore[misc]
            if status == http.HTTPStatus.SWITCHING_PROTOCOLS:
                raise http.client.HTTPException(f"101 {reason.strip()} to a request that asked for no upgrade")
            if not 100 <= status < 200:
                return version, status, reason
            http.client.parse_headers(self.fp)  # type: ignore[arg-type]  # an interim answer's headers

    def _read_next_chunk_size(self) -> int:
        size: int = super()._read_next_chunk_size()  # type: ignore[misc]
        if size < 0:  # ``int(line, 16)`` takes "-1", and ``http.client`` then read the whole stream, unbounded
            self._close_conn()  # type: ignore[attr-defined]
            raise ValueError(f"chunk size {size}")  # malformed (``IncompleteRead``), as one not hex
        return size

    def begin(self) -> None:
        super().begin()
        lengths = {value.strip() for value in self.headers.get_all("Content-Length", [])}
        codings = self.headers.get_all("Transfer-Encoding", [])
        if len(lengths) > 1:  # RFC 9112 6.3: an unrecoverable error; ``http.client`` took the first
            raise http.client.HTTPException(f"Content-Length given as {', '.join(sorted(lengths))}")
        if codings and [c.strip().lower() for c in ",".join(codings).split(",")] != ["chunked"]:
            # ``http.client`` reads only chunked and otherwise framed the answer by its Content-Length, where the
            # server meant another coding's end or the connection's
            raise http.client.HTTPException(f"Transfer-Encoding {', '.join(codings)!r} cannot be read")
        if self.status in (http.HTTPStatus.NO_CONTENT, http.HTTPStatus.NOT_MODIFIED):
            # no body, whatever its headers say (RFC 9112 6.3); ``http.client`` would read a chunked one
            self.chunked, self.length = False, 0
            self.reusable = not codings and lengths <= {"0"}
        elif codings and lengths:  # the coding wins (RFC 9112 6.1), but the two disagree: "ought to be an error"
            self.reusable = False
