"""Building the Cosmos DB client: managed identity in Azure, the emulator key locally."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, cast

from settings import Settings

if TYPE_CHECKING:
    from azure.core.pipeline.transport import RequestsTransport
    from azure.cosmos import ContainerProxy, CosmosClient, DatabaseProxy

    from adapters.cosmos.errors import StoreUnavailable


# How long the client waits for Cosmos DB's answer to one request (the SDK's ``read_timeout``). The SDK's default,
# 65 s, is cut neither by the client's nor by a call's ``timeout`` (a call's is only checked once the wait is over),
# and the SDK sends a read that got no answer again three times (azure-core's ``retry_read``): one point read against
# a connection nothing answers on took 262 s, a write 65 s, past the 230 s in which an HTTP-triggered function must
# answer (learn.microsoft.com/azure/azure-functions/functions-scale, "Function app timeout duration"), so the
# operator API's 503 never came (tests/adapters/test_sdk_retries.py). Cosmos DB answers in milliseconds as a rule,
# a slow request with its own 408; with 20 s a read gives up after about 82 s and a write after 20 s.
READ_TIMEOUT_SECONDS = 20

# TCP keep-alive on the pool's connections (``keepalive_socket_options``). Azure's load balancers and SNAT drop a flow
# idle for 4 minutes (their default idle timeout) without telling either end (learn.microsoft.com/azure/load-balancer/
# load-balancer-tcp-reset: the default is to drop silently; keep-alives refresh the idle timer). A connection a burst
# left idle in the pool for longer was reused into nothing: its request's answer never came, a read was sent again
# after the 20 s read timeout, a write failed after it. With these, an idle connection probes its peer after 120 s,
# which refreshes the flow; one whose four probes, 30 s apart, go unanswered (a flow dropped anyway) is closed by the
# kernel by the 240 s mark, and urllib3 replaces a closed connection before it sends on it. Linux's own keep-alive,
# when a socket asks for it at all (urllib3's do not), waits 7,200 s.
KEEPALIVE_IDLE_SECONDS = 120
KEEPALIVE_INTERVAL_SECONDS = 30
KEEPALIVE_PROBES = 4


def keepalive_socket_options() -> list[tuple[int, int, int]]:
    """urllib3's default socket options (``TCP_NODELAY``) and TCP keep-alive: ``SO_KEEPALIVE``, and where the OS has
    them (Linux, where Azure Functions run, and macOS) its idle time, interval and probe count."""
    import socket

    from urllib3.connection import HTTPConnection

    options = [*HTTPConnection.default_socket_options, (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE_SECONDS),
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_SECONDS),
        ("TCP_KEEPCNT", KEEPALIVE_PROBES),
    ):
        option = getattr(socket, name, None)
        if option is not None:
            options.append((socket.IPPROTO_TCP, option, value))
    return options


def request_threads(settings: Settings) -> int:
    """How many of the app's threads may send a request through the worker's one client at once: the worker's pool
    for sync functions and the async functions' blocking pool (``dependencies.size_blocking_pool``), each of
    ``PYTHON_THREADPOOL_THREAD_COUNT`` threads or, unset, of ``ThreadPoolExecutor``'s default size."""
    threads = settings.worker_threads or min(32, (os.process_cpu_count() or 1) + 4)
    return 2 * threads


def pool_connections(settings: Settings) -> int:
    """The connections the client's pool keeps per host: one per thread that may send a request at once
    (``request_threads``), and the SDK's own requests besides (its endpoint refresh thread, its health checks'
    ``os.cpu_count()`` threads)."""
    return request_threads(settings) + (os.cpu_count() or 1) + 1


def pooled_transport(connections: int) -> RequestsTransport:
    """azure-core's own ``requests`` transport, its pool holding ``connections`` connections per host. The stock one
    keeps ``requests``' default, 10 (``HTTPAdapter``'s ``pool_maxsize``, ``pool_block`` False): with more requests
    in flight urllib3 opens a connection for each one past it, and when it comes back to the full pool closes it
    ("Connection pool is full, discarding connection"), so under load most requests paid a new TCP connection and
    TLS handshake (and a new SNAT port in Azure). The session is the one azure-core makes (``RequestsTransport.open``:
    ``trust_env``, its adapter with urllib3's retries off, the SDK's policies retry), only its adapter rebuilt with
    the bigger pool and its connections' TCP keep-alive (``keepalive_socket_options``: every pool the adapter makes
    passes them to its connections); the transport owns it, so closing the client closes it
    (Azure/azure-sdk-for-python#17165). A proxy's connections (``HTTPS_PROXY``, which ``trust_env`` reads; none in
    Azure Functions) are the adapter's proxy manager's, without them."""
    from azure.core.pipeline.transport import RequestsTransport

    stock = RequestsTransport()
    stock.open()  # its session, as azure-core configures it
    session = stock.session
    rebuilt: dict[int, Any] = {}
    for prefix, adapter in list(session.adapters.items()):
        if id(adapter) not in rebuilt:
            bigger = type(adapter)(pool_maxsize=connections, max_retries=adapter.max_retries)
            bigger.poolmanager.connection_pool_kw["socket_options"] = keepalive_socket_options()
            rebuilt[id(adapter)] = bigger
        session.mount(prefix, rebuilt[id(adapter)])
    return RequestsTransport(session=session, session_owner=True)


