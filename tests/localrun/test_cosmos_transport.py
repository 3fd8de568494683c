"""The runner's lighter Cosmos HTTP path (``localrun.cosmos_transport``) under the real SDK and a real
``@vercel/cosmosdb-server``: the SDK's answers and errors are the same as with its stock transport,
and a keep-alive connection the server dropped is replaced without failing the request."""

from __future__ import annotations

import http.client
import io
import os
import resource
import socket
import ssl
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from azure.core import MatchConditions
from azure.core.exceptions import ServiceResponseError
from azure.cosmos import exceptions as cx

from adapters.cosmos.client import ensure_database
from adapters.cosmos.order_store import CosmosOrderStore
from contracts.names import ORDERS_CONTAINER, STATE_CONTAINER
from localrun.cosmos_server import CosmosServer
from localrun.cosmos_transport import LoopbackConnection, LoopbackTransport


@pytest.fixture(scope="module")
def fast_client(cosmos_server: CosmosServer) -> Any:
    return cosmos_server.fast_client()


@pytest.fixture
def database(fast_client: Any) -> Iterator[Any]:
    name = f"fast-{uuid.uuid4().hex[:8]}"
    yield ensure_database(fast_client, name)
    fast_client.delete_database(name)


def _transport(client: Any) -> LoopbackTransport:
    transport = client.client_connection.pipeline_client._pipeline._transport
    assert isinstance(transport, LoopbackTransport)
    return transport


def test_reads_writes_and_conditional_replaces_answer_as_with_the_stock_client(database: Any) -> None:
    state = database.get_container_client(STATE_CONTAINER)
    created = state.create_item({"id": "o-1", "orderId": "o-1", "n": 1})
    assert state.read_item("o-1", partition_key="o-1")["n"] == 1

    replaced = state.replace_item(
        "o-1", {**created, "n": 2}, etag=created["_etag"], match_condition=MatchConditions.IfNotModified
    )
    assert replaced["n"] == 2
    with pytest.raises(cx.CosmosAccessConditionFailedError):  # 412: the etag is stale now
        state.replace_item(
            "o-1", {**created, "n": 3}, etag=created["_etag"], match_condition=MatchConditions.IfNotModified
        )
    with pytest.raises(cx.CosmosResourceExistsError):  # 409
        state.create_item({"id": "o-1", "orderId": "o-1"})
    with pytest.raises(cx.CosmosResourceNotFoundError):  # 404
        state.read_item("missing", partition_key="missing")
    found = list(
        state.query_items(
            "SELECT * FROM c WHERE c.n = @n", parameters=[{"name": "@n", "value": 2}], enable_cross_partition_query=True
        )
    )
    assert [d["id"] for d in found] == ["o-1"]


def test_the_production_adapter_works_through_it(database: Any) -> None:
    orders = CosmosOrderStore(database.get_container_client(ORDERS_CONTAINER))
    order = {"id": "o-2", "orderId": "o-2", "lines": [{"sku": "A", "quantity": 1}]}
    assert orders.get("o-2") is None
    orders.create_or_verify(order)
    assert orders.get("o-2") is not None


def test_a_connection_the_server_dropped_is_replaced_and_the_request_still_answers(
    fast_client: Any, database: Any
) -> None:
    state = database.get_container_client(STATE_CONTAINER)
    state.create_item({"id": "o-3", "orderId": "o-3"})
    transport = _transport(fast_client)
    opened = transport.connections_opened
    for connection in transport._idle:  # as when the server closes an idle keep-alive connection
        assert connection.sock is not None
        connection.sock.shutdown(socket.SHUT_RDWR)

    assert state.read_item("o-3", partition_key="o-3")["id"] == "o-3"
    assert transport.connections_opened == opened + 1


