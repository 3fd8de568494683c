""".funcignore keeps tools, tests and local files out of the package azd deploys, and never
excludes code the function app imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.infra.deployment import funcignore_patterns
from tests.infra.deployment import ignored as ignored_path
from tests.infra.paths import ROOT

# Run in a fresh interpreter: the test session itself imports local-only code (localrun).
LIST_APP_MODULES = """
import json, sys
from pathlib import Path
import function_app
root = Path.cwd().resolve()
files = []
for module in list(sys.modules.values()):
    path = getattr(module, "__file__", None)
    if path and Path(path).resolve().is_relative_to(root):
        files.append(Path(path).resolve().relative_to(root).parts[0])
print(json.dumps(sorted(set(files))))
"""

PATTERNS = funcignore_patterns()


def ignored(top_level: str) -> bool:
    """Whether a top-level file, or everything in a top-level directory, is left out."""
    return ignored_path(Path(top_level), PATTERNS) or ignored_path(Path(top_level, "any-file"), PATTERNS)


def test_code_the_app_imports_is_deployed():
    result = subprocess.run(
        [sys.executable, "-c", LIST_APP_MODULES], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    tops = [t for t in json.loads(result.stdout.strip().splitlines()[-1]) if not t.startswith(".venv")]
    assert "function_app.py" in tops
    assert [t for t in tops if ignored(t)] == []


def test_runtime_files_are_deployed():
    for name in ("function_app.py", "host.json", "requirements.txt"):
        assert not ignored(name), name


def test_local_and_tooling_files_are_not_deployed():
    for name in (".venv", ".venv-checkov", "node_modules", "local.settings.json", "tests", "infra", "tools", ".azure"):
        assert ignored(name), name
