"""A server the runner started dies during the run (killed, out of memory, crashed): the run stops within seconds,
says in one line which server died, how (exit code or signal) and its last stderr lines, writes no report and exits
2. Before, every store call slept through the SDK's connection retries in real time, in tasks that never finished:
``simulate`` and ``serve`` went idle for ever, and ``fuzz`` reported the seed only at its ``--timeout`` (30 min)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from azure.cosmos import PartitionKey

from localrun.cosmos_server import CosmosServer, ServerDied
from tests.localrun.test_cli_interrupts import PROFILE, descendants, gone, started

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")

STOPPED_WITHIN_S = 60.0  # generous: on an idle machine it takes 1-2 s; before, it never stopped


def _node_below(pid: int) -> int:
    """The Cosmos DB server (node) among ``pid``'s descendants."""
    for below in descendants(pid):
        try:
            if b"cosmos_server.cjs" in Path(f"/proc/{below}/cmdline").read_bytes():
                return below
        except OSError:
            continue
    raise AssertionError(f"no Cosmos DB server under {pid}")


class _Lines:
    """A text stream read on a thread of its own (the run never blocks on a full pipe), its lines kept."""

    def __init__(self, stream: object) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, process: subprocess.Popen[str], timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            assert process.poll() is None, f"the run ended before {text!r}: {self.lines[-20:]}"
            assert time.monotonic() < deadline, f"no {text!r} in {timeout} s"
            time.sleep(0.05)

    def text(self) -> str:
        self._thread.join(timeout=10)
        return "\n".join(self.lines)


def _kill_node_and_time_the_end(
    run: subprocess.Popen[str], sig: signal.Signals = signal.SIGKILL
) -> tuple[int, float, list[int]]:
    """``sig`` to the run's Cosmos DB server (SIGKILL: what the kernel's OOM killer sends; SIGSTOP: it hangs); its
    pid, the seconds until the run ended (it is killed after two minutes) and every process it had."""
    below = descendants(run.pid)
    node = _node_below(run.pid)
    began = time.monotonic()
    os.kill(node, sig)
    try:
        run.wait(timeout=120)
    except subprocess.TimeoutExpired:
        run.kill()
        run.wait()
    return node, time.monotonic() - began, below


def _killed_mid_run(
    *args: str, ready: str, on_stdout: bool = False, sig: signal.Signals = signal.SIGKILL
) -> tuple[int, str, str, float, list[int]]:
    """``python -m localrun ARGS``, its Cosmos DB server sent ``sig`` once ``ready`` is shown (on stderr, or stdout):
    its exit code, stdout, stderr, the seconds it took to end after the signal and every process it had."""
    run = started(*args)
    out, err = _Lines(run.stdout), _Lines(run.stderr)
    try:
        (out if on_stdout else err).wait_for(ready, run)
        node, took, below = _kill_node_and_time_the_end(run, sig)
    finally:
        if run.poll() is None:
            run.kill()
    stderr = err.text()
    assert run.returncode == 2, stderr[-3000:]
    assert took < STOPPED_WITHIN_S, f"{took:.0f} s"
    assert "Traceback" not in stderr, stderr[-3000:]
    return node, out.text(), stderr, took, below


def _death(node: int, sig: signal.Signals = signal.SIGKILL) -> str:
    how = (
        "was killed by SIGKILL during the run"
        if sig == signal.SIGKILL
        else "was suspended (state T: SIGSTOP, or a debugger) for 5 s during the run, so the runner ended it"
    )
    return f"the Cosmos DB protocol server (node cosmos_server.cjs, pid {node}) {how}; its last stderr lines: nothing"


# SIGSTOP: the server hangs, suspended. Before, every request waited out its 60 s timeout and the SDK's retries, and the
# run hung for many minutes; now it is ended after 5 s suspended (localrun.cosmos_server.Liveness) and the run stops.
SIGNALS = pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "suspended"])


@SIGNALS
def test_a_simulation_whose_cosmos_server_is_killed_stops_says_so_and_exits_2(
    tmp_path: Path, sig: signal.Signals
) -> None:
    node, _, stderr, _, below = _killed_mid_run(
        *("simulate", "--orders", "200", "--seed", "1", "--faults", str(PROFILE), "--report", str(tmp_path / "r.json")),
        ready="orders settled",  # the first progress line (stderr is a pipe: one at each tenth): the loop is under way
        sig=sig,
    )
    assert stderr.splitlines()[-1] == f"run stopped, no report written: {_death(node, sig)}", stderr[-3000:]
    assert list(tmp_path.iterdir()) == []  # no report, no part of one
    assert gone(below) == [], "a process of the run outlived it"


