"""The Functions host's Service Bus settlement endpoint, served over real gRPC against the broker.

In Azure the Service Bus extension registers a ``Settlement`` gRPC service (``SettlementService`` in
azure-sdk-for-net ``sdk/servicebus/Microsoft.Azure.WebJobs.Extensions.ServiceBus/src/Grpc``) on the
host's gRPC server, the one whose address the worker gets as ``--host``/``--port``. The Python
extension's ``ServiceBusMessageActions`` (a process-wide singleton created from the worker's command
line) sends each settlement there with the message's lock token. The host looks the token up in its
``ActionsCache``, which holds the messages of the function executions in progress (added when the
message is dispatched, removed when the execution ends), and settles through the SDK:

- token not in the cache (execution over, or never delivered to this host): ``FAILED_PRECONDITION``
  ``"LockToken <token> not found."``;
- the SDK call fails (lock expired, message already settled, host restarted): ``UNKNOWN`` with the .NET
  exception text (here ``ServiceBusException ... (MessageLockLost)``); so does a dead-letter reason or
  description over 4,096 characters, which the SDK refuses before calling the service (``limits.py``);
- on success an empty reply.

``ServiceBusMessageActions`` turns any gRPC error into ``SettlementError`` (``.method``, ``.details``,
``.original``: the ``grpc.RpcError``, whose ``code()``/``details()`` are the above).

Usage, one worker process (the runner's case: hosts come and go, the worker and its singleton stay)::

    server = SettlementServer.shared()            # started once; the extension's singleton points at it
    server.attach(broker)                         # this host's broker
    with server.invocation(message.lock_token):   # the function execution's ActionsCache entry
        ...invoke the function (it settles through ServiceBusMessageActions.get_instance())...
    server.detach(broker)                         # host stopped

or a server of one's own (tests)::

    server = SettlementServer(broker); address = server.start()   # "127.0.0.1:<free port>"
    actions = install_message_actions(address)   # ... uninstall_message_actions(actions); server.stop()

The gRPC handlers run on the server's own threads while the invoking thread waits for the reply; they
only take the broker's mutex and read its injected clock (never the wall clock), so a simulated run
stays deterministic.
"""

from __future__ import annotations

import contextvars
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import grpc  # type: ignore[import-untyped]
from azurefunctions.extensions.bindings.protos import settlement_pb2_grpc
from google.protobuf.empty_pb2 import Empty  # type: ignore[import-untyped]

from localrun.servicebus.broker import InProcessBroker, Outcome
from localrun.servicebus.errors import DeadLetterTextTooLong, MessageLockLost
from localrun.servicebus.limits import check_dead_letter_text

if TYPE_CHECKING:
    from azurefunctions.extensions.bindings.servicebus import ServiceBusMessageActions

# What the host passes as the gRPC max message length (int.MaxValue).
HOST_MAX_MESSAGE_LENGTH = 2_147_483_647

# The text of the .NET exception the SDK throws for a lock the service no longer honours.
LOCK_LOST_TEXT = (
    "Azure.Messaging.ServiceBus.ServiceBusException: The lock supplied is invalid. Either the lock expired, "
    "or the message has already been removed from the queue. (MessageLockLost)"
)


