"""``python -m localrun serve``: the live local demo. The simulation runs at ``speed``× real time (the
simulated clock follows the wall clock instead of skipping ahead), and the app's own HTTP functions,
the ops API and the console, answer on ``http://127.0.0.1:PORT`` through the runner's host: each
request is handed to the simulation loop (``LocalHost.submit_http``) and invoked through the Functions
runtime as a virtual-time task, like every other invocation.

The operator is the developer: ``OPS_LOCAL_PRINCIPAL`` is set for this run only (both app roles), so
review pauses wait for a person at the console (``--review-timeout`` simulated seconds, then the
configured default action). It serves until interrupted (Ctrl-C, SIGTERM, SIGHUP), then prints the usual
summary.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType

from localrun.host import LocalHost
from localrun.worker.http import HttpAnswer, HttpRequestData

LOCAL_OPERATOR = "developer@localhost:Orders.Read,Orders.Operate"
ANSWER_TIMEOUT_S = 30.0
MAX_REQUEST_BYTES = 64 * 1024
IDLE_WAIT_S = 0.1
SETTLED_LOOK_S = 1.0  # at most once a wall second: the look reads the broker's queues and every record


@dataclass
class Pacer:
    """Maps wall time to simulated time: ``speed`` simulated seconds per real second."""

    speed: float
    sim_start: datetime
    wall_start: float

    def target(self) -> datetime:
        return self.sim_start + timedelta(seconds=(time.monotonic() - self.wall_start) * self.speed)


def _host_headers(received: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The request's headers as the Functions host hands them to the worker (``RpcHttp.headers``: names in lower
    case, a header sent several times as its values joined by commas, ASP.NET Core's ``StringValues.ToString``):
    two ``Content-Type`` or ``Sec-Fetch-Site`` headers reach the app as one value it refuses, not as the last one."""
    values: dict[str, list[str]] = {}
    for name, value in received:
        values.setdefault(name.lower(), []).append(value)
    return {name: ",".join(v for v in given if v) for name, given in values.items()}  # ToString skips empty ones


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        host = str(self.headers.get("Host") or "").strip().lower()
        if host not in self.server.own_hosts:  # DNS rebinding: a page whose name now resolves here
            self._write(_text(421, f"this server answers http://{self.server.origin_host} only, not Host {host!r}"))
            return
        if self.path in ("/", "/index.html"):
            self._write(HttpAnswer(302, {"Location": "/api/ops/console"}, b""))
            return
        length_text = str(self.headers.get("Content-Length") or "0").strip()
        if not (length_text.isascii() and length_text.isdigit()):
            self._write(_text(400, f"Content-Length {length_text[:40]!r} is not a number"))
            self.close_connection = True  # the body, if any, cannot be skipped
            return
        if len(length_text) > len(str(MAX_REQUEST_BYTES)) or int(length_text) > MAX_REQUEST_BYTES:
            self._write(HttpAnswer(413, {}, b""))
            self.close_connection = True  # its body is not read
            return
        length = int(length_text)
        body = self.rfile.read(length) if length > 0 else b""
        url = f"http://{self.server.origin_host}{self.path}"
        request = HttpRequestData(self.command, url, _host_headers(self.headers.items()), body)
        future = self.server.host.submit_http(request)
        self.server.wake.set()
        try:
            answer = future.result(timeout=ANSWER_TIMEOUT_S)
        except TimeoutError:
            answer = HttpAnswer(503, {"Content-Type": "text/plain"}, b"the simulation did not answer in time")
        self._write(answer)

    def _write(self, answer: HttpAnswer) -> None:
        self.send_response(answer.status)
        for name, value in answer.headers.items():
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        if answer.body and self.command != "HEAD":
            self.wfile.write(answer.body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the console polls every few seconds."""


def _text(status: int, message: str) -> HttpAnswer:
    return HttpAnswer(status, {"Content-Type": "text/plain; charset=utf-8"}, message.encode())


class PortUnavailable(Exception):
    """The console's port cannot be listened on (another ``serve`` or ``func start`` holds it)."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, host: LocalHost, wake: threading.Event) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.host = host
        self.wake = wake
        self.origin_host = f"127.0.0.1:{self.server_address[1]}"
        # the names a browser on this machine reaches the server by; any other Host is not addressed to it
        self.own_hosts = {self.origin_host, f"localhost:{self.server_address[1]}"}


def paced_drive(
    speed: float,
    port: int,
    stop_event: threading.Event,
    on_ready: Callable[[str], None],
    exit_when_done: bool = False,
    on_settled: Callable[[], None] | None = None,
) -> Callable[[LocalHost, datetime, Callable[[], bool], Callable[[], datetime | None], Callable[[], None]], None]:
    """A ``SimulationConfig.drive``: serves HTTP on 127.0.0.1:``port`` and runs the simulation with the
    simulated clock following the wall clock × ``speed``, until ``stop_event`` is set (or, with
    ``exit_when_done``, the run is quiet). ``on_settled`` is called each time the run becomes quiet (every order
    settled, nothing due): the developer knows the figures are final, until they act in the console again."""

    def drive(
        host: LocalHost,
        horizon: datetime,
        stop: Callable[[], bool],
        external_due: Callable[[], datetime | None],
        before_pump: Callable[[], None],
    ) -> None:
        wake = threading.Event()
        try:
            server = _Server(port, host, wake)
        except OSError as exc:
            raise PortUnavailable(
                f"cannot listen on 127.0.0.1:{port} ({exc.strerror or exc}): another `serve` or `func start` may "
                "hold it; pass --port N, or --port 0 for any free port"
            ) from exc
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        thread.start()
        pacer = Pacer(speed, host.clock.now(), time.monotonic())
        settled = False
        next_look = 0.0  # when, on the wall clock, whether the run is quiet is next looked at
        try:
            on_ready(f"http://{server.origin_host}/api/ops/console")
            while not stop_event.is_set():
                before_pump()
                host.pump()
                if host.scheduler.run_one():
                    continue
                if exit_when_done or time.monotonic() >= next_look:
                    next_look = time.monotonic() + SETTLED_LOOK_S
                    quiet = stop()
                    if quiet and exit_when_done:
                        return
                    if quiet and not settled and on_settled is not None:
                        on_settled()
                    settled = quiet
                target = min(pacer.target(), horizon)
                due = [d for d in (host.next_due(), external_due()) if d is not None]
                upcoming = min(due) if due else None
                if upcoming is not None and upcoming <= target:
                    host.clock.advance_to(upcoming)
                    continue
                host.clock.advance_to(target)
                wait = IDLE_WAIT_S if upcoming is None else (upcoming - target).total_seconds() / speed
                wake.wait(timeout=min(max(wait, 0.0), IDLE_WAIT_S))
                wake.clear()
        finally:
            server.shutdown()
            server.server_close()
            thread.join()

    return drive


def install_stop_signals(stop_event: threading.Event) -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        stop_event.set()

    for number in (signal.SIGTERM, signal.SIGINT, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])):
        signal.signal(number, handler)


def announce(url: str) -> None:
    print(f"console: {url}   (Ctrl-C stops)", flush=True)


def announce_settled() -> None:
    print(
        "\nevery order has settled and nothing is due: the figures are final unless you act in the console "
        "(Ctrl-C stops and prints the summary)",
        flush=True,
    )
    sys.stderr.flush()
