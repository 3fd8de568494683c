"""Shared fixtures. The Cosmos DB protocol server is started once per test session."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from localrun.cosmos_server import CosmosServer


@pytest.fixture(autouse=True, scope="session")
def no_production_wiring() -> Iterator[None]:
    """A function invoked with no context installed would build the production wiring from the
    environment: Azure SDK clients and ``DefaultAzureCredential``, which probes the managed-identity
    endpoint (a network address off this machine). No test may do that: it fails at once instead."""
    import dependencies

    def refuse(settings: Any) -> Any:
        raise RuntimeError("a test invoked app code with no context installed (use_context): no production wiring")

    original = dependencies.build_from_settings
    _production[:] = [original]
    dependencies.build_from_settings = refuse  # type: ignore[assignment]
    yield
    dependencies.build_from_settings = original  # type: ignore[assignment]


_production: list[Any] = []  # the real ``dependencies.build_from_settings``, kept by ``no_production_wiring``


@pytest.fixture
def production_wiring() -> Any:
    """The real ``dependencies.build_from_settings``, for the tests that run it on purpose against local stand-ins
    of the managed identity endpoint and of Cosmos DB (tests/identity): never from an app function."""
    return _production[0]


@pytest.fixture(scope="session")
def cosmos_server() -> Iterator[CosmosServer]:
    """One partition key range per container, unless ``SAS_COSMOS_RANGES`` says more: the whole suite can be run
    against containers split into ranges (``localrun/cosmos_ranges.cjs``) to look for what differs."""
    with CosmosServer(ranges=int(os.environ.get("SAS_COSMOS_RANGES") or 1)) as server:
        yield server


@pytest.fixture(scope="session")
def cosmos_client(cosmos_server: CosmosServer) -> Any:
    return cosmos_server.client()


@contextmanager
def fresh_database(client: Any) -> Iterator[Any]:
    """A new database of ``client`` with the ``orders`` and ``state`` containers as the runner makes them
    (``ensure_database``), dropped afterwards."""
    from adapters.cosmos.client import ensure_database

    name = f"test-{uuid.uuid4().hex[:8]}"
    yield ensure_database(client, name)
    client.delete_database(name)


@pytest.fixture
def cosmos_db(cosmos_client: Any) -> Iterator[Any]:
    """A fresh database with the ``orders`` and ``state`` containers, dropped afterwards."""
    with fresh_database(cosmos_client) as db:
        yield db


RANGES = 3  # the partition key ranges of ``cosmos_db_ranges``' containers


@pytest.fixture(scope="session")
def cosmos_ranges_server() -> Iterator[CosmosServer]:
    """A second server whose containers are split into ``RANGES`` partition key ranges (``localrun/cosmos_ranges.cjs``):
    the SDK's query plan, per-range queries and client-side merge run as on Azure for a partitioned container."""
    with CosmosServer(ranges=RANGES) as server:
        yield server


@pytest.fixture
def cosmos_db_ranges(cosmos_ranges_server: CosmosServer) -> Iterator[Any]:
    """``cosmos_db`` on ``cosmos_ranges_server``: the ``orders`` and ``state`` containers split into ranges."""
    with fresh_database(cosmos_ranges_server.client()) as db:
        yield db


@pytest.fixture(params=["one range", "ranges"])
def cosmos_db_either(request: pytest.FixtureRequest) -> Any:
    """``cosmos_db`` and ``cosmos_db_ranges`` in turn: a test of a cross-partition query run against both."""
    return request.getfixturevalue("cosmos_db" if request.param == "one range" else "cosmos_db_ranges")


@pytest.fixture
def clock() -> Any:
    from adapters.clock import ManualClock

    return ManualClock()


@pytest.fixture
def sender() -> Any:
    from tests.fakes import RecordingSender

    return RecordingSender()


@pytest.fixture
def app_context(cosmos_db: Any, clock: Any, sender: Any) -> Iterator[Any]:
    """The app's context over a fresh Cosmos database (every store the app has, as in production), a manual
    clock and a recording sender, installed for the registered functions (``dependencies.get_context()``)
    and removed after."""
    import random

    from adapters.cosmos.alert_mark_store import CosmosAlertMarks
    from adapters.cosmos.deferral_store import CosmosDeferralLog
    from adapters.cosmos.health_store import CosmosHealthStore
    from adapters.cosmos.ops_queries import CosmosOpsQueries
    from adapters.cosmos.order_store import CosmosOrderStore
    from adapters.cosmos.state_store import CosmosStateStore
    from contracts.names import ORDERS_CONTAINER, STATE_CONTAINER
    from dependencies import AppContext, use_context
    from settings import Settings
    from tests.fakes import QueuesWithNothingDeferred

    state = cosmos_db.get_container_client(STATE_CONTAINER)
    ctx = AppContext(
        settings=Settings.from_env({}),
        clock=clock,
        states=CosmosStateStore(state),
        orders=CosmosOrderStore(cosmos_db.get_container_client(ORDERS_CONTAINER)),
        sender=sender,
        remote={},
        deferred=QueuesWithNothingDeferred(),  # the recording sender is no queue: tests of deferral use the broker
        deferrals=CosmosDeferralLog(state),
        ops=CosmosOpsQueries(state),
        health=CosmosHealthStore(state),
        rng=random.Random(1),
        alert_marks=CosmosAlertMarks(state),
    )
    use_context(ctx)
    yield ctx
    use_context(None)


@pytest.fixture(scope="session")
def functions() -> dict[str, Any]:
    """The app's functions as the Functions runtime indexed them, by name."""
    from localrun.functions import by_name

    return by_name()


@pytest.fixture
def cosmos_faults(cosmos_server: CosmosServer) -> Iterator[CosmosServer]:
    """The session's protocol server, to set fault rules on (``set_faults``: statuses the server answers, which
    the real SDK's retry policies act on; ``localrun/cosmos_faults.cjs``); they are cleared after the test."""
    cosmos_server.set_faults([])
    yield cosmos_server
    cosmos_server.set_faults([])