@contextmanager
def descriptors_taken_up_to(highest: int) -> Iterator[None]:
    """Holds every descriptor number up to ``highest`` (copies of one, ``os.dup`` takes the lowest free), so the next
    one opened is above it; the soft limit raised for them when it is lower (as a busy worker's may be)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = highest + 256
    if soft < wanted:
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (min(wanted, hard) if hard != resource.RLIM_INFINITY else wanted, hard)
        )
    held: list[int] = []
    base = os.open(os.devnull, os.O_RDONLY)
    try:
        while not held or held[-1] < highest:
            held.append(os.dup(base))
        yield
    finally:
        for fd in held:
            os.close(fd)
        os.close(base)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_connection_whose_descriptor_is_past_1024_is_kept_and_found_dropped_when_the_server_closed_it(
    fast_client: Any, database: Any
) -> None:
    """``select.select`` refuses a descriptor past 1,024 (``ValueError: filedescriptor out of range``): the transport
    took every such kept connection for one the server had closed, and opened a new one for each request. It is
    checked with ``poll`` now: kept and reused, and still found closed when the server closed it."""
    state = database.get_container_client(STATE_CONTAINER)
    state.create_item({"id": "o-7", "orderId": "o-7"})
    transport = _transport(fast_client)
    transport.close()  # the kept connections, on low descriptors
    with descriptors_taken_up_to(1024):
        opened = transport.connections_opened
        for _ in range(3):
            assert state.read_item("o-7", partition_key="o-7")["id"] == "o-7"
        assert transport.connections_opened == opened + 1  # one connection, kept between the reads
        [kept] = transport._idle
        assert kept.sock is not None and kept.sock.fileno() > 1024
        kept.sock.shutdown(socket.SHUT_RDWR)  # as when the server closes an idle keep-alive connection
        assert state.read_item("o-7", partition_key="o-7")["id"] == "o-7"
        assert transport.connections_opened == opened + 2  # found closed before the read went out, replaced
        assert kept.sock is None
        transport.close()  # its descriptors past 1024 are not left to the next tests


@pytest.mark.parametrize("lost", ["drop", "truncate"])
def test_a_write_whose_answer_is_lost_fails_as_through_the_stock_pipeline_and_is_not_sent_again(
    fast_client: Any, database: Any, cosmos_faults: CosmosServer, lost: str
) -> None:
    """The create lands and the server drops the connection before answering, or cuts its answer in the middle of the
    body (``cosmos_faults.cjs``). The stock pipeline raises ``ServiceResponseError`` (the app's
    ``StoreOutcomeUnknown``: read it back); this transport sent it again on a new connection, and the app got a 409
    for its own create."""
    state = database.get_container_client(STATE_CONTAINER)
    state.create_item({"id": "o-4", "orderId": "o-4"})  # a keep-alive connection to reuse
    cosmos_faults.set_faults([{"op": "create", "status": lost, **({"commit": True} if lost == "drop" else {})}])
    with pytest.raises(ServiceResponseError):
        state.create_item({"id": "o-5", "orderId": "o-5"})
    assert state.read_item("o-5", partition_key="o-5")["id"] == "o-5"  # it landed, once
    assert [f["op"] for f in cosmos_faults.faults_answered()] == ["create"]


def test_a_410_that_makes_the_sdk_refresh_its_routing_map_is_answered_as_through_the_stock_pipeline(
    fast_client: Any, database: Any, cosmos_faults: CosmosServer
) -> None:
    """The SDK refreshes its partition key ranges after a 410/1002 with an incremental read whose headers it hands
    to the pipeline (``A-IM``, ``If-None-Match``). Without the pipeline's headers policy the server answered every
    read with the whole list and the SDK read it again and again, never returning."""
    state = database.get_container_client(STATE_CONTAINER)
    state.create_item({"id": "o-6", "orderId": "o-6"})
    cosmos_faults.set_faults([{"op": "read", "status": 410, "substatus": 1002}])
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            state.read_item("o-6", partition_key="o-6")
            outcome.append(None)
        except BaseException as exc:  # the thread's answer, whatever it is
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=20)
    assert outcome, "the read did not come back"
    assert isinstance(outcome[0], cx.CosmosHttpResponseError) and outcome[0].status_code == 410
    assert state.read_item("o-6", partition_key="o-6")["id"] == "o-6"


def _answering(raw: bytes) -> LoopbackConnection:
    """A connection whose server's answer is ``raw`` (what the transport reads, without a socket)."""
    connection = LoopbackConnection("127.0.0.1", 1, 1.0, ssl.create_default_context())
    connection._reader = io.BufferedReader(io.BytesIO(raw))  # type: ignore[arg-type]
    return connection


@pytest.mark.parametrize(
    ("raw", "body", "closes"),
    [
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhelloNEXT", b"hello", False, id="length"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=1\r\nhel\r\n2\r\nlo\r\n0\r\nT: 1\r\n\r\n",
            b"hello",
            False,
            id="chunked",
        ),
        pytest.param(b"HTTP/1.1 204 No Content\r\n\r\n", b"", False, id="no-content"),
        pytest.param(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", b"ok", True, id="close"),
        pytest.param(b"HTTP/1.1 200 OK\r\n\r\nuntil the end", b"until the end", True, id="to-the-end"),
        pytest.param(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", b"ok", True, id="http-1.0"),
        pytest.param(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n", b"", False, id="continue"
        ),
    ],
)
def test_an_answer_is_read_as_http_client_reads_it(raw: bytes, body: bytes, closes: bool) -> None:
    answer = _answering(raw)._read_answer("GET")
    assert (answer.body, answer.will_close) == (body, closes)
    assert answer.status in (200, 201, 204)


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        pytest.param(b"", http.client.RemoteDisconnected, id="nothing"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf", http.client.IncompleteRead, id="cut"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhe", http.client.IncompleteRead, id="cut-chunk"
        ),
        pytest.param(b"garbage\r\n\r\n", http.client.BadStatusLine, id="not-http"),
        pytest.param(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70000 + b"\r\n\r\n", http.client.LineTooLong, id="long-header"),
        pytest.param(b"HTTP/1.1 200 OK\r\n" + b"X: 1\r\n" * 101 + b"\r\n", http.client.HTTPException, id="101-headers"),
    ],
)
def test_an_answer_cut_short_or_missing_is_an_error_the_transport_reports_as_lost(
    raw: bytes, error: type[Exception]
) -> None:
    with pytest.raises(error):
        _answering(raw)._read_answer("GET")
