"""A server the runner started hangs during the run, still running (``Liveness``): suspended (SIGSTOP, a debugger), or
not answering a liveness probe while it spins or sleeps. The runner ends it and stops as after a death
(``ServerDied``, test_server_dies.py). Before, every request waited out its 60 s timeout and the SDK's retries: a run
hung for many minutes. A server slow to answer, or stopped for a moment, is not dead."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.cosmos import ContainerProxy, PartitionKey

from localrun.cosmos_server import CosmosServer, Liveness, ServerDied
from tests.localrun.test_cli_interrupts import gone

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the server's state from /proc")

QUICK = Liveness(suspended_s=3.0, spinning_cpu_s=3.0, asleep_s=3.0, probe_every_s=0.5, look_every_s=0.2)

# node reads NODE_OPTIONS: on SIGUSR2 the server says "hangs" on stderr, then its event loop spins for ever, or sleeps
# for ever (a futex wait on its main thread, state S), or is busy 1 s at a time with a pause between (slow, yet it
# answers)
HANGS = 'process.on("SIGUSR2", () => {{ process.stderr.write("hangs\\n", () => {{ {} }}); }});\n'
SPINS = HANGS.format("for (;;) {}")
SLEEPS = HANGS.format("Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);")
BUSY = HANGS.format("setInterval(() => { const end = Date.now() + 1000; while (Date.now() < end) {} }, 50);")


def _container(server: CosmosServer) -> ContainerProxy:
    container = (
        server.fast_client()
        .create_database_if_not_exists("hangs")
        .create_container_if_not_exists("c", partition_key=PartitionKey(path="/pk"))
    )
    container.upsert_item({"id": "a", "pk": "a"})
    return container


@pytest.fixture
def node_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    def use(script: str) -> None:
        path = tmp_path / "hang.cjs"
        path.write_text(script)
        monkeypatch.setenv("NODE_OPTIONS", f"--require {path}")

    yield use


def _read_while(server: CosmosServer, container: ContainerProxy, hang: signal.Signals) -> tuple[BaseException, float]:
    """Sends ``hang`` to the server, then reads an item on a thread, as the runner's tasks do: what the read raised
    and the seconds it took (it is given up after 60 s, the transport's timeout: before, it waited that long and
    then went through the SDK's retries)."""
    assert server._proc is not None
    server._proc.send_signal(hang)
    if hang == signal.SIGUSR2:
        _said_it_hangs(server)
    raised: list[BaseException] = []

    def read() -> None:
        try:
            container.read_item("a", partition_key="a")
        except BaseException as exc:  # whatever the read ended with is the test's subject
            raised.append(exc)

    began = time.monotonic()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=60)
    assert raised, f"the read did not end in {time.monotonic() - began:.0f} s, or ended without an error"
    return raised[0], time.monotonic() - began


def _said_it_hangs(server: CosmosServer) -> None:
    deadline = time.monotonic() + 30
    while "hangs" not in server._stderr:
        assert time.monotonic() < deadline, "the server never said it hangs"
        time.sleep(0.05)


def _dead_as(server: CosmosServer, how: str, said: str = "nothing") -> str:
    assert server._proc is not None
    return (
        f"the Cosmos DB protocol server (node cosmos_server.cjs, pid {server._proc.pid}) {how} during the run, so the "
        f"runner ended it; its last stderr lines: {said}"
    )


def test_a_suspended_server_is_ended_and_a_request_waiting_on_it_raises_server_died() -> None:
    with CosmosServer(liveness=QUICK) as server:
        container = _container(server)
        assert server._proc is not None
        pid = server._proc.pid
        raised, took = _read_while(server, container, signal.SIGSTOP)
        assert isinstance(raised, ServerDied), repr(raised)
        assert took < 20  # 3 s suspended, then at once; before: 60 s, then the SDK's retries
        assert (
            str(raised) == server.death == _dead_as(server, "was suspended (state T: SIGSTOP, or a debugger) for 3 s")
        )
        assert gone([pid], timeout=10) == []  # killed, not left stopped
        with pytest.raises(ServerDied):
            server.check()  # what the runner's loop calls


@pytest.mark.parametrize(
    ("script", "how"),
    [
        (SPINS, "did not answer a liveness probe through 3 s of its own CPU time"),
        (SLEEPS, "did not answer a liveness probe for 3 s, asleep all the while"),
    ],
    ids=["spins", "sleeps"],
)
def test_a_server_that_stops_answering_is_ended_and_a_request_waiting_on_it_raises_server_died(
    node_options: object, script: str, how: str
) -> None:
    node_options(script)  # type: ignore[operator]
    with CosmosServer(liveness=QUICK) as server:
        container = _container(server)
        raised, took = _read_while(server, container, signal.SIGUSR2)
        assert isinstance(raised, ServerDied), repr(raised)
        assert took < 45  # 3 s (of CPU time for the spin: more on a loaded machine), then at once
        assert str(raised) == _dead_as(server, how, "hangs")


def test_a_server_slow_to_answer_or_suspended_for_a_moment_is_alive(node_options: object) -> None:
    """Busy for 1 s at a time (each probe waits up to that, within 3 s of CPU time), and suspended twice for 1 s (less
    than 3 s): no death, and every read is answered."""
    node_options(BUSY)  # type: ignore[operator]
    with CosmosServer(liveness=QUICK) as server:
        container = _container(server)
        assert server._proc is not None
        server._proc.send_signal(signal.SIGUSR2)
        _said_it_hangs(server)
        for _ in range(2):
            os.kill(server._proc.pid, signal.SIGSTOP)
            time.sleep(1.0)
            os.kill(server._proc.pid, signal.SIGCONT)
            time.sleep(1.5)
        end = time.monotonic() + 6
        while time.monotonic() < end:
            assert container.read_item("a", partition_key="a")["id"] == "a"
        assert server.death is None
        server.check()
