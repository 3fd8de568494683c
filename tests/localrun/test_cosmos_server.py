"""``localrun.cosmos_server``: the Cosmos DB protocol server the tests and the runner start. Test
sessions may run at once, each starting servers: a server listens on the port it bound itself, and
never outlives the process that started it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from localrun.cosmos_server import CosmosServer

ROOT = Path(__file__).resolve().parents[2]


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def test_a_port_another_process_listens_on_is_a_failure_not_that_process_taken_for_the_server():
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        taken = other.getsockname()[1]
        server = CosmosServer(port=taken)
        try:
            with pytest.raises(RuntimeError, match="before it listened"):
                server.start()
        finally:
            server.stop()


def test_two_servers_each_listen_on_their_own_port_with_their_own_account():
    with CosmosServer() as first, CosmosServer() as second:
        assert first.port != second.port and 0 not in (first.port, second.port)
        first.client().create_database("only-in-first")
        assert [d["id"] for d in first.client().list_databases()] == ["only-in-first"]
        assert list(second.client().list_databases()) == []


def test_the_server_stops_when_the_process_that_started_it_is_killed():
    """A test session killed outright (no teardown: SIGKILL, or a timeout's kill) leaves no server behind."""
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from localrun.cosmos_server import CosmosServer\n"
            "server = CosmosServer().start()\n"
            "print(server.port, flush=True)\n"
            "time.sleep(600)\n",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None
        port = int(owner.stdout.readline())
        assert accepts(port)
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 10
    while accepts(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not accepts(port), f"the Cosmos DB server on port {port} outlived the process that started it"
