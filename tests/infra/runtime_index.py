"""The raw bindings the Functions host receives, as the pinned runtime produces them when it indexes
function_app.py in a fresh interpreter (``tests.runtime.index_with_runtime``: ``load_binding_registry()``,
then ``handle_event.index_functions`` with the host's protobuf messages): ``{function name: [raw
binding, ...]}``, each decoded from the JSON string in ``RpcFunctionMetadata.raw_bindings``."""

from __future__ import annotations

from functools import cache
from typing import Any

from tests.infra.paths import ROOT
from tests.runtime.index_with_runtime import index_with_runtime


@cache
def raw_bindings() -> dict[str, list[dict[str, Any]]]:
    result = index_with_runtime(ROOT)
    assert "error" not in result, f"the runtime did not index function_app.py: {result['error']}"
    functions: dict[str, list[dict[str, Any]]] = result["functions"]
    return functions
