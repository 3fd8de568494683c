"""Where the infra tests find the project's files, the shared schemas and checkov."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
MODULES = INFRA / "modules"
SCHEMAS = ROOT.parent / "shared" / "schemas"
CHECKOV_VENV = ROOT / ".venv-checkov"


def schema(name: str) -> Path:
    """A schema from ../shared/schemas, or a skip that says why (a fresh clone has no ../shared)."""
    path = SCHEMAS / name
    if not path.is_file():
        pytest.skip(f"{path} is absent: schema validation needs the shared schemas beside the repo (../shared/schemas)")
    return path


def checkov_executable() -> Path:
    """checkov lives in its own venv (its pins conflict with the app's); `python3 dev.py setup` installs it."""
    override = os.environ.get("CHECKOV_BIN")
    candidates = [Path(override)] if override else []
    candidates += [CHECKOV_VENV / "bin" / "checkov", CHECKOV_VENV / "Scripts" / "checkov.exe"]
    on_path = shutil.which("checkov")
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    pytest.fail(f"checkov not found in {CHECKOV_VENV} (or CHECKOV_BIN, or PATH): run `python3 dev.py setup`")
