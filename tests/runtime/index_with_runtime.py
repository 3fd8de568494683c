"""``python -m tests.runtime.index_with_runtime APP_DIR``: indexes ``APP_DIR/function_app.py`` in a fresh
interpreter exactly as the Functions Python worker does at start-up (``load_binding_registry()``, then
``handle_event.index_functions``), and prints one JSON line: the functions it indexed, or the error
that failed indexing (``FunctionLoadError`` for a signature the worker refuses)."""

from __future__ import annotations

import json
import os
import sys


def main(app_dir: str) -> int:
    sys.path.insert(0, app_dir)
    os.chdir(app_dir)
    import functions_host_protos
    from azure_functions_runtime import handle_event
    from azure_functions_runtime.bindings.meta import load_binding_registry

    load_binding_registry()
    handle_event.protos = functions_host_protos
    try:
        metadata = handle_event.index_functions(os.path.join(app_dir, "function_app.py"), app_dir)
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return 1
    functions = {m.name: [json.loads(raw) for raw in m.raw_bindings] for m in metadata}
    print(json.dumps({"functions": functions}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
