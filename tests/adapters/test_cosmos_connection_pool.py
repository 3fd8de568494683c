"""The production Cosmos DB client's connection pool against the worker's threads (``adapters.cosmos.client``).

Every sync function and every ``asyncio.to_thread`` of the async ones sends its Cosmos DB requests through the
worker's one ``CosmosClient``: up to ``PYTHON_THREADPOOL_THREAD_COUNT`` threads in each of the two pools
(docs/settings.md, "The worker's threads"). azure-core's stock ``RequestsTransport`` keeps ``requests``' default
pool of 10 connections per host and does not block past it: urllib3 opens a connection for each request beyond
the 10 and closes it when it comes back to the full pool ("Connection pool is full, discarding connection"), so
under load most requests paid a new TCP connection and TLS handshake. Here the real SDK and its stock transport
class, built by the app's ``create_client``, send point reads to the local protocol server over TLS; urllib3's
connections are counted as it makes them (``HTTPSConnectionPool._new_conn``, the real one called)."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from urllib3.connectionpool import HTTPSConnectionPool

from adapters.cosmos.client import create_client, ensure_database
from contracts.names import ORDERS_CONTAINER
from localrun.cosmos_server import CosmosServer
from settings import Settings

pytestmark = pytest.mark.cosmos

THREADS = 40  # requests in flight at once, four times requests' default pool
ROUNDS = 5  # each thread's reads, all threads starting each one together
WORKER_THREADS = "104"  # what the Bicep, the azd hooks and local.settings.json.example set
AZURE_IDLE_TIMEOUT_SECONDS = 240  # Azure Load Balancer's and SNAT's default TCP idle timeout, 4 minutes


def settings_of(server: CosmosServer) -> Settings:
    return Settings.from_env(
        {},
        COSMOS_ENDPOINT=server.endpoint,
        COSMOS_KEY=server.key,
        COSMOS_VERIFY_TLS="false",
        PYTHON_THREADPOOL_THREAD_COUNT=WORKER_THREADS,
    )


@pytest.fixture
def new_connections(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every HTTPS connection urllib3 opens from now on."""
    opened: list[Any] = []
    real: Callable[[HTTPSConnectionPool], Any] = HTTPSConnectionPool._new_conn

    def counted(pool: HTTPSConnectionPool) -> Any:
        connection = real(pool)
        opened.append(connection)
        return connection

    monkeypatch.setattr(HTTPSConnectionPool, "_new_conn", counted)
    return opened


@pytest.fixture
def app_client(cosmos_server: CosmosServer) -> Iterator[Any]:
    """The production client (``create_client``) and a database of its own, dropped afterwards."""
    client = create_client(settings_of(cosmos_server))
    ensure_database(client, "connection-pool")
    try:
        yield client
    finally:
        client.delete_database("connection-pool")
        client.close()


def transport_of(client: Any) -> Any:
    return client.client_connection.pipeline_client._pipeline._transport


