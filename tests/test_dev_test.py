"""``python3 dev.py test``: its setup installs the npm and checkov packages beside the app's; with no
arguments it runs ``tests/e2e`` in a second pytest beside the rest of the suite. The two runs
together collect every test once; either failing (or collecting nothing) fails the command while the
other still finishes; Ctrl-C, SIGTERM, SIGHUP or a lint failure stops both the way pytest stops
cleanly (fixtures torn down), with no process left behind. Before installing anything, setup says what
to install when Node.js is missing or older than package.json asks; ``--help`` lists every command.

The runner is driven here with small synthetic suites in place of the two halves and no lint."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent

DRIVER = """
import importlib.util, json, subprocess, sys
from pathlib import Path

spec = importlib.util.spec_from_file_location("dev_under_test", sys.argv[1])
dev = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dev)
dev.E2E_LOG = Path(sys.argv[2])
dev.STOP_GRACE_S = 20.0
lint_fails = sys.argv[4] == "lint-fails"

def lint():
    if lint_fails:
        import time
        while not Path(sys.argv[5]).exists():  # the e2e run is under way, in its test
            time.sleep(0.1)
        time.sleep(0.5)
        raise subprocess.CalledProcessError(1, "ruff")

dev.lint = lint
dev.suite_parts = lambda: json.loads(sys.argv[3])
if sys.argv[6] == "sigint-ignored":  # started as a shell's ``cmd &``: SIGINT ignored, and inherited so
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
try:
    sys.exit(dev.run_whole_suite())
except subprocess.CalledProcessError as exc:
    sys.exit(exc.returncode)
"""

# A session fixture that starts a server-like child process and stops it at teardown, as the Cosmos
# fixture does; both pids and the teardown are written down for the test to check.
CONFTEST = """
import os, subprocess, sys
from pathlib import Path
import pytest

@pytest.fixture(scope="session", autouse=True)
def server():
    here = Path(__file__).parent
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    (here / "pids").write_text(f"{os.getpid()} {child.pid}")
    yield
    child.terminate()
    child.wait()
    (here / "torn-down").write_text("yes")