def worker_argv(
    address: str,
    max_message_length: int = HOST_MAX_MESSAGE_LENGTH,
    *,
    worker_id: str = "localrun-worker",
    request_id: str = "localrun-request",
) -> list[str]:
    """The arguments the host starts the Python worker with (both spellings, as the host passes them);
    the extension reads ``--host``, ``--port`` and ``--functions-grpc-max-message-length``."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address must be host:port, got {address!r}")
    return [
        "--host",
        host,
        "--port",
        port,
        "--workerId",
        worker_id,
        "--requestId",
        request_id,
        "--grpcMaxMessageLength",
        str(max_message_length),
        "--functions-uri",
        f"http://{address}/",
        "--functions-worker-id",
        worker_id,
        "--functions-request-id",
        request_id,
        "--functions-grpc-max-message-length",
        str(max_message_length),
    ]


class _Servicer(settlement_pb2_grpc.SettlementServicer):  # type: ignore[misc]
    def __init__(self, server: SettlementServer) -> None:
        self._server = server

    def Complete(self, request: Any, context: grpc.ServicerContext) -> Empty:  # noqa: N802 - gRPC method name
        return self._server._settle("Complete", context, request.locktoken, "complete", request=None)

    def Abandon(self, request: Any, context: grpc.ServicerContext) -> Empty:  # noqa: N802
        return self._server._settle("Abandon", context, request.locktoken, "abandon", request=request)

    def Defer(self, request: Any, context: grpc.ServicerContext) -> Empty:  # noqa: N802
        return self._server._settle("Defer", context, request.locktoken, "defer", request=request)

    def Deadletter(self, request: Any, context: grpc.ServicerContext) -> Empty:  # noqa: N802
        reason = request.deadletterReason.value if request.HasField("deadletterReason") else None
        description = (
            request.deadletterErrorDescription.value if request.HasField("deadletterErrorDescription") else None
        )
        return self._server._settle(
            "Deadletter",
            context,
            request.locktoken,
            "deadletter",
            request=request,
            reason=reason,
            description=description,
        )

    def RenewMessageLock(self, request: Any, context: grpc.ServicerContext) -> Empty:  # noqa: N802
        return self._server._renew(context, request.locktoken)

    # Sessions are not modelled by the broker: the session methods keep the generated UNIMPLEMENTED.


class SettlementServer:
    """The ``Settlement`` gRPC service over ``broker`` on ``127.0.0.1:<free port>``."""

    _shared: SettlementServer | None = None
    _shared_guard = threading.Lock()

    def __init__(
        self, broker: InProcessBroker | None = None, *, max_message_length: int = HOST_MAX_MESSAGE_LENGTH
    ) -> None:
        self._broker = broker
        self._max_message_length = max_message_length
        self._server: grpc.Server | None = None
        self._address: str | None = None
        self._guard = threading.Lock()
        self._active: Counter[str] = Counter()  # the host's ActionsCache: lock tokens of running executions
        self.calls: Counter[str] = Counter()  # RPCs served, by method name ("Complete", ...)

    # ----- one per worker process ----------------------------------------------------------------

    @classmethod
    def shared(cls) -> SettlementServer:
        """The process-wide server, started on first use, with the extension's ``ServiceBusMessageActions``
        singleton pointed at it: what one worker process sees (its host's gRPC endpoint never changes
        for the worker's life). A host ``attach``es its broker for its lifetime and ``detach``es it."""
        with cls._shared_guard:
            if cls._shared is None:
                server = cls()
                server.start()
                cls._shared = server
            server = cls._shared
        server._ensure_installed()
        return server

    def attach(self, broker: InProcessBroker) -> None:
        """Serve settlements against ``broker`` (the current host's). One broker at a time."""
        with self._guard:
            if self._broker is not None and self._broker is not broker:
                raise RuntimeError("another host's broker is attached to this settlement server; detach it first")
            self._broker = broker
        self._ensure_installed()

    def detach(self, broker: InProcessBroker) -> None:
        """The host of ``broker`` stopped: its executions' tokens are forgotten (``LockToken ... not found``)."""
        with self._guard:
            if self._broker is broker:
                self._broker = None
                self._active.clear()

    def _ensure_installed(self) -> None:
        from azurefunctions.extensions.bindings.servicebus import ServiceBusMessageActions

        current = ServiceBusMessageActions._instance
        if self._address is not None and (current is None or getattr(current, "_uri", None) != self._address):
            install_message_actions(self._address, self._max_message_length)

    # ----- lifecycle ---------------------------------------------------------------------------

    def start(self) -> str:
        """Bind a free loopback port and serve; returns ``"127.0.0.1:<port>"``."""
        if self._server is not None:
            raise RuntimeError("the settlement server is already started")
        options = [
            ("grpc.max_send_message_length", self._max_message_length),
            ("grpc.max_receive_message_length", self._max_message_length),
            ("grpc.so_reuseport", 0),
        ]
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="settlement"), options=options
        )
        self.add_to_server(server)
        port = server.add_insecure_port("127.0.0.1:0")
        if port == 0:
            raise RuntimeError("could not bind a loopback port for the settlement server")
        server.start()
        self._server = server
        self._address = f"127.0.0.1:{port}"
        return self._address

    def add_to_server(self, server: grpc.Server) -> None:
        """Register the service on an existing gRPC server (as the host does on its worker channel)."""
        settlement_pb2_grpc.add_SettlementServicer_to_server(_Servicer(self), server)

    def stop(self, grace: float | None = None) -> None:
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None

    def __enter__(self) -> SettlementServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def address(self) -> str:
        if self._address is None:
            raise RuntimeError("the settlement server is not started")
        return self._address

    def worker_argv(self) -> list[str]:
        return worker_argv(self.address, self._max_message_length)

    # ----- the host's ActionsCache --------------------------------------------------------------

    @contextmanager
    def invocation(self, lock_token: object) -> Iterator[None]:
        """Wrap each trigger invocation in this: the function execution for the message locked as
        ``lock_token`` (a token, or a message with ``lock_token``) is running, and settlements with
        that token are accepted until the block ends (then ``LockToken ... not found``, as in the host,
        whose ``ActionsCache`` entry lives exactly as long as the execution)."""
        token = str(getattr(lock_token, "lock_token", lock_token) or "")
        if not token or token == "None":
            raise ValueError("a trigger message always has a lock token")
        with self._guard:
            self._active[token] += 1
        try:
            yield
        finally:
            with self._guard:
                self._active[token] -= 1
                if self._active[token] <= 0:
                    del self._active[token]

    def is_active(self, lock_token: str) -> bool:
        with self._guard:
            return lock_token in self._active

    # ----- handlers ----------------------------------------------------------------------------

    def _settle(
        self,
        method: str,
        context: grpc.ServicerContext,
        token: str,
        outcome: Outcome,
        *,
        request: Any,
        reason: str | None = None,
        description: str | None = None,
    ) -> Empty:
        self._count(method)
        self._require_active(context, token)
        if request is not None and request.propertiesToModify:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "propertiesToModify is not modelled by the local broker")
        try:
            check_dead_letter_text(reason, description)
        except DeadLetterTextTooLong as exc:  # the SDK throws before calling the service: nothing settled
            context.abort(grpc.StatusCode.UNKNOWN, str(exc))
        try:
            self._attached(context, token).settle_lock(token, outcome, reason, description)
        except MessageLockLost as exc:
            self._lock_lost(context, exc)
        return Empty()

    def _renew(self, context: grpc.ServicerContext, token: str) -> Empty:
        self._count("RenewMessageLock")
        self._require_active(context, token)
        try:
            self._attached(context, token).renew_lock(token)
        except MessageLockLost as exc:
            self._lock_lost(context, exc)
        return Empty()

    def _count(self, method: str) -> None:
        with self._guard:
            self.calls[method] += 1

    def _require_active(self, context: grpc.ServicerContext, token: str) -> None:
        if not self.is_active(token):
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"LockToken {token} not found.")

    def _attached(self, context: grpc.ServicerContext, token: str) -> InProcessBroker:
        broker = self._broker
        if broker is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"LockToken {token} not found.")
        assert broker is not None
        return broker

    @staticmethod
    def _lock_lost(context: grpc.ServicerContext, exc: MessageLockLost) -> NoReturn:
        context.abort(grpc.StatusCode.UNKNOWN, f"{LOCK_LOST_TEXT} [local broker: {exc}]")
        raise AssertionError("unreachable")  # context.abort raises


