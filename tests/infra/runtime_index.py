"""The raw bindings the Functions host receives: ``python -m tests.infra.runtime_index`` indexes
function_app.py in a fresh interpreter the way the worker does on WorkerInitRequest
(``load_binding_registry()``, then ``azure_functions_runtime.handle_event.index_functions`` with
the host's protobuf messages) and prints ``{function name: [raw binding, ...]}`` as JSON, each raw
binding decoded from the JSON string the runtime puts in ``RpcFunctionMetadata.raw_bindings``."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from typing import Any

from tests.infra.paths import ROOT


def describe() -> dict[str, list[dict[str, Any]]]:
    # functions_host_protos: the host's FunctionRpc_pb2, extracted by `python3 dev.py setup`.
    import functions_host_protos  # type: ignore[import-untyped]
    from azure_functions_runtime import handle_event  # type: ignore[import-untyped]
    from azure_functions_runtime.bindings.meta import load_binding_registry  # type: ignore[import-untyped]

    load_binding_registry()
    handle_event.protos = functions_host_protos
    metadata = handle_event.index_functions(str(ROOT / "function_app.py"), str(ROOT))
    return {m.name: [json.loads(raw) for raw in m.raw_bindings] for m in metadata}


@cache
def raw_bindings() -> dict[str, list[dict[str, Any]]]:
    result = subprocess.run(
        [sys.executable, "-m", "tests.infra.runtime_index"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"the runtime did not index function_app.py:\n{result.stderr[-4000:]}"
    index: dict[str, list[dict[str, Any]]] = json.loads(result.stdout.strip().splitlines()[-1])
    return index


if __name__ == "__main__":
    print(json.dumps(describe()))
