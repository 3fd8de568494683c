"""The Functions Python worker, in this process, driven the way the Functions host drives it.

From Python 3.13 the worker's execution engine is the PyPI package ``azure-functions-runtime`` (pinned
in requirements.txt; Azure runs the pinned version). The host talks to it with protobuf messages over
gRPC, through a small proxy that hands each message to ``azure_functions_runtime.handle_event``. This
module plays that proxy for the local runner: it sends ``WorkerInitRequest`` (the runtime indexes
``function_app.py`` exactly as at start-up in Azure, with every check it makes), reads the function
metadata (the raw bindings JSON the host receives), and sends one ``InvocationRequest`` per invocation
with the host's wire types (``TypedData``), on one event loop for the whole process, as the worker has.

One worker per Python process, as in Azure: the runtime keeps its function registry in module globals
and the SDK refuses to index an app twice. ``FunctionsWorker.get()`` creates and initialises it once.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import json
import logging
import os
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from localrun.worker.executor import Job, TaskExecutor, current_inbox

log = logging.getLogger(__name__)

APP_DIR = Path(__file__).resolve().parent.parent.parent
SCRIPT_FILE = "function_app.py"
LOOP_THREAD = "functions-worker-loop"


class WorkerError(RuntimeError):
    """The runtime refused to start the app (indexing failed), or a message got no answer."""


class InvocationFailed(Exception):
    """The invocation's response said Failure: the function (or the runtime's binding of its
    arguments or result) raised. The message is the runtime's ``RpcException.message``."""

    def __init__(self, function: str, message: str, stack_trace: str = "") -> None:
        super().__init__(message)
        self.function = function
        self.stack_trace = stack_trace


def host_protos() -> ModuleType:
    """The host's protobuf messages (``FunctionRpc_pb2`` and friends), which ``dev.py setup`` extracts
    from the ``azure-functions-runtime-v1`` wheel into the venv as ``functions_host_protos``."""
    try:
        import functions_host_protos
    except ImportError as exc:  # pragma: no cover - a setup problem, said plainly
        raise WorkerError(
            "the Functions host protobuf messages are missing: run `python3 dev.py setup` "
            "(it extracts them from the azure-functions-runtime-v1 wheel into .venv)"
        ) from exc
    protos: ModuleType = functions_host_protos
    return protos


@dataclass(frozen=True)
class IndexedFunction:
    """One function as the runtime indexed it: its metadata as the host receives it, and the Python
    callable the runtime invokes (for tests of the plain code behind a trigger)."""

    function_id: str
    name: str
    bindings: tuple[dict[str, Any], ...]  # the raw bindings JSON, unresolved (``%NAME%`` as written)
    func: Callable[..., Any]
    is_async: bool

    @property
    def trigger(self) -> dict[str, Any]:
        return next(b for b in self.bindings if b["type"].endswith("Trigger"))

    def binding(self, binding_type: str) -> dict[str, Any] | None:
        return next((b for b in self.bindings if b["type"] == binding_type), None)


