"""``python -m tests.runtime.index_with_runtime APP_DIR``: indexes ``APP_DIR/function_app.py`` in a fresh
interpreter exactly as the Functions Python worker does at start-up (``load_binding_registry()``, then
``handle_event.index_functions``), and prints one JSON line: the functions it indexed, or the error
that failed indexing (``FunctionLoadError`` for a signature the worker refuses).
``index_with_runtime(app_dir, python)`` runs it and returns that line, decoded; with ``env`` the indexer
sees only those environment variables (and ``TMPDIR``), and with ``isolated`` it runs as a file in isolated mode
(``python -I``) from the app directory, so nothing but the app directory and the interpreter's own
packages can be imported (not this repository's local-only code)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def index_with_runtime(
    app_dir: Path, python: str = sys.executable, *, env: dict[str, str] | None = None, isolated: bool = False
) -> dict[str, Any]:
    if isolated:
        command, cwd = [python, "-I", str(Path(__file__).resolve()), str(app_dir)], app_dir
    else:
        command, cwd = (
            [python, "-m", "tests.runtime.index_with_runtime", str(app_dir)],
            Path(__file__).resolve().parents[2],
        )
    # With a connection string among the settings the app starts the Azure Monitor exporters, whose offline store goes
    # under the temp directory (Microsoft-AzureMonitor-<hash>, a new one for every app directory): one of its own here.
    with tempfile.TemporaryDirectory(prefix="index-with-runtime-") as temp:
        variables = {**(os.environ if env is None else env), "TMPDIR": temp}
        done = subprocess.run(command, cwd=cwd, env=variables, capture_output=True, text=True, timeout=300, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result from the indexer:\n{done.stdout}\n{done.stderr}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result


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
