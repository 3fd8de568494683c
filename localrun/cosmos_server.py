"""Starts and stops ``@vercel/cosmosdb-server`` (the Cosmos DB protocol, in memory) from the
project's ``node_modules``. Used by the tests and by the local runner. Through ``cosmos_server.cjs``,
which refuses what Azure refuses and the server would take: a cross-partition ORDER BY (or DISTINCT,
GROUP BY, aggregate) query resumed from a continuation token is a 400, as the azure-cosmos SDK cannot
resume one on Azure (docs/testing.md). ``ranges``: containers split into partition key ranges, served as the
gateway serves a partitioned container (``cosmos_ranges.cjs``). Items expire as time to live says
(``cosmos_ttl.cjs``). A server that exits unasked (killed, out of memory) is noticed at once: the runner stops
with ``ServerDied`` instead of waiting through the SDK's connection retries for ever. So is one that hangs
(``Liveness``: suspended, or not answering a liveness probe while it has the CPU or sleeps): the runner ends it."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

from localrun.affinity import forget_helper, place_helper

if TYPE_CHECKING:
    from azure.cosmos import CosmosClient

ROOT = Path(__file__).resolve().parent.parent
# The Cosmos DB emulator's published, well-known key (not a secret).
EMULATOR_KEY = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="


def _read_lines(stream: IO[bytes], lines: queue.Queue[str | None]) -> None:
    """Every line of ``stream`` onto ``lines`` until it ends, then ``None``: the server's announcement
    first, and whatever it writes after is drained so it never blocks on a full pipe."""
    with stream:
        for line in stream:
            lines.put(line.decode(errors="replace").strip())
    lines.put(None)


STDERR_KEPT = 50  # node's last stderr lines kept: its error when it exits
STDERR_SHOWN = 5  # of them, those a death during the run shows
REFUSED_WAIT_S = 2.0  # a connection refused: how long the server's exit (its reaping) is waited for


def _watch(proc: subprocess.Popen[bytes], stream: IO[bytes], tail: deque[str], exited: Callable[[int], None]) -> None:
    """Keeps the last lines of node's ``stream`` (stderr, drained so it never blocks on a full pipe) in ``tail``;
    at its end (node exits: nothing else holds it), waits for the exit and hands its code to ``exited``."""
    with stream:
        for line in stream:
            tail.append(line.decode(errors="replace").rstrip())
    exited(proc.wait())


def _how_it_ended(code: int) -> str:
    """``exited with code 3``, ``was killed by SIGKILL``."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


@dataclass(frozen=True)
class Liveness:
    """When a server that still runs counts as dead (Linux: read from ``/proc/PID/stat``; elsewhere never).

    ``suspended_s``: in state T or t (SIGSTOP, a debugger) at every look for this long, its CPU time unchanged. A
    process throttled by stops and continues (``cpulimit``) runs between them, so it is not suspended.

    A liveness probe (``GET /_localrun/alive``, answered before any other handler) goes out every ``probe_every_s``
    and waits as long as it takes. It counts as unanswered only in two cases that load cannot cause. ``spinning_cpu_s``:
    the server used this much CPU time since the probe went out (its event loop never got to a 1 ms answer). On a
    loaded machine the server gets CPU time more slowly; it does not need more of it. ``asleep_s``: the server was
    asleep (state S) at every look for this long. A server with work waits for the CPU as runnable (R), or for the disk
    (D); it is not asleep. A server that is runnable but starved is slow, never dead.

    Looks are ``look_every_s`` apart. When two looks are more than ``LOOK_GAP_S`` apart (this process was not run),
    every span starts again."""

    suspended_s: float = 5.0
    spinning_cpu_s: float = 30.0
    asleep_s: float = 30.0
    probe_every_s: float = 2.0
    look_every_s: float = 0.5