# ----- the extension's singleton ----------------------------------------------------------------

# Set by the host for an invocation whose settlement takes a round trip (profile servicebus.settle_latency_ms).
settle_round_trip: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "localrun_settle_round_trip", default=None
)


class _RoundTripStub:
    """The extension's ``SettlementStub`` whose calls first wait out ``settle_round_trip``, in the thread that
    makes them. In Azure the host's ``SettlementService`` answers once the SDK's ``CompleteMessageAsync`` (or
    abandon, dead-letter, defer) has had Service Bus's answer, and ``ServiceBusMessageActions`` waits for it
    with a blocking gRPC call (its methods are not coroutines): from an async function the worker's event loop
    waits, every other invocation with it (the runner counts such a wait, ``blocking_sleeps_on_worker_loop``)."""

    def __init__(self, stub: Any) -> None:
        self._stub = stub

    def __getattr__(self, name: str) -> Callable[..., Any]:
        call = getattr(self._stub, name)

        def after_round_trip(*args: Any, **kwargs: Any) -> Any:
            wait = settle_round_trip.get()
            if wait is not None:
                wait()
            return call(*args, **kwargs)

        return after_round_trip


def install_message_actions(
    address: str, max_message_length: int = HOST_MAX_MESSAGE_LENGTH
) -> ServiceBusMessageActions:
    """Make the extension's process-wide ``ServiceBusMessageActions`` singleton talk to ``address``,
    as a fresh worker process started with ``worker_argv(address)`` would, and return it.

    In Azure each host start launches a new worker process, so the singleton is built once from that
    process's command line. The runner may start several hosts in one process, so this replaces
    ``ServiceBusMessageActions._instance`` under the class's own ``_lock`` (the lock ``get_instance``
    takes), constructing the new instance with ``sys.argv`` set to the worker's arguments only for
    the constructor call (the constructor is the only reader) and restored before returning. Call
    ``uninstall_message_actions`` when that host stops."""
    from azurefunctions.extensions.bindings.servicebus import ServiceBusMessageActions

    argv = [sys.argv[0] if sys.argv else "worker.py", *worker_argv(address, max_message_length)]
    with ServiceBusMessageActions._lock:
        saved = sys.argv
        sys.argv = argv
        try:
            instance = ServiceBusMessageActions()
        finally:
            sys.argv = saved
        instance._client = _RoundTripStub(instance._client)
        ServiceBusMessageActions._instance = instance
    return instance


def uninstall_message_actions(instance: ServiceBusMessageActions | None = None) -> None:
    """Drop the singleton (only if it is still ``instance``, when given), so the next host installs its own."""
    from azurefunctions.extensions.bindings.servicebus import ServiceBusMessageActions

    with ServiceBusMessageActions._lock:
        if instance is None or ServiceBusMessageActions._instance is instance:
            ServiceBusMessageActions._instance = None
