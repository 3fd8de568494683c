"""Shared fixtures. The Cosmos DB protocol server is started once per test session."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from localrun.cosmos_server import CosmosServer


@pytest.fixture(scope="session")
def cosmos_server() -> Iterator[CosmosServer]:
    with CosmosServer() as server:
        yield server


@pytest.fixture(scope="session")
def cosmos_client(cosmos_server: CosmosServer) -> Any:
    return cosmos_server.client()


@pytest.fixture
def cosmos_db(cosmos_client: Any) -> Iterator[Any]:
    """A fresh database with the ``orders`` and ``state`` containers, dropped afterwards."""
    from adapters.cosmos.client import ensure_database

    name = f"test-{uuid.uuid4().hex[:8]}"
    db = ensure_database(cosmos_client, name)
    yield db
    cosmos_client.delete_database(name)
