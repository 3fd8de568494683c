"""Two dev.py commands started at once in one checkout (``demo`` while ``test`` is still installing) set it up one
after the other: before, both ran ``pip install`` into the same ``.venv`` and ``npm ci`` (which empties
``node_modules`` first) at the same time. Driven with the installs replaced by steps that write down when they
ran: what is tested is dev.py's ``setup`` taking its turn."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

DRIVER = """
import importlib.util, json, sys, time
from pathlib import Path

spec = importlib.util.spec_from_file_location("dev_under_test", sys.argv[1])
dev = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dev)
dev.SETUP_LOCK = Path(sys.argv[2])
record = Path(sys.argv[3])
dev.check_node = lambda: None
dev._venv_version = lambda python: dev.APP_PYTHON

def step(name):
    def install():
        began = time.monotonic()
        time.sleep(1.0)
        with record.open("a") as out:
            out.write(json.dumps([name, began, time.monotonic()]) + "\\n")
    return install

dev._setup_npm = step("npm")
dev._setup_app_packages = step("pip")
dev.setup(for_tests=False)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="the lock is fcntl's")
def test_two_setups_at_once_take_turns(tmp_path: Path) -> None:
    driver, record = tmp_path / "driver.py", tmp_path / "record.jsonl"
    driver.write_text(DRIVER)
    command = [sys.executable, str(driver), str(ROOT / "dev.py"), str(tmp_path / "setup.lock"), str(record)]
    first = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    second = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    errors = [first.communicate(timeout=60)[1], second.communicate(timeout=60)[1]]
    assert first.returncode == 0 and second.returncode == 0, errors
    steps = sorted((json.loads(line) for line in record.read_text().splitlines()), key=lambda s: s[1])
    assert len(steps) == 4
    # each setup's two installs run beside each other; the other setup's only after both ended
    (_, _, a1), (_, _, b1), (_, c0, _), (_, d0, _) = steps
    assert max(a1, b1) <= min(c0, d0), steps
    # the one that waited says so, naming the holder's pid when it had written it already: between the holder's lock
    # and its write the file is empty, and the waiter says "another dev.py" (seen on a loaded CI machine)
    waited = [e for e in errors if "waiting for dev.py (pid" in e or "waiting for another dev.py" in e]
    assert len(waited) == 1 and "to finish setting up this checkout" in waited[0], errors