@SIGNALS
def test_serve_whose_cosmos_server_is_killed_stops_even_when_idle_and_exits_2(sig: signal.Signals) -> None:
    """Every order settled, nothing due: no store call meets the dead server, the runner notices it alone."""
    node, stdout, stderr, _, below = _killed_mid_run(
        *("serve", "--orders", "3", "--seed", "1", "--speed", "1000", "--port", "0", "--no-progress"),
        ready="every order has settled",
        on_stdout=True,
        sig=sig,
    )
    assert stderr.splitlines()[-1] == f"serve stopped, no summary: {_death(node, sig)}", stderr[-3000:]
    assert "verdict:" not in stdout
    assert gone(below) == [], "a process of the run outlived it"


def _listening(pid: int) -> bool:
    """Whether ``pid`` holds a TCP socket that listens (/proc: its descriptors' inodes in /proc/net/tcp*)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # st 0A: LISTEN
                return True
    return False


def test_fuzz_names_a_seed_whose_server_was_killed_at_once_not_at_its_timeout(tmp_path: Path) -> None:
    out = tmp_path / "fuzz"
    run = started("fuzz", "--first", "1", "--count", "1", "--orders", "200", "--out", str(out), "--timeout", "110")
    lines = _Lines(run.stdout)
    try:
        deadline = time.monotonic() + 120
        while True:  # the seed's server listens: its run is under way
            try:
                if _listening(_node_below(run.pid)):
                    break
            except (AssertionError, OSError):  # not started yet, or its descriptors changing
                pass
            assert run.poll() is None and time.monotonic() < deadline, "the seed's server never listened"
            time.sleep(0.05)
        time.sleep(1.0)
        node, took, _ = _kill_node_and_time_the_end(run)
    finally:
        if run.poll() is None:
            run.kill()
    stdout = lines.text()
    assert run.returncode == 1, stdout
    assert took < STOPPED_WITHIN_S, f"{took:.0f} s"
    assert stdout.splitlines()[0] == f"seed 1: RUN FAILED (exit 2: run stopped, no report written: {_death(node)})"
    assert (out / "profile-1.json").exists()  # kept to run again


# A server that ends its own way: on SIGUSR2, two lines on stderr and exit code 3 (node reads NODE_OPTIONS)
DYING = """process.on("SIGUSR2", () => {
  process.stderr.write("FATAL ERROR: Reached heap limit Allocation failed\\n");
  process.stderr.write("last words\\n");
  process.exit(3);
});
"""


def test_a_store_call_to_a_server_that_exited_raises_server_died_with_its_code_and_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner's client (``fast_client``): the call that meets the dead server raises ``ServerDied`` at once,
    not the SDK's errors after its connection retries (each a few seconds of real time, a store call retried by
    the app for ever)."""
    script = tmp_path / "dying.cjs"
    script.write_text(DYING)
    monkeypatch.setenv("NODE_OPTIONS", f"--require {script}")
    with CosmosServer() as server:
        database = server.fast_client().create_database_if_not_exists("dies")
        container = database.create_container_if_not_exists("c", partition_key=PartitionKey(path="/pk"))
        container.upsert_item({"id": "a", "pk": "a"})
        server.check()  # alive: nothing raised
        assert server._proc is not None
        pid = server._proc.pid
        server._proc.send_signal(signal.SIGUSR2)
        assert gone([pid], timeout=30) == []  # exited (the runner's watcher reaps it, maybe not yet)
        began = time.monotonic()
        with pytest.raises(ServerDied) as died:
            container.read_item("a", partition_key="a")
        assert time.monotonic() - began < 10  # the SDK's retries slept longer than that before failing
        assert str(died.value) == (
            f"the Cosmos DB protocol server (node cosmos_server.cjs, pid {pid}) exited with code 3 during the run; its "
            "last stderr lines: FATAL ERROR: Reached heap limit Allocation failed | last words"
        )
        with pytest.raises(ServerDied):
            server.check()  # what the runner's loop calls between tasks
        with pytest.raises(ServerDied):
            server.range_counts()  # the runner's own requests too


def test_a_server_stopped_when_asked_is_no_death_and_one_started_again_after_a_death_is_alive() -> None:
    server = CosmosServer().start()
    server.stop()
    assert server.death is None
    server.check()
    server.start()
    assert server._proc is not None
    server._proc.kill()
    deadline = time.monotonic() + 30
    while server.death is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.death is not None and "was killed by SIGKILL" in server.death
    server.stop()
    server.start()  # a fresh record: the death was the last server's
    try:
        assert server.death is None
        server.check()
    finally:
        server.stop()
