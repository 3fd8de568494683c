"""``python3 dev.py test``: its setup installs the npm and checkov packages beside the app's; with no
arguments it runs the suite as three pytest processes at once (``tests/e2e``, the folders of
``BESIDE``, the rest). The three runs together collect every test once; any failing (or collecting
nothing) fails the command while the others still finish; Ctrl-C, SIGTERM, SIGHUP or a lint failure
stops all of them the way pytest stops cleanly (fixtures torn down), with no process left behind.
Before installing anything, setup says what to install when Node.js is missing or older than
package.json asks; ``--help`` lists every command.

The runner is driven here with small synthetic suites in place of the three parts and no lint."""

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
dev.LOG_DIR = Path(sys.argv[2])
dev.STOP_GRACE_S = 20.0
lint_fails = sys.argv[4] == "lint-fails"

def lint():
    if lint_fails:
        import time
        while not all(Path(pids).exists() for pids in json.loads(sys.argv[5])):  # the runs beside are in their test
            time.sleep(0.1)
        time.sleep(0.5)
        raise subprocess.CalledProcessError(1, "ruff")

dev.lint = lint
dev.suite_parts = lambda: [tuple(part) for part in json.loads(sys.argv[3])]
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
    (here / "niceness").write_text(str(os.nice(0)))
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
RUNS = ("rest", "beside", "e2e")  # the first runs in the terminal, the others beside it
FAILS = "def test_broken():\n    assert 1 == 2\n"
WAITS = "import time\ndef test_long():\n    time.sleep(600)\n"


def drive(
    tmp_path: Path, parts: dict[str, list[str]], lint: str = "lint-passes", sigint: str = "sigint-default"
) -> subprocess.Popen[str]:
    """``run_whole_suite`` of ``dev.py`` over ``parts`` (name: pytest arguments, the terminal's first)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    beside = json.dumps([str(tmp_path / name / "pids") for name in list(parts)[1:]])
    command = [sys.executable, "-c", DRIVER, str(ROOT / "dev.py"), str(tmp_path), json.dumps(list(parts.items()))]
    command += [lint, beside, sigint]
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


# Collects each list of pytest arguments in turn, in one process: the test modules are imported once (the
# first collection), so checking the parts costs about one collection of the suite instead of two.
COLLECT = """
import json, sys
import pytest

class Items:
    def pytest_collection_finish(self, session):
        self.ids = [item.nodeid for item in session.items]

found = []
for args in json.loads(sys.argv[1]):
    items = Items()
    code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *args], plugins=[items])
    if code != 0:
        sys.exit(f"pytest --collect-only {' '.join(args)} exited {code}")
    found.append(items.ids)
print("COLLECTED " + json.dumps(found))
"""


def collected(*parts: list[str]) -> list[list[str]]:
    """The test ids pytest collects with each of ``parts`` (lists of arguments)."""
    done = subprocess.run(
        [sys.executable, "-c", COLLECT, json.dumps(parts)], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found: list[list[str]] = json.loads(done.stdout.rsplit("COLLECTED ", 1)[1])
    return found


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


def test_the_three_runs_collect_every_test_of_the_suite_once(dev):
    whole, *parts = collected([], *(args for _, args in dev.suite_parts()))
    assert len(parts) == 3 and all(parts)
    assert len(whole) == len(set(whole))
    assert sorted(test for part in parts for test in part) == sorted(whole)  # each once, in one run only
    # the tests that read one kept simulation (tests/kept_runs.py) run in one process, which makes it once
    e2e = parts[[name for name, _ in dev.suite_parts()].index("e2e")]
    readers = ("tests/e2e/test_fault_profiles.py::", "tests/observability/test_events_match_the_record.py::")
    assert all(test in e2e for test in whole if test.startswith(readers))
    assert all(any(test.startswith(r) for test in e2e) for r in readers)


@pytest.mark.parametrize("failing", RUNS)
def test_any_run_failing_fails_the_command_and_the_others_still_finish(tmp_path, failing):
    parts = {name: suite(tmp_path, name, FAILS if name == failing else PASSES) for name in RUNS}
    runner = drive(tmp_path, parts)
    output, _ = runner.communicate(timeout=120)
    assert runner.returncode == 1, output
    assert all((tmp_path / name / "torn-down").exists() for name in RUNS), output
    assert output.count("2 passed") == 0 and output.count("1 passed") == 2, output  # the logs are printed too
    assert output.count("1 failed") == 1, output
    assert f"{failing} exited 1" in output and output.count("exited 0") == 2, output


def test_a_second_whole_suite_in_the_same_checkout_is_refused_while_the_first_runs(tmp_path):
    """Two at once wrote the same ``out/pytest-NAME.log``s: each printed the other's output as its own."""
    parts = {name: suite(tmp_path, name, "import time\ndef test_ok():\n    time.sleep(3)\n") for name in RUNS}
    first = drive(tmp_path, parts)
    deadline = time.monotonic() + 60
    while not all((tmp_path / name / "pids").exists() for name in RUNS) and time.monotonic() < deadline:
        time.sleep(0.1)  # the first is running its three pytest runs
    second = drive(tmp_path, parts)
    refused, _ = second.communicate(timeout=60)
    output, _ = first.communicate(timeout=120)
    assert second.returncode == 2, refused
    assert f"dev.py (pid {first.pid}) is running the whole suite in this checkout" in refused
    assert not [line for line in refused.splitlines() if line.startswith("+ ")]  # it started nothing
    assert first.returncode == 0 and output.count("1 passed") == 3, output
    assert drive(tmp_path, parts).wait(timeout=120) == 0  # once the first is done


