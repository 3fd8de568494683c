"""Starts and stops ``@vercel/cosmosdb-server`` (the Cosmos DB protocol, in memory) from the
project's ``node_modules``. Used by the tests and by the local runner."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import warnings
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from azure.cosmos import CosmosClient

ROOT = Path(__file__).resolve().parent.parent
# The Cosmos DB emulator's published, well-known key (not a secret).
EMULATOR_KEY = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class CosmosServer:
    """``with CosmosServer() as server: server.endpoint`` — an empty account on a free port."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or _free_port()
        self.endpoint = f"https://127.0.0.1:{self.port}"
        self.key = EMULATOR_KEY
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> CosmosServer:
        modules = ROOT / "node_modules"
        if not (modules / "@vercel" / "cosmosdb-server").exists():
            raise RuntimeError(f"{modules}/@vercel/cosmosdb-server is missing: run `npm ci` (dev.py does)")
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("Node.js 20+ is required for the Cosmos DB protocol server")
        self._proc = subprocess.Popen(
            [node, str(Path(__file__).with_name("cosmos_server.cjs")), str(modules), str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, "NODE_NO_WARNINGS": "1"},
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode() if self._proc.stderr else ""
                raise RuntimeError(f"cosmosdb-server exited with {self._proc.returncode}: {err}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"cosmosdb-server did not listen on port {self.port} within {timeout}s")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._proc = None

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

    def fast_client(self) -> CosmosClient:
        """The same SDK client with a lighter HTTP path under it (``localrun.cosmos_transport``):
        what the simulation uses, where Cosmos requests are most of the time."""
        from azure.cosmos import CosmosClient

        from localrun.cosmos_transport import LoopbackTransport, use_lean_pipeline

        transport = LoopbackTransport("127.0.0.1", self.port)
        client = CosmosClient(self.endpoint, credential=self.key, connection_verify=False, transport=transport)
        use_lean_pipeline(client, transport)
        return client

    def __enter__(self) -> CosmosServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
