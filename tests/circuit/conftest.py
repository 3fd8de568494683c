"""The circuit tests' health store on the local Cosmos DB server, and ``app_context`` over it."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.cosmos.health_store import CosmosHealthStore
from contracts.names import STATE_CONTAINER
from tests.contexts import context_with


@pytest.fixture
def health(cosmos_db: Any) -> CosmosHealthStore:
    return CosmosHealthStore(cosmos_db.get_container_client(STATE_CONTAINER))


@pytest.fixture
def ctx(app_context: Any, health: CosmosHealthStore) -> Any:
    """``app_context`` over the ``health`` store, installed in its place."""
    return context_with(app_context, health=health)