def test_the_long_pole_keeps_its_priority_and_the_other_runs_are_started_lower(tmp_path, dev):
    """Three runs on two cores: ``tests/e2e`` (computing nearly all its time) keeps a core of its own while the
    other two share the other one and the gaps it leaves, instead of three equal shares stretching it."""
    parts = {name: suite(tmp_path, name, PASSES) for name in RUNS}
    runner = drive(tmp_path, parts)
    output, _ = runner.communicate(timeout=120)
    assert runner.returncode == 0, output
    niceness = {name: int((tmp_path / name / "niceness").read_text()) for name in RUNS}
    assert dev.LONG_POLE == "e2e" and dev.BESIDE_NICENESS > 0
    assert niceness["rest"] == niceness["beside"] == niceness["e2e"] + dev.BESIDE_NICENESS, niceness


@pytest.mark.parametrize("empty", RUNS)
def test_a_run_that_collects_no_tests_fails_the_command(tmp_path, empty):
    parts = {name: suite(tmp_path, name, "" if name == empty else PASSES) for name in RUNS}
    runner = drive(tmp_path, parts)
    output, _ = runner.communicate(timeout=120)
    assert runner.returncode == 1, output
    assert "collected no tests: that is a failure" in output
    assert f"{empty} exited 5" in output, output


@pytest.mark.parametrize("sigint", ["sigint-default", "sigint-ignored"])
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGHUP", "lint-fails"])
def test_ctrl_c_sigterm_sighup_or_a_lint_failure_stops_every_run_with_nothing_left_running(tmp_path, how, sigint):
    """Also when ``dev.py`` was started with SIGINT ignored (by a shell's ``cmd &``), which its pytest runs
    would inherit."""
    parts = {name: suite(tmp_path, name, WAITS) for name in RUNS}
    runner = drive(tmp_path, parts, "lint-fails" if how == "lint-fails" else "lint-passes", sigint)
    # a lint failure comes before the terminal's run starts: only the runs beside it were started
    ran = RUNS[1:] if how == "lint-fails" else RUNS
    started: list[int] = []
    try:
        if how != "lint-fails":
            deadline = time.monotonic() + 60
            while not all((tmp_path / name / "pids").exists() for name in ran):
                assert time.monotonic() < deadline and runner.poll() is None, "the runs did not start"
                time.sleep(0.1)
            time.sleep(0.5)  # into the test
            runner.send_signal(getattr(signal, how))  # Ctrl-C, CI cancelling the job, the terminal closed
        output = ""
        with contextlib.suppress(subprocess.TimeoutExpired):  # it hangs when a run it started holds its stdout
            output, _ = runner.communicate(timeout=60)
        started = [pid for name in ran for pid in pids(tmp_path / name)]
        assert runner.returncode == (1 if how == "lint-fails" else 130), output
        for name in ran:  # stopped cleanly: each fixture's teardown ran
            assert (tmp_path / name / "torn-down").exists(), f"{name}: {output}"
        if how == "lint-fails":
            assert not (tmp_path / RUNS[0] / "pids").exists(), output
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


@pytest.mark.parametrize(
    ("args", "code", "shown"),
    [([], 0, True), ([], 1, True), (["simulate", "--faults", "absent.json"], 2, False), (["serve"], 0, False)],
)
def test_demo_points_at_the_console_only_after_a_simulation_that_ran(dev, monkeypatch, capsys, args, code, shown):
    """After a demo that ran (its verdict 0 or 1) it shows how to watch one live; not after one that could not start
    (exit 2: a profile missing), nor after ``demo serve``, which is that already."""
    monkeypatch.setattr(dev, "setup", lambda for_tests=True: None)
    monkeypatch.setattr(dev, "run", lambda *cmd, check=True: code)
    assert dev.demo(args) == code
    assert ("Watch it live" in capsys.readouterr().out) is shown
