"""The SDK's own ``DurableOrchestrationClient`` against a ``DurableEngine``, as the app's functions get it
from the runner: HTTP on loopback to the engine's Durable extension API, and every call on the worker's
one event loop (the SDK keeps one aiohttp session per process, bound to the loop that created it)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from azure.durable_functions import DurableOrchestrationClient

from localrun.durable.engine import DurableEngine
from localrun.durable.http_api import DurableExtensionApi
from localrun.worker.process import FunctionsWorker


class RealDurableClient:
    def __init__(self, engine: DurableEngine) -> None:
        self.api = DurableExtensionApi(engine)
        self.api.start()
        self.client = DurableOrchestrationClient(self.api.client_binding_json())
        self._loop = FunctionsWorker.get().loop

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=30)

    def close(self) -> None:
        from azure.durable_functions.models.utils import http_utils

        # A later server may get this port back: pooled connections to this one must not be reused.
        self.run(http_utils._close_session())
        self.api.close()

    def __enter__(self) -> RealDurableClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