"""


def suite(root: Path, name: str, body: str) -> list[str]:
    """A folder with one test file (``body``) and the fixture above; its pytest arguments."""
    folder = root / name
    folder.mkdir()
    (folder / "conftest.py").write_text(CONFTEST)
    if body:
        (folder / f"test_{name}.py").write_text(body)
    return [str(folder), "-c", str(root / "pytest.ini"), "--rootdir", str(root), "-p", "no:cacheprovider"]


PASSES = "import time\ndef test_ok():\n    time.sleep(1)\n"
FAILS = "def test_broken():\n    assert 1 == 2\n"
WAITS = "import time\ndef test_long():\n    time.sleep(600)\n"


def drive(
    tmp_path: Path, rest: list[str], e2e: list[str], lint: str = "lint-passes", sigint: str = "sigint-default"
) -> subprocess.Popen[str]:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    parts = json.dumps([rest, e2e])
    started = str(tmp_path / "e2e" / "pids")
    command = [sys.executable, "-c", DRIVER, str(ROOT / "dev.py"), str(tmp_path / "e2e.log"), parts, lint, started]
    command.append(sigint)
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, its parent gone before reaping it) has ended too
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def pids(folder: Path) -> list[int]:
    return [int(p) for p in (folder / "pids").read_text().split()]


def collected(*args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def load_dev() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dev_under_test", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def dev() -> ModuleType:
    return load_dev()


def test_setup_installs_npm_and_checkov_packages_beside_the_app_packages(dev, monkeypatch):
    together = threading.Barrier(3, timeout=10)  # broken (an error) unless the three run at once
    for install in ("_setup_app_packages", "_setup_npm", "_setup_checkov"):
        monkeypatch.setattr(dev, install, together.wait)
    monkeypatch.setattr(dev, "_venv_version", lambda python: dev.APP_PYTHON)
    monkeypatch.setattr(dev, "ensure_chromium", lambda: None)
    monkeypatch.setattr(dev, "check_node", lambda: None)
    dev.setup()


def test_an_install_failing_beside_the_others_fails_setup_once_they_are_done(dev, monkeypatch):
    finished: list[str] = []

    def npm() -> None:
        raise subprocess.CalledProcessError(1, "npm ci")

    def slow(name: str) -> None:
        time.sleep(0.3)
        finished.append(name)

    monkeypatch.setattr(dev, "_setup_npm", npm)
    monkeypatch.setattr(dev, "_setup_app_packages", lambda: slow("app"))
    monkeypatch.setattr(dev, "_setup_checkov", lambda: slow("checkov"))
    monkeypatch.setattr(dev, "_venv_version", lambda python: dev.APP_PYTHON)
    monkeypatch.setattr(dev, "ensure_chromium", lambda: None)
    monkeypatch.setattr(dev, "check_node", lambda: None)
    with pytest.raises(subprocess.CalledProcessError, match="npm ci"):
        dev.setup()
    assert sorted(finished) == ["app", "checkov"]


def test_the_two_runs_collect_every_test_of_the_suite_once(dev):
    rest, e2e = (collected(*part) for part in dev.suite_parts())
    whole = collected()
    assert rest and e2e
    assert not set(rest) & set(e2e)
    assert sorted(rest + e2e) == sorted(whole)


@pytest.mark.parametrize("failing", ["rest", "e2e"])
def test_either_run_failing_fails_the_command_and_the_other_still_finishes(tmp_path, failing):
    rest = suite(tmp_path, "rest", FAILS if failing == "rest" else PASSES)
    e2e = suite(tmp_path, "e2e", FAILS if failing == "e2e" else PASSES)
    runner = drive(tmp_path, rest, e2e)
    output, _ = runner.communicate(timeout=120)
    assert runner.returncode == 1, output
    assert (tmp_path / "rest" / "torn-down").exists() and (tmp_path / "e2e" / "torn-down").exists()
    assert output.count("1 passed") == 1 and output.count("1 failed") == 1, output  # the e2e log is printed too
    assert "exited 1" in output and "exited 0" in output


@pytest.mark.parametrize("empty", ["rest", "e2e"])
def test_a_run_that_collects_no_tests_fails_the_command(tmp_path, empty):
    rest = suite(tmp_path, "rest", "" if empty == "rest" else PASSES)
    e2e = suite(tmp_path, "e2e", "" if empty == "e2e" else PASSES)
    runner = drive(tmp_path, rest, e2e)
    output, _ = runner.communicate(timeout=120)
    assert runner.returncode == 1, output
    assert "collected no tests: that is a failure" in output


@pytest.mark.parametrize("sigint", ["sigint-default", "sigint-ignored"])
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGHUP", "lint-fails"])
def test_ctrl_c_sigterm_sighup_or_a_lint_failure_stops_both_runs_with_nothing_left_running(tmp_path, how, sigint):
    """Also when ``dev.py`` was started with SIGINT ignored (by a shell's ``cmd &``), which its pytest runs
    would inherit."""
    rest = suite(tmp_path, "rest", WAITS)
    e2e = suite(tmp_path, "e2e", WAITS)
    runner = drive(tmp_path, rest, e2e, "lint-fails" if how == "lint-fails" else "lint-passes", sigint)
    started: list[int] = []
    try:
        if how != "lint-fails":
            deadline = time.monotonic() + 60
            while not ((tmp_path / "rest" / "pids").exists() and (tmp_path / "e2e" / "pids").exists()):
                assert time.monotonic() < deadline and runner.poll() is None, "the two runs did not start"
                time.sleep(0.1)
            time.sleep(0.5)  # into the test
            runner.send_signal(getattr(signal, how))  # Ctrl-C, CI cancelling the job, the terminal closed
        output = ""
        with contextlib.suppress(subprocess.TimeoutExpired):  # it hangs when a run it started holds its stdout
            output, _ = runner.communicate(timeout=60)
        started = [*pids(tmp_path / "e2e"), *(pids(tmp_path / "rest") if how != "lint-fails" else [])]
        assert runner.returncode == (1 if how == "lint-fails" else 130), output
        assert (tmp_path / "e2e" / "torn-down").exists(), output  # stopped cleanly: its fixture's teardown ran
        if how != "lint-fails":  # a lint failure comes before the rest of the suite starts
            assert (tmp_path / "rest" / "torn-down").exists(), output
        assert not [pid for pid in started if alive(pid)], output
    finally:  # nothing of this test outlives it, whatever failed
        runner.kill()
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# The first run: a missing prerequisite is said before anything is installed, and the usage.


def fake_node(folder: Path, version: str) -> str:
    node = folder / "node"
    node.write_text(f"#!/bin/sh\necho {version}\n")
    node.chmod(0o755)
    return str(node)


@pytest.mark.parametrize(
    ("found", "says"),
    [
        ({"npm": "/usr/bin/npm"}, "node was not found on PATH"),
        ({"node": "v22.1.0"}, "npm was not found on PATH"),
        ({"node": "v18.19.0", "npm": "/usr/bin/npm"}, "is Node.js v18.19.0"),
    ],
)
def test_setup_says_what_to_install_before_installing_anything_when_node_is_missing_or_too_old(
    dev, monkeypatch, tmp_path, found, says
):
    paths = {name: fake_node(tmp_path, value) if name == "node" else value for name, value in found.items()}
    monkeypatch.setattr(dev.shutil, "which", paths.get)
    started: list[str] = []
    for step in ("find_app_python", "_setup_app_packages", "_setup_npm", "_setup_checkov", "ensure_chromium"):
        monkeypatch.setattr(dev, step, lambda step=step: started.append(step))
    monkeypatch.setattr(dev, "_venv_version", lambda python: None)
    with pytest.raises(SystemExit) as stopped:
        dev.setup()
    message = str(stopped.value.code)
    assert says in message
    assert "Node.js 20 or newer, with npm, is required" in message
    assert started == []


def test_setup_goes_on_with_a_node_as_new_as_package_json_asks(dev, monkeypatch, tmp_path):
    node = fake_node(tmp_path, "v20.0.0")
    monkeypatch.setattr(dev.shutil, "which", {"node": node, "npm": "/usr/bin/npm"}.get)
    assert dev.node_problem() is None
    assert dev.node_major_required() == 20


def test_help_shows_every_command_and_succeeds_and_an_unknown_command_is_named():
    shown = subprocess.run([sys.executable, "dev.py", "--help"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert shown.returncode == 0
    for command in ("dev.py demo", "dev.py test", "dev.py setup", "dev.py bench"):
        assert command in shown.stdout
    unknown = subprocess.run(
        [sys.executable, "dev.py", "deploy"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert unknown.returncode == 2
    assert "unknown command 'deploy'" in unknown.stderr


def test_dev_py_loads_without_the_unix_only_resource_module(monkeypatch):
    """Windows has no ``resource`` module; dev.py has Windows paths (``Scripts``, ``npm.cmd``, ``py -3.13``)."""
    monkeypatch.setitem(sys.modules, "resource", None)  # import resource: ImportError, as on Windows
    assert load_dev().APP_PYTHON == (3, 13)


def test_a_python_older_than_3_9_is_told_what_dev_py_needs(monkeypatch):
    monkeypatch.setattr(sys, "version_info", (3, 8, 18, "final", 0))
    with pytest.raises(SystemExit) as stopped:
        load_dev()
    assert "dev.py needs Python 3.9 or newer" in str(stopped.value.code)
    assert "python3.13 dev.py" in str(stopped.value.code)


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["demo"], ["_setup_app_packages", "_setup_npm"]),
        (["bench", "10"], ["_setup_app_packages", "_setup_npm"]),
        (["setup"], ["_setup_app_packages", "_setup_checkov", "_setup_npm", "ensure_chromium"]),
    ],
)
def test_demo_and_bench_set_up_only_what_they_run(dev, monkeypatch, command, expected):
    """``demo`` and ``bench`` need the app's packages and the Cosmos DB protocol server (npm), not the Bicep
    scanner's ``.venv-checkov`` nor Chromium, which only the tests use: a first run does not wait for them."""
    done: list[str] = []
    for step in ("_setup_app_packages", "_setup_npm", "_setup_checkov", "ensure_chromium"):
        monkeypatch.setattr(dev, step, lambda step=step: done.append(step))
    monkeypatch.setattr(dev, "_venv_version", lambda python: dev.APP_PYTHON)
    monkeypatch.setattr(dev, "check_node", lambda: None)

    class SetUp(Exception):
        """What the command does after its setup: not run here."""

    def after_setup(*args: object, **kwargs: object) -> None:
        raise SetUp

    monkeypatch.setattr(dev, "run", after_setup)
    monkeypatch.setattr(dev, "_bench_run", after_setup)
    monkeypatch.setattr(dev.sys, "argv", ["dev.py", *command])
    with contextlib.suppress(SetUp):
        dev.main()
    assert sorted(done) == expected