def _quiet_about_dropped_invocations(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A host restart drops its in-flight invocations as a killed process would: their coroutines
    never resume (``executor``), so asyncio reports each one "destroyed but pending" when the
    process ends. That is the simulated kill, not an error; every other report goes to asyncio's
    default handler. (An invocation that was not dropped is always awaited to its response.)"""
    task = context.get("task")
    coroutine = task.get_coro() if isinstance(task, asyncio.Task) else None
    if context.get("message") == "Task was destroyed but it is pending!" and (
        getattr(coroutine, "__name__", None) == "invocation_request"
    ):
        return
    loop.default_exception_handler(context)


class FunctionsWorker:
    _instance: FunctionsWorker | None = None
    _creation = threading.Lock()

    @classmethod
    def get(cls) -> FunctionsWorker:
        with cls._creation:
            if cls._instance is None:
                cls._instance = cls(APP_DIR)
            return cls._instance

    @staticmethod
    def worker_environment(app_settings: Mapping[str, str]) -> dict[str, str]:
        """The app settings the worker itself reads from its environment (Azure passes every app
        setting to the worker process as an environment variable; the runner, one process for the
        tests too, sets only the worker's own switches: ``PYTHON_*`` and ``FUNCTIONS_*``)."""
        return {k: v for k, v in app_settings.items() if k.startswith(("PYTHON_", "FUNCTIONS_"))}

    def __init__(self, app_dir: Path) -> None:
        from azure_functions_runtime import handle_event

        from localrun.host import local_settings_example

        for name, value in self.worker_environment(local_settings_example()).items():
            os.environ.setdefault(name, value)

        self.protos = host_protos()
        self._events = handle_event
        self.app_dir = app_dir
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(TaskExecutor())
        self.loop.set_exception_handler(_quiet_about_dropped_invocations)
        self._thread = threading.Thread(target=self.loop.run_forever, name=LOOP_THREAD, daemon=True)
        self._thread.start()
        atexit.register(self._close_sessions)
        self._ids = itertools.count(1)
        self.invocations = 0  # InvocationRequests sent, all hosts of this process together
        self.capabilities = self._init()
        self.functions = self._index()

    # --- start-up -----------------------------------------------------------------------------------

    def _message(self, **request: Any) -> SimpleNamespace:
        """What the proxy worker hands ``handle_event``: the ``StreamingMessage`` and its properties."""
        return SimpleNamespace(
            request=self.protos.StreamingMessage(request_id=f"req-{next(self._ids)}", **request),
            properties={"host": "127.0.0.1", "protos": self.protos},
        )

    def _init(self) -> dict[str, str]:
        init = self.protos.WorkerInitRequest(
            host_version="4.1040.0",
            function_app_directory=str(self.app_dir),
            capabilities={"FunctionDataCache": "false"},
        )
        response = self._call(self._events.worker_init_request(self._message(worker_init_request=init)))
        if response.result.status != self.protos.StatusResult.Success:
            raise WorkerError(f"the worker refused to start the app: {response.result.exception.message}")
        return dict(response.capabilities)

    def _index(self) -> dict[str, IndexedFunction]:
        request = self.protos.FunctionsMetadataRequest(function_app_directory=str(self.app_dir))
        response = self._call(
            self._events.functions_metadata_request(self._message(functions_metadata_request=request))
        )
        if response.result.status != self.protos.StatusResult.Success:
            raise WorkerError(f"indexing failed: {response.result.exception.message}")
        indexed: dict[str, IndexedFunction] = {}
        registry = self._events._functions  # the runtime's own registry of what it will invoke
        for metadata in response.function_metadata_results:
            info = registry.get_function(metadata.function_id)
            load = self.protos.FunctionLoadRequest(function_id=metadata.function_id, metadata=metadata)
            loaded = self._call(self._events.function_load_request(self._message(function_load_request=load)))
            if loaded.result.status != self.protos.StatusResult.Success:
                raise WorkerError(f"{metadata.name} did not load: {loaded.result.exception.message}")
            indexed[metadata.name] = IndexedFunction(
                function_id=metadata.function_id,
                name=metadata.name,
                bindings=tuple(json.loads(raw) for raw in metadata.raw_bindings),
                func=info.func,
                is_async=info.is_async,
            )
        return indexed

    def _close_sessions(self) -> None:
        """At exit, close the durable client's process-wide HTTP session on the loop that owns it (a
        real worker process just ends; here aiohttp would warn about an unclosed session)."""
        from azure.durable_functions.models.utils import http_utils

        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(http_utils._close_session(), self.loop).result(timeout=5)

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    # --- invocations --------------------------------------------------------------------------------

    def invoke(
        self,
        function: IndexedFunction,
        inputs: Mapping[str, Any],
        trigger_metadata: Mapping[str, Any] | None = None,
        *,
        run_job: Callable[[Job], None] | None = None,
    ) -> Any:
        """Sends one ``InvocationRequest`` (``inputs``: binding name -> ``TypedData``) and waits for the
        response, running the invocation's blocking work in the calling thread (see ``executor``), each piece
        through ``run_job`` when given (the host's pool of threads for it)
        Returns the response's return value ``TypedData`` (or None); raises ``InvocationFailed``."""
        protos = self.protos
        request = protos.InvocationRequest(
            invocation_id=f"inv-{next(self._ids)}",
            function_id=function.function_id,
            input_data=[protos.ParameterBinding(name=name, data=data) for name, data in inputs.items()],
            trigger_metadata=dict(trigger_metadata or {}),
        )
        self.invocations += 1
        inbox: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        token = current_inbox.set(inbox)
        try:
            future = asyncio.run_coroutine_threadsafe(
                self._events.invocation_request(self._message(invocation_request=request)), self.loop
            )
        finally:
            current_inbox.reset(token)
        future.add_done_callback(lambda _: inbox.put(None))
        while (job := inbox.get()) is not None:
            if run_job is None:
                job()
            else:  # the host runs it (on a thread of the pool it models)
                run_job(job)
        response = future.result()
        if response.result.status != protos.StatusResult.Success:
            exception = response.result.exception
            raise InvocationFailed(function.name, exception.message, exception.stack_trace)
        if response.output_data:  # an output binding's value: the runner has no binding to hand it to
            names = ", ".join(sorted(b.name for b in response.output_data))
            raise InvocationFailed(function.name, f"output bindings the local runner does not emulate: {names}")
        return response.return_value if response.HasField("return_value") else None
