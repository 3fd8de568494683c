"""``dev.py``'s check of ``.venv``: a venv whose creation was interrupted (Ctrl-C while dev.py says "creating .venv":
``python -m venv`` installs pip last) has a Python 3.13 and no pip. dev.py took it for a whole one, so every
later command failed at ``pip install`` ("No module named pip") until the user deleted ``.venv`` by hand; it is
now made again. Checked on real venvs: one made without pip, as the interrupted one is left, and this one."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def dev_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dev_venv_under_test", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_venv_without_pip_is_not_taken_for_a_whole_one(tmp_path: Path) -> None:
    dev = dev_module()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120)
    half = tmp_path / "venv" / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    assert subprocess.run([str(half), "-c", "import venv"], check=False).returncode == 0  # it runs, 3.13 and all
    assert dev._venv_version(half) is None
    assert dev._venv_version(Path(sys.executable)) == sys.version_info[:2]  # this one, with pip
    assert dev._venv_version(tmp_path / "absent" / "python") is None


def test_a_checkov_venv_without_pip_is_made_again(tmp_path: Path) -> None:
    """``.venv-checkov`` likewise: it was made only when its Python was missing."""
    dev: Any = dev_module()
    checkov = tmp_path / "venv-checkov"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(checkov)], check=True, timeout=120)
    dev.CHECKOV_VENV = checkov
    dev.CHECKOV_PYTHON = checkov / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    installs: list[tuple[object, ...]] = []

    def run(*cmd: object, check: bool = True) -> int:  # the checkov install itself is not under test
        installs.append(cmd)
        return 0

    dev.run = run
    dev._setup_checkov()
    pip = subprocess.run([str(dev.CHECKOV_PYTHON), "-m", "pip", "--version"], capture_output=True, check=False)
    assert pip.returncode == 0  # pip there now: the install can run
    assert [cmd[1:4] for cmd in installs] == [("-m", "pip", "install")]