def test_concurrent_requests_keep_their_connections_instead_of_opening_one_each(
    app_client: Any, new_connections: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Before: with 40 threads reading at once, 5 times, urllib3 opened 90 to 120 connections and discarded 85 to 110
    of them (the stock pool of 10). Now each thread's connection is kept: at most one per thread, none discarded."""
    orders = app_client.get_database_client("connection-pool").get_container_client(ORDERS_CONTAINER)
    orders.upsert_item({"id": "ord-pool", "orderId": "ord-pool"})
    together = threading.Barrier(THREADS)
    failures: list[BaseException] = []

    def reads() -> None:
        try:
            for _ in range(ROUNDS):
                together.wait(timeout=30)
                assert orders.read_item("ord-pool", partition_key="ord-pool")["id"] == "ord-pool"
        except BaseException as failed:  # reported by the test below
            failures.append(failed)

    before = len(new_connections)
    with caplog.at_level(logging.WARNING, logger="urllib3.connectionpool"):
        threads = [threading.Thread(target=reads) for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    assert failures == []
    discarded = [r for r in caplog.records if "discarding connection" in r.getMessage()]
    opened = len(new_connections) - before
    assert discarded == [], f"{len(discarded)} connections discarded, {opened} opened for {THREADS} threads"
    assert opened <= THREADS


def test_the_pool_holds_a_connection_per_thread_on_the_session_azure_core_makes(cosmos_server: CosmosServer) -> None:
    """The adapter's pool holds a connection for each thread of the worker's two pools (and the SDK's own
    requests); the rest is azure-core's session as its ``RequestsTransport`` makes it (the adapter's class, urllib3's
    retries off, ``trust_env``), and the client's ``close`` closes it."""
    from azure.core.pipeline.transport import RequestsTransport

    from adapters.cosmos.client import request_threads

    stock = RequestsTransport()
    stock.open()
    stock_adapter = stock.session.get_adapter("https://")
    settings = settings_of(cosmos_server)
    assert request_threads(settings) == 2 * int(WORKER_THREADS)
    client = create_client(settings)
    transport = transport_of(client)
    session = transport.session
    for prefix in ("https://", "http://"):
        adapter = session.get_adapter(prefix)
        assert type(adapter) is type(stock_adapter)
        assert adapter.poolmanager.connection_pool_kw["maxsize"] >= request_threads(settings)
        assert adapter.poolmanager.connection_pool_kw["block"] is False
        retries = adapter.max_retries
        assert (retries.total, retries.redirect, retries.raise_on_status) == (False, False, False)
    assert session.trust_env is stock.session.trust_env is True
    client.close()
    assert transport.session is None  # the transport owned it and closed it
    stock.close()


def test_the_pools_connections_send_tcp_keepalives_well_within_azures_idle_timeout(
    new_connections: list[Any], app_client: Any
) -> None:
    """Before: the pool's connections were opened with urllib3's default socket options (``TCP_NODELAY`` only), no
    TCP keep-alive (``SO_KEEPALIVE`` 0; Linux's own, were it on, waits 7,200 s). Azure's load balancers and SNAT drop a
    flow idle for 4 minutes without telling either end, so a connection a burst left idle in the pool for longer went
    out again into nothing: the request's answer never came, a read was sent again after the 20 s read timeout and a
    write failed after it (docs/settings.md, "Idle connections"). Now every connection the real SDK opens through the
    app's client probes its peer after ``KEEPALIVE_IDLE_SECONDS`` (< 240 s) of silence, which keeps the flow alive,
    and a connection whose probes go unanswered is closed by the kernel and replaced by urllib3 before its next use.
    Read back from the sockets themselves (``getsockopt``), after requests over TLS to the local protocol server."""
    from adapters.cosmos.client import KEEPALIVE_IDLE_SECONDS, KEEPALIVE_INTERVAL_SECONDS, KEEPALIVE_PROBES

    orders = app_client.get_database_client("connection-pool").get_container_client(ORDERS_CONTAINER)
    orders.upsert_item({"id": "ord-keepalive", "orderId": "ord-keepalive"})
    assert orders.read_item("ord-keepalive", partition_key="ord-keepalive")["id"] == "ord-keepalive"
    sockets = [connection.sock for connection in new_connections if connection.sock is not None]
    assert sockets, "the requests above opened no connection of their own"
    for sock in sockets:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1  # urllib3's default kept
        if hasattr(socket, "TCP_KEEPIDLE"):  # Linux, where Azure Functions run
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_IDLE_SECONDS
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == KEEPALIVE_INTERVAL_SECONDS
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == KEEPALIVE_PROBES
    # a dead flow is found and closed within the idle timeout of a flow the keep-alives could not keep
    assert KEEPALIVE_IDLE_SECONDS + KEEPALIVE_PROBES * KEEPALIVE_INTERVAL_SECONDS <= AZURE_IDLE_TIMEOUT_SECONDS
    assert KEEPALIVE_IDLE_SECONDS < AZURE_IDLE_TIMEOUT_SECONDS