def create_client(settings: Settings, identity: Any = None) -> CosmosClient:
    """The client (its constructor reads the database account, with a token first): with the key when the settings
    carry one, else with ``identity`` (default: a new ``adapters.identity.managed_identity`` credential). Its
    transport's pool holds a connection for each thread of the worker that may use it (``pooled_transport``); the
    ``connection_verify`` and ``read_timeout`` given here reach each request as before (the SDK passes them)."""
    from azure.cosmos import CosmosClient

    credential: Any = settings.cosmos_key
    if not credential:
        from adapters.identity import managed_identity

        credential = identity if identity is not None else managed_identity(settings.azure_client_id)
    return CosmosClient(
        settings.cosmos_endpoint,
        credential=credential,
        connection_verify=settings.cosmos_verify_tls,
        read_timeout=READ_TIMEOUT_SECONDS,
        transport=pooled_transport(pool_connections(settings)),
    )


class LazyClient:
    """The production wiring's ``CosmosClient``, made at the first request that needs it rather than when the wiring
    is built. Its constructor reads the database account, after a token from the managed identity: made in
    ``dependencies.build_from_settings``, a failure there (Cosmos DB unreachable or answering 503, the identity
    endpoint failing) failed the build, so every invocation of a new worker raised before the app's own handling: an
    ``orders`` message was redelivered at once until dead-lettered instead of being sent again for later
    (``submission.store_outage``). Made here, the failure is the request's ``StoreUnavailable`` (``mapped_errors``)
    and the next request tries again, with the same credential (its cached token, no new token request per try)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._identity: Any = None
        self._client: CosmosClient | None = None
        self._lock = threading.Lock()
        self._failures = 0  # the tries that failed
        self._failure: StoreUnavailable | None = None  # the last one's

    def get(self) -> CosmosClient:
        """The client, made by the first request that needs it. A request that waited for the lock while another's
        try failed fails with that failure instead of a try of its own after it: with the identity endpoint
        taking token requests and answering none, a try takes about 25 s, and the n-th of n concurrent requests
        of a new worker waited n tries (tests/identity)."""
        from adapters.cosmos.errors import StoreUnavailable, mapped_errors
        from adapters.identity import managed_identity

        failures = self._failures  # read before the wait: a try that fails meanwhile is this request's answer
        with self._lock:
            if self._client is None:
                if self._failures != failures and self._failure is not None:
                    raise StoreUnavailable(f"{self._failure} (a request just before this one)") from self._failure
                if self._identity is None and not self._settings.cosmos_key:
                    self._identity = managed_identity(self._settings.azure_client_id)
                try:
                    with mapped_errors():
                        self._client = create_client(self._settings, self._identity)
                except StoreUnavailable as failed:
                    self._failure = failed
                    self._failures += 1
                    raise
            return self._client


class LazyContainer:
    """A container of a ``LazyClient``: every attribute is the container's, the client made first if need be."""

    def __init__(self, client: LazyClient, database: str, name: str) -> None:
        self._client = client
        self._database = database
        self._name = name
        self._proxy: ContainerProxy | None = None

    def __getattr__(self, attribute: str) -> Any:
        if self._proxy is None:
            self._proxy = container(self._client.get(), self._database, self._name)
        return getattr(self._proxy, attribute)


def lazy_container(client: LazyClient, database: str, name: str) -> ContainerProxy:
    """``container`` of a client made at its first request (``LazyClient``)."""
    return cast("ContainerProxy", LazyContainer(client, database, name))


def _composite(*paths: str) -> list[dict[str, str]]:
    """A composite index over ``paths`` ("/field" ascending, "-/field" descending)."""
    return [{"path": p.lstrip("-"), "order": "descending" if p.startswith("-") else "ascending"} for p in paths]


# The ``state`` container's composite indexes, as infra/modules/cosmos.bicep declares them (a test checks they
# are the same, and that every multi-property ORDER BY of the adapters has one). Cosmos DB answers such a
# query 400 without its index, and so does the local protocol server once the container declares them.
# Each matches its ORDER BY exactly (Azure also takes one whose orders are all inverted; the local server
# does not). The equality-filtered processState comes first, as the Cosmos DB docs recommend.
STATE_COMPOSITE_INDEXES = [
    _composite("/processState", "/completeBy"),  # the filters of the scans and of the starter's claim
    _composite("/processState", "/completeBy", "/id"),  # state_store.EXPIRED_ORDER: the scans' pages
    _composite("-/processState", "-/updatedAt", "-/id"),  # ops_queries.LIST_ORDER_OF_STATE
    _composite("-/updatedAt", "-/id"),  # ops_queries.LIST_ORDER_ANY
]


def ensure_database(client: CosmosClient, database: str) -> DatabaseProxy:
    """Local only: create the database and containers the Bicep creates in Azure (with the ``state``
    container's composite indexes, so that a sort without its index fails here as there, and its time to live,
    so that the alert marks expire here as there)."""
    from azure.cosmos import PartitionKey

    from contracts.names import ORDERS_CONTAINER, PARTITION_KEY_PATH, STATE_CONTAINER, STATE_DEFAULT_TTL

    db = client.create_database_if_not_exists(database)
    db.create_container_if_not_exists(ORDERS_CONTAINER, partition_key=PartitionKey(PARTITION_KEY_PATH))
    db.create_container_if_not_exists(
        STATE_CONTAINER,
        partition_key=PartitionKey(PARTITION_KEY_PATH),
        indexing_policy={"compositeIndexes": STATE_COMPOSITE_INDEXES},
        default_ttl=STATE_DEFAULT_TTL,
    )
    return db


def container(client: CosmosClient, database: str, name: str) -> ContainerProxy:
    return client.get_database_client(database).get_container_client(name)