LOOK_GAP_S = 2.0  # two looks further apart than this: the watcher itself was not run, what it saw between is unknown
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> tuple[str, float] | None:
    """``pid``'s state letter (R, S, D, T, t, Z...) and CPU seconds (user and system, all threads) from
    ``/proc/PID/stat``; None when it cannot be read (not Linux, or the process is gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": the command name may hold spaces
    return fields[0], (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # fields 3, 14 and 15 of proc(5)


class _Probe:
    """Asks ``GET /_localrun/alive`` on a keep-alive connection of its own, one request at a time, on a daemon thread:
    ``outstanding`` is the number of the probe sent and not yet answered (None between probes)."""

    def __init__(self, port: int, every_s: float, halt: threading.Event) -> None:
        self.outstanding: int | None = None
        self._port = port
        self._every_s = every_s
        self._halt = halt
        threading.Thread(target=self._run, name="cosmos-server-probe", daemon=True).start()

    def _run(self) -> None:
        import http.client
        import ssl

        sent = 0
        connection: http.client.HTTPSConnection | None = None
        while not self._halt.wait(self._every_s):
            sent += 1
            self.outstanding = sent
            try:
                if connection is None:
                    connection = http.client.HTTPSConnection(
                        "127.0.0.1", self._port, timeout=None, context=ssl._create_unverified_context()
                    )
                connection.request("GET", "/_localrun/alive")
                connection.getresponse().read()
            except (OSError, http.client.HTTPException):  # exiting, or ended: the stderr watcher tells of it
                if connection is not None:
                    connection.close()
                connection = None
            self.outstanding = None
        if connection is not None:
            connection.close()


class ServerDied(BaseException):
    """The server exited while the run used it, unasked (killed, out of memory, crashed), or hung and was ended
    (``Liveness``): the run cannot go on. A
    ``BaseException``, as ``KeyboardInterrupt`` is: neither the SDK's retry policies nor the app's ``except
    Exception`` take it for a transient Cosmos DB error to retry (each try slept seconds of real time through the
    SDK's connection retries, and the run went idle for ever); it ends the task that met it, and the runner's loop
    stops the run (``CosmosServer.death``, ``check``). The message names the server, its pid, how it ended and its
    last stderr lines."""


class ServerUnavailable(RuntimeError):
    """The server could not be started: Node.js or ``node_modules`` missing, or node exited (or stayed silent)
    before it listened; the message says which, with node's own error."""


def _node_options_note() -> str:
    """A hint when ``NODE_OPTIONS`` is set: node reads it, so another project's (a ``--require`` of a file
    not here, an ``--inspect`` port) changes how the server starts."""
    options = os.environ.get("NODE_OPTIONS", "").strip()
    return f" (NODE_OPTIONS is set, and node reads it: {options!r}; try again without it)" if options else ""


class CosmosServer:
    """``with CosmosServer() as server: server.endpoint`` — an empty account on a free port.

    The port is the one the server itself bound (port 0: the system picks it at listen time), never
    one picked beforehand: between picking a port and listening on it another process (a second test
    session running at the same time) could take it, and a readiness probe would then connect to that
    process's listener and take it for this server."""

    def __init__(self, port: int = 0, ranges: int = 1, liveness: Liveness | None = None) -> None:
        """``ranges``: the physical partition key ranges every container is split into (``cosmos_ranges.cjs``:
        the gateway's query plan and one query per range, merged by the SDK, as on Azure for a partitioned
        container); 1, the default: one, every cross-partition query answered whole by the server. ``liveness``:
        when a server that hangs counts as dead (``Liveness()``, the default)."""
        if ranges < 1:
            raise ValueError(f"a container has at least one partition key range, not {ranges}")
        self.port = port
        self.ranges = ranges
        self.endpoint = f"https://127.0.0.1:{port}"
        self.key = EMULATOR_KEY
        self._proc: subprocess.Popen[bytes] | None = None
        self._watcher: threading.Thread | None = None
        self._stderr: deque[str] = deque(maxlen=STDERR_KEPT)
        self._stopping = False  # ``stop`` was called: an exit from now on is asked for
        self._exited = threading.Event()
        self.liveness = liveness or Liveness()
        self._halt = threading.Event()  # set by ``stop``: the liveness watcher and its probe end
        # what the run stops with (``ServerDied``'s message) once the server exited unasked; None while it runs
        self.death: str | None = None

    def start(self, timeout: float = 30.0) -> CosmosServer:
        modules = ROOT / "node_modules"
        if not (modules / "@vercel" / "cosmosdb-server").exists():
            raise ServerUnavailable(f"{modules}/@vercel/cosmosdb-server is missing: run `npm ci` (dev.py does)")
        node = shutil.which("node")
        if node is None:
            raise ServerUnavailable("Node.js 20+ is required for the Cosmos DB protocol server: node is not on PATH")
        # stdin stays open here: the server exits when it ends, so it stops with this process however that ends.
        # A session of its own: Ctrl-C in a terminal (SIGINT to the whole foreground process group) reaches this
        # process alone, which stops the server (``stop``) after what it still reads from it (``serve``'s summary).
        self._proc = subprocess.Popen(
            [node, str(Path(__file__).with_name("cosmos_server.cjs")), str(modules), str(self.port), str(self.ranges)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "NODE_NO_WARNINGS": "1"},
            start_new_session=os.name != "nt",
        )
        stdout, stderr = self._proc.stdout, self._proc.stderr
        if stdout is None or stderr is None:  # for the type checker: PIPE gives both
            raise RuntimeError("cosmosdb-server was started without its stdout and stderr pipes")
        self._stopping = False
        self._exited.clear()
        self.death = None
        self._stderr.clear()
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_read_lines, args=(stdout, lines), daemon=True).start()
        self._watcher = threading.Thread(
            target=_watch,
            args=(self._proc, stderr, self._stderr, self._on_exit),
            name="cosmos-server-watch",
            daemon=True,
        )
        self._watcher.start()
        deadline = time.monotonic() + timeout
        announced = None
        while announced is None:
            try:
                line = lines.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                self.stop()
                note = _node_options_note()
                raise ServerUnavailable(f"cosmosdb-server did not listen within {timeout}s{note}") from None
            if line is None:
                code = self._proc.wait(timeout=10)
                self._watcher.join(timeout=10)  # it read node's stderr to its end
                err = "\n".join(self._stderr)
                self.stop()
                raise ServerUnavailable(
                    f"cosmosdb-server exited with {code} before it listened{_node_options_note()}: {err.strip()}"
                )
            if line.startswith("listening "):
                announced = line
        self.port = int(announced.split()[1])
        self.endpoint = f"https://127.0.0.1:{self.port}"
        place_helper(self._proc.pid)  # the cores the runner left, when it keeps to one (localrun.affinity)
        self._halt = threading.Event()
        threading.Thread(
            target=self._watch_liveness,
            args=(self._proc, _Probe(self.port, self.liveness.probe_every_s, self._halt), self._halt),
            name="cosmos-server-liveness",
            daemon=True,
        ).start()
        return self

    def _watch_liveness(self, proc: subprocess.Popen[bytes], probe: _Probe, halt: threading.Event) -> None:
        """Looks at the server's state and CPU time every ``look_every_s`` (``Liveness``); once it hangs, ``_hung``. Its
        end (the server ended, or ``stop``) ends the probe."""
        try:
            self._look(proc, probe, halt)
        finally:
            halt.set()

    def _look(self, proc: subprocess.Popen[bytes], probe: _Probe, halt: threading.Event) -> None:
        live = self.liveness
        last = time.monotonic()
        suspended: tuple[float, float] | None = None  # since when (monotonic, CPU seconds) it is suspended
        probe_seen: tuple[int | None, float, float] = (None, last, 0.0)  # the probe out, since when, CPU then
        asleep = True  # asleep at every look since the probe went out
        while not halt.wait(live.look_every_s):
            now, stat = time.monotonic(), _stat(proc.pid)
            if stat is None or proc.returncode is not None:
                return  # exited (the stderr watcher tells of it), or no /proc here
            state, cpu = stat
            if now - last > LOOK_GAP_S:  # this process was not run: start every span again
                suspended, probe_seen, asleep = None, (None, now, cpu), True
            last = now
            if state in ("T", "t"):
                suspended = suspended if suspended is not None and suspended[1] == cpu else (now, cpu)
                if now - suspended[0] >= live.suspended_s:
                    self._hung(
                        proc, f"was suspended (state {state}: SIGSTOP, or a debugger) for {live.suspended_s:g} s"
                    )
                    return
            else:
                suspended = None
            if probe.outstanding is None or probe.outstanding != probe_seen[0]:
                probe_seen, asleep = (probe.outstanding, now, cpu), state == "S"
                continue
            asleep = asleep and state == "S"
            if cpu - probe_seen[2] >= live.spinning_cpu_s:
                self._hung(
                    proc, f"did not answer a liveness probe through {live.spinning_cpu_s:g} s of its own CPU time"
                )
                return
            if asleep and now - probe_seen[1] >= live.asleep_s:
                self._hung(proc, f"did not answer a liveness probe for {live.asleep_s:g} s, asleep all the while")
                return

    def _hung(self, proc: subprocess.Popen[bytes], how: str) -> None:
        """The server hangs (``how``): ``death`` says so, and it is killed, so every request waiting on it fails at
        once and raises ``ServerDied`` (``connection_failed``), as after a death."""
        if self._stopping or self.death is not None:
            return
        self.death = self._death_of(proc.pid, f"{how} during the run, so the runner ended it")
        proc.kill()

    def _on_exit(self, code: int) -> None:
        """The watcher's word that node exited with ``code``: unasked, ``death`` says how (``ServerDied``)."""
        if not self._stopping and self.death is None:  # else ended as asked, or by ``_hung`` (its death says why)
            pid = self._proc.pid if self._proc is not None else "?"
            self.death = self._death_of(pid, f"{_how_it_ended(code)} during the run")
        self._exited.set()

    def _death_of(self, pid: int | str, how: str) -> str:
        """``ServerDied``'s message: the server, its pid, ``how`` it ended and its last stderr lines."""
        shown = [line[:200] for line in list(self._stderr)[-STDERR_SHOWN:]]
        said = " | ".join(shown) if shown else "nothing"
        return f"the Cosmos DB protocol server (node cosmos_server.cjs, pid {pid}) {how}; its last stderr lines: {said}"

    def check(self) -> None:
        """Raises ``ServerDied`` once the server has exited unasked (``death`` set). The runner's loop reads ``death``
        between tasks and calls this when it is set."""
        if self.death is not None:
            raise ServerDied(self.death)

    def connection_failed(self, refused: bool) -> None:
        """Called by the runner's transport when a request fails on its connection (never on the way of a request
        answered): raises ``ServerDied`` when the server has exited unasked. ``refused``: nothing listens on its
        port, which on this machine means it is exiting, so its exit is waited for (``REFUSED_WAIT_S``)."""
        if refused:
            self._exited.wait(REFUSED_WAIT_S)
        self.check()

    def stop(self) -> None:
        self._stopping = True
        self._halt.set()
        if self._proc is not None:
            forget_helper(self._proc.pid)  # before it is reaped: then the pid may be another process's
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            if self._watcher is not None:
                self._watcher.join(timeout=5)  # it closes stderr, read to its end
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        self._proc = None
        self._watcher = None

    def set_faults(self, rules: list[dict[str, Any]]) -> None:
        """Replaces the server's fault rules (``localrun/cosmos_faults.cjs``: the statuses the SDK's own retry
        policies act on, answered by the server) and empties its log of faults answered; ``[]``: none."""
        self._faults("POST", json.dumps({"rules": rules}))

    def faults_answered(self) -> list[dict[str, Any]]:
        """Every fault the server answered since the rules were set, in order: ``op``, ``partitionKey``,
        ``status``, ``commit``."""
        answered: list[dict[str, Any]] = self._faults("GET", None)["answered"]
        return answered

    def set_auth(
        self, principals: list[str] | None, audiences: list[str] | None = None, readers: list[str] | None = None
    ) -> None:
        """Microsoft Entra ID only, as a deployed account (``localrun/cosmos_auth.cjs``): every request needs a
        token, unexpired, for one of ``audiences``, of one of ``principals`` (client ids: the data role's holders)
        or of ``readers`` (the Data Reader role's: reads and queries only), and no database or container is created,
        replaced or deleted; None: off (any request, as before). Empties the log ``auth_log`` reads."""
        body = (
            {}
            if principals is None
            else {"principals": principals, "audiences": audiences or [], "readers": readers or []}
        )
        self._control("/_localrun/auth", "POST", json.dumps(body))

    def auth_log(self) -> dict[str, Any]:
        """Since ``set_auth``: ``key`` (key-signed requests), ``aad`` (token requests), ``tokens`` (distinct tokens)
        and ``refused`` (each refusal's ``status``, ``substatus``, ``reason``, ``method``, ``path``)."""
        return self._control("/_localrun/auth", "GET", None)

    def range_counts(self) -> dict[str, int]:
        """What a server of more than one range served (``localrun/cosmos_ranges.cjs``): ``pkranges`` reads,
        ``notServable`` (the gateway's 400/1004 to a query it cannot serve across ranges), query ``plans`` and
        ``rangeQueries`` (queries of one partition key range), since it started; ``ranges``: how many."""
        return self._control("/_localrun/ranges", "GET", None)

    def set_clock_offset(self, seconds: float) -> None:
        """Moves the server's clock ``seconds`` ahead of this machine's (``localrun/cosmos_ttl.cjs``): the ``_ts`` of
        every later write and the time items expire by (time to live); 0: the machine's clock again."""
        self._control("/_localrun/clock", "POST", json.dumps({"offsetSeconds": seconds}))

    def _faults(self, method: str, body: str | None) -> dict[str, Any]:
        return self._control("/_localrun/faults", method, body)

    def _control(self, route: str, method: str, body: str | None) -> dict[str, Any]:
        import http.client
        import ssl

        connection = http.client.HTTPSConnection(
            "127.0.0.1", self.port, timeout=10, context=ssl._create_unverified_context()
        )
        try:
            connection.request(method, route, body=body, headers={"content-type": "application/json"})
            response = connection.getresponse()
            text = response.read().decode()
        except (OSError, http.client.HTTPException) as exc:  # the runner's own requests: a dead server says so too
            self.connection_failed(isinstance(exc, ConnectionRefusedError))
            raise
        finally:
            connection.close()
        if response.status != 200:
            raise ValueError(f"the Cosmos DB server refused {method} {route}: {text}")
        result: dict[str, Any] = json.loads(text)
        return result

    def client(self) -> CosmosClient:
        """A Cosmos SDK client for this server (self-signed TLS, hence no verification)."""
        import urllib3
        from azure.cosmos import CosmosClient

        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        warnings.filterwarnings("ignore", message="Unverified HTTPS request")
        import requests
        from azure.core.pipeline.transport import RequestsTransport

        session = requests.Session()
        session.trust_env = False  # loopback only: skip re-reading proxy variables on every request
        transport = RequestsTransport(session=session, session_owner=False)
        return CosmosClient(self.endpoint, credential=self.key, connection_verify=False, transport=transport)

    def fast_client(self, faults: Callable[[str, str, Mapping[str, str]], str | None] | None = None) -> CosmosClient:
        """The same SDK client with a lighter HTTP path under it (``localrun.cosmos_transport``):
        what the simulation uses, where Cosmos requests are most of the time. ``faults``: what the server
        answers a request instead, by its method, path and headers (``localrun/service_faults.py``). A request
        that fails on its connection to a server that exited unasked raises ``ServerDied``, not the SDK's errors
        it retries."""
        from azure.cosmos import CosmosClient

        from localrun.cosmos_transport import LoopbackTransport, use_lean_pipeline

        transport = LoopbackTransport("127.0.0.1", self.port, faults=faults, connection_failed=self.connection_failed)
        client = CosmosClient(self.endpoint, credential=self.key, connection_verify=False, transport=transport)
        use_lean_pipeline(client, transport)
        return client

    def __enter__(self) -> CosmosServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
