"""The Durable extension's HTTP API on loopback, so the app's functions get the SDK's own
``azure.durable_functions.DurableOrchestrationClient`` and it talks HTTP to the runner's
``DurableEngine`` exactly as it talks to the extension in Azure.

``DurableExtensionApi.start`` binds 127.0.0.1 on a free port and serves in a daemon thread;
``client_binding_json`` is the string the host passes to a ``durableClient`` input binding, with
``rpcBaseUrl`` pointing here. What each request answers is ``extension_api.handlers``; see
``localrun/durable/extension_api/__init__.py`` for the sources (the HTTP API reference,
https://learn.microsoft.com/azure/azure-functions/durable/durable-functions-http-api, and the
extension's ``HttpApiHandler.cs``).

Threads: one handler thread per connection; engine calls are serialised by ``lock`` (the caller's
invocation is blocked awaiting the answer meanwhile). Do not hold ``lock`` around engine work that
can itself call the durable client (an activity using a client would deadlock on it).

The event loop: the SDK keeps one ``aiohttp.ClientSession`` per process, created on the loop of the
first call and never moved. Every client call must run on that one loop (the Functions worker has
one loop per process); a call on a second loop fails (see the tests).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from localrun.durable.engine import DurableEngine
from localrun.durable.extension_api.handlers import Answer, ExtensionApi
from localrun.durable.extension_api.urls import ExtensionUrls

DEFAULT_TASK_HUB = "OrdersTaskHub"  # host.json extensions.durableTask.hubName


class DurableExtensionApi:
    def __init__(self, engine: DurableEngine, *, task_hub: str = DEFAULT_TASK_HUB) -> None:
        self._engine = engine
        self._task_hub = task_hub
        self.lock = threading.Lock()  # held around every engine call a request makes
        self.requests = 0  # HTTP requests served (counted before they are answered)
        # A fault hook at the HTTP edge, below the SDK's client: called with (method, path) before a request
        # is answered; a test blocks in it to stand for an extension that answers late (a stalled storage
        # backend: the SDK's client waits up to 240 s, its aiohttp session's total timeout), or returns the
        # Answer to send instead of carrying the request out (a 500 the extension answers when its storage fails).
        self.before_answer: Callable[[str, str], Answer | None] = lambda method, path: None
        self._count_lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._urls: ExtensionUrls | None = None

    def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("the Durable extension API is already serving")
        server = _Server(("127.0.0.1", 0), _Handler)
        host, port = server.server_address[:2]
        self._urls = ExtensionUrls(origin=f"http://{host!s}:{port}", task_hub=self._task_hub)
        server.api = ExtensionApi(self._engine, self._urls, self.lock)
        server.on_request = self._count
        server.before_answer = self._before_answer  # the hook as set when a request comes
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="durable-extension-api", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.shutdown()  # stops accepting; then drop kept-alive connections the client pools
        server.close_connections()
        server.server_close()
        thread.join()
        self._server = self._thread = None

    @property
    def base_url(self) -> str:
        """The webhook base, with a trailing slash: ``http://127.0.0.1:PORT/runtime/webhooks/durabletask/``."""
        return self._started().base_url + "/"

    @property
    def rpc_base_url(self) -> str:
        """Where the Python client sends every call: ``http://127.0.0.1:PORT/durabletask/``."""
        return self._started().rpc_base_url

    def client_binding_json(self) -> str:
        """What the host passes to a ``durableClient`` input binding."""
        return self._started().client_binding_json()

    def _started(self) -> ExtensionUrls:
        if self._urls is None:
            raise RuntimeError("start() the Durable extension API first")
        return self._urls

    def _before_answer(self, method: str, path: str) -> Answer | None:
        return self.before_answer(method, path)

    def _count(self) -> None:
        with self._count_lock:
            self.requests += 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    api: ExtensionApi

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self.on_request: Callable[[], None] = lambda: None
        self.before_answer: Callable[[str, str], Answer | None] = lambda method, path: None
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def track(self, connection: socket.socket, *, open_: bool) -> None:
        with self._connections_lock:
            if open_:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections, self._connections = self._connections, set()
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by the client
                connection.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as aiohttp's pooled connections expect
    disable_nagle_algorithm = True  # headers and body leave at once (no delayed-ACK stall)
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, open_=True)

    def finish(self) -> None:
        self.server.track(self.connection, open_=False)
        super().finish()

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        self.server.on_request()
        answer = self.server.before_answer(self.command, self.path) or self.server.api.handle(
            self.command, self.path, self.headers.get("Content-Type"), body
        )
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up waiting (its timeout)
            self._write(answer)

    def _write(self, answer: Answer) -> None:
        self.send_response(answer.status)
        for name, value in answer.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        if answer.body:
            self.wfile.write(answer.body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: one line per request on stderr would drown a run."""
