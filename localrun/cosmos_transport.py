"""A lighter HTTP path for the runner's Cosmos DB client, for a server on this machine.

The production adapters still issue every call through the ``azure-cosmos`` SDK (request building,
authorisation signatures, session and retry handling, response and error mapping), and the calls
still go over HTTPS with keep-alive to the Cosmos DB protocol server. What changes is below the SDK:

- the transport is ``http.client`` on a few persistent TLS connections instead of ``requests`` +
  ``urllib3`` (about half of the SDK's per-request CPU time went there);
- the pipeline keeps only the SDK's own connection retry policy and the headers policy (headers the SDK hands to
  the pipeline), dropping the policies that only log, trace, set headers nobody reads or decode a body the SDK
  decodes again itself.

As urllib3 under the stock pipeline, it never sends a request twice: an idle connection the server closed is
replaced before a request goes out on it, and a request whose answer is lost fails with ``ServiceResponseError``
(it may have been carried out; the SDK retries a read, never a write).

Measured per point read against ``@vercel/cosmosdb-server``: about 1.1 ms with the stock client,
about 0.55 ms with this one.
"""

from __future__ import annotations

import http.client
import select
import ssl
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.core.pipeline import Pipeline
from azure.core.pipeline.transport import HttpRequest, HttpResponse, HttpTransport
from azure.core.utils import case_insensitive_dict

if TYPE_CHECKING:
    from azure.cosmos import CosmosClient


def _dropped(connection: http.client.HTTPSConnection) -> bool:
    """Whether an idle keep-alive connection was closed by the server: it has something to read (the end of the
    stream) where it should have nothing, as urllib3 checks before reusing one (``is_connection_dropped``)."""
    sock = connection.sock
    if sock is None:
        return True
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


class LoopbackResponse(HttpResponse):
    """An azure-core response over an ``http.client`` one, its body read in full at once (so the
    connection is free for the next request)."""

    def __init__(self, request: HttpRequest, response: http.client.HTTPResponse) -> None:
        super().__init__(request, response)
        self.status_code = response.status
        self.headers = case_insensitive_dict(response.getheaders())
        self.reason = response.reason
        self.content_type = self.headers.get("Content-Type")
        self._body = response.read()

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
    ) -> None:
        self._host = host
        # Given a request's method, path and headers, the fault the server is to answer instead (its
        # ``x-localrun-fault`` header, ``localrun/cosmos_faults.cjs``), or None (``localrun/service_faults.py``)
        self._faults = faults
        self._port = port
        self._timeout = timeout
        self._tls = ssl._create_unverified_context()
        self._idle: list[http.client.HTTPSConnection] = []
        self._lock = threading.Lock()
        self.connections_opened = 0

    def _take(self) -> http.client.HTTPSConnection:
        """An idle connection the server has not closed, or a new one."""
        while True:
            with self._lock:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return self._open()
            if not _dropped(connection):
                return connection
            connection.close()

    def _open(self) -> http.client.HTTPSConnection:
        with self._lock:
            self.connections_opened += 1
        return http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout, context=self._tls)

    def send(self, request: HttpRequest, **kwargs: Any) -> HttpResponse:
        """Sends ``request`` once: a request whose answer is lost is never sent again here (it may have been carried
        out), as with the production pipeline's ``requests``/urllib3, which does not retry one either; the SDK's
        policies decide (a read again, a write not: the app gets ``ServiceResponseError``)."""
        parts = urlsplit(request.url)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        body: Any = request.data
        if isinstance(body, str):
            body = body.encode("utf-8")
        connection = self._take()
        try:
            if connection.sock is None:
                connection.connect()
        except OSError as exc:  # nothing sent (urllib3's NewConnectionError)
            connection.close()
            raise ServiceRequestError(f"cannot connect to the Cosmos DB server: {exc}", error=exc) from exc
        try:  # sent, or partly: urllib3's ProtocolError, what azure-core makes a ServiceResponseError
            headers = request.headers
            fault = self._faults(request.method, parts.path, request.headers) if self._faults is not None else None
            if fault is not None:  # on this try only: the SDK sends the same request object again
                headers = {**headers, "x-localrun-fault": fault}
            connection.request(request.method, target, body=body, headers=headers)
            response = LoopbackResponse(request, connection.getresponse())
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise ServiceResponseError(f"no answer from the Cosmos DB server: {exc}", error=exc) from exc
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
