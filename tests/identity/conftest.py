"""The stand-ins every test of the production wiring uses: a Cosmos DB server taking Microsoft Entra ID tokens
only (one per module), and the managed identity endpoint App Service gives the app."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from localrun.cosmos_server import CosmosServer
from tests.identity.endpoint import IdentityEndpoint

APP_IDENTITY = "3f2504e0-4f89-11d3-9a0c-0305e82c3301"  # the user-assigned identity's client id (not a secret)


@pytest.fixture(scope="module")
def entra_cosmos() -> Iterator[CosmosServer]:
    """A Cosmos DB server of its own (the session's takes keys): the database and containers created first with
    the key, as the Bicep creates them through Azure Resource Manager; then Entra ID only."""
    from adapters.cosmos.client import ensure_database

    with CosmosServer() as server:
        with server.client() as client:  # closed: its background requests, signed with the key, stop
            ensure_database(client, "scheduler")
        # ... once the endpoint refresh it may have started ends: closing the client does not wait for that thread
        for thread in threading.enumerate():
            if thread.name == "cosmos-endpoint-refresh":
                thread.join(timeout=30)
        yield server


@pytest.fixture
def identity(monkeypatch: pytest.MonkeyPatch) -> Iterator[IdentityEndpoint]:
    with IdentityEndpoint([APP_IDENTITY]) as endpoint:
        yield endpoint.install(monkeypatch)
