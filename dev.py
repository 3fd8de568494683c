#!/usr/bin/env python3
"""The project's two commands, on a fresh machine with Python 3.13 and Node 20+:

    python3 dev.py demo    # the whole app locally: 200 orders through chaos, summary, report, chart
    python3 dev.py test    # ruff check, ruff format --check, mypy and every test (starting the servers they use)

Each creates ``.venv`` with Python 3.13 (the version the app runs on in Azure, with the pinned
``azure-functions-runtime``) and installs the pip and npm packages it needs first (skipped when up to
date). ``dev.py`` itself runs on any Python 3.9+; it finds a Python 3.13 to build ``.venv`` with.
``test`` runs the suite as three pytest processes at once (``tests/e2e``, a few folders, the rest: ``run_whole_suite``);
``python3 dev.py test ARGS`` runs the linters and mypy, then pytest with exactly ARGS, in one process;
``python3 dev.py demo ARGS`` runs ``python -m localrun ARGS`` instead of the demo's own arguments
(``demo serve --orders 200 --seed 7 --faults examples/profiles/demo.json``: the live console, README
"Operate it"; docs/local-runner.md); options alone are added to the demo's own (``demo --log-level INFO``).
``python3 dev.py setup`` only sets up ``.venv``, ``node_modules`` and ``.venv-checkov`` (and Chromium when it can):
what ``test`` does first; ``demo`` and ``bench`` set up only the first two.
``python3 dev.py bench [ORDERS] [--sdk-speed-ups] [--all-cores] [--compare REF] [--repeat N]`` times the 1,000-order
all-faults simulation, and with ``--compare`` the same for git ref REF and the ratio (docs/benchmark.md).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import venv
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if sys.version_info < (3, 9):
    sys.exit(
        f"dev.py needs Python 3.9 or newer to start (this is {sys.version.split()[0]}); it builds .venv with "
        "Python 3.13, so run it with that one if you have it: python3.13 dev.py ..."
    )

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
# checkov (tests/infra) pins packages the app also uses, so it gets a venv of its own.
CHECKOV_VENV = ROOT / ".venv-checkov"
CHECKOV_PYTHON = CHECKOV_VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


APP_PYTHON = (3, 13)  # the Functions runtime version the app is built for (Flex Consumption, infra/)
INSTALL_HINT = """Python 3.13 is required to build the app's .venv (the app runs on Python 3.13 in Azure Functions).
Install it, then run this command again, e.g.:
  Any system:    uv python install 3.13   (uv: https://docs.astral.sh/uv/; or: pyenv install 3.13)
  Debian 13:     sudo apt-get install python3.13 python3.13-venv
  Ubuntu:        sudo add-apt-repository ppa:deadsnakes/ppa, then sudo apt-get install python3.13 python3.13-venv
  macOS:         brew install python@3.13
  Windows:       winget install Python.Python.3.13
Or point SAS_PYTHON at a Python 3.13 executable."""


def _version_of(executable: str, *modules: str) -> tuple[int, int] | None:
    """``executable``'s Python version, or None when it does not run or lacks ``venv`` (or one of ``modules``)."""
    try:
        out = subprocess.run(
            [executable, "-c", f"import {', '.join(('sys', 'venv', *modules))}; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return (int(out[0]), int(out[1])) if len(out) == 2 else None


def find_app_python() -> str:
    """A Python 3.13 with ``venv``: ``SAS_PYTHON``, this interpreter, ``python3.13`` on PATH, the
    Windows launcher, or a pyenv/uv-installed 3.13 (pyenv's shim fails unless a version is selected,
    so its versions folder is searched directly)."""
    candidates: list[str] = []
    if os.environ.get("SAS_PYTHON"):
        candidates.append(os.environ["SAS_PYTHON"])
    candidates.append(sys.executable)
    for name in ("python3.13", "python3"):
        found = shutil.which(name)
        if found:
            candidates.append(found)
    home = Path.home()
    pyenv_root = Path(os.environ.get("PYENV_ROOT", home / ".pyenv"))
    candidates += sorted(glob.glob(str(pyenv_root / "versions" / "3.13.*" / "bin" / "python3.13")), reverse=True)
    candidates += sorted(glob.glob(str(home / ".local/share/uv/python/cpython-3.13*/bin/python3.13")), reverse=True)
    candidates += ["/usr/local/bin/python3.13", "/usr/bin/python3.13", "/opt/homebrew/bin/python3.13"]
    for candidate in candidates:
        if _version_of(candidate) == APP_PYTHON:
            return candidate
    if os.name == "nt" and shutil.which("py") and _version_of("py") is not None:
        launcher = subprocess.run(
            ["py", "-3.13", "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, check=False
        )
        if launcher.returncode == 0:
            return launcher.stdout.strip()
    sys.exit(INSTALL_HINT)


# package.json's "engines": the Cosmos DB protocol server the demo and the tests run on, Azurite and the
# Bicep type data are npm packages; node runs the first two, npm installs them.
NODE_HINT = """{problem}: Node.js {major} or newer, with npm, is required (package.json "engines": the Cosmos DB
protocol server the demo and the tests run on, Azurite, the Bicep type data).
Install it, then run this command again, e.g.:
  Linux:   your distribution's nodejs and npm if they are {major} or newer, else https://nodejs.org/en/download
  macOS:   brew install node
  Windows: winget install OpenJS.NodeJS.LTS"""


def node_major_required() -> int:
    """The major version package.json's ``engines.node`` (``>=N``) asks for."""
    engines = json.loads((ROOT / "package.json").read_text())["engines"]["node"]
    return int(engines.strip().removeprefix(">=").split(".")[0])


def node_problem() -> str | None:
    """Why Node.js cannot serve the project (node or npm not on PATH, node older than package.json's
    ``engines``), or None."""
    node = shutil.which("node")
    if node is None:
        return "node was not found on PATH"
    if shutil.which("npm") is None:
        return "npm was not found on PATH (it comes with Node.js)"
    try:
        text = subprocess.run(
            [node, "--version"], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()
        major = int(text.lstrip("v").split(".")[0])
    except (OSError, subprocess.SubprocessError, ValueError):
        return f"{node} --version did not say its version"
    if major < node_major_required():
        return f"{node} is Node.js {text}"
    return None


def check_node() -> None:
    problem = node_problem()
    if problem is not None:
        sys.exit(NODE_HINT.format(problem=problem, major=node_major_required()))


def _venv_version(python: Path) -> tuple[int, int] | None:
    """The version of the venv's Python, or None when there is none or it has no pip: ``python -m venv``
    installs pip last (ensurepip), so a venv whose creation was interrupted (Ctrl-C while dev.py said "creating
    .venv") has a Python 3.13 and no pip, and every install into it would fail; None has it made again."""
    return _version_of(str(python), "pip") if python.exists() else None


# The Functions host's protobuf messages (``FunctionRpc_pb2``: TypedData, InvocationRequest, ...) are not
# in azure-functions-runtime (the host's proxy worker injects them). The local runner needs them to talk
# to the runtime as the host does. A generated copy ships in this wheel under ``tests/protos/``; it is
# extracted into the venv as the package ``functions_host_protos``. The wheel itself is never
# installed: it would install a top-level ``tests`` package into the app's environment.
HOST_PROTOS_WHEEL = "azure-functions-runtime-v1==1.2.0"
HOST_PROTOS_PACKAGE = "functions_host_protos"


def install_host_protos() -> None:
    import zipfile

    site = subprocess.run(
        [str(PYTHON), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    target = Path(site) / HOST_PROTOS_PACKAGE
    with tempfile.TemporaryDirectory() as tmp:
        run(
            PYTHON,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "-d",
            tmp,
            HOST_PROTOS_WHEEL,
        )
        wheel = next(Path(tmp).glob("*.whl"))
        if target.exists():
            shutil.rmtree(target)
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if name.startswith("tests/protos/") and name.endswith(".py"):
                    destination = target / name.removeprefix("tests/protos/")
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    destination.write_bytes(archive.read(name))
    print(f"extracted the host's protobuf messages to {target}")


# What ``run`` is waiting for, on any thread (setup's installs run beside each other): an interruption ends them all.
_CHILDREN: list[subprocess.Popen[bytes]] = []
_CHILDREN_LOCK = threading.Lock()
CHILD_GRACE_S = 60.0  # after an interruption: how long a child of ``run`` has to stop before it is killed


class Interrupted(KeyboardInterrupt):
    """SIGTERM (a CI job cancelled, ``kill``), SIGHUP (the terminal closed) or SIGINT, raised where dev.py is as
    Ctrl-C's ``KeyboardInterrupt`` is, so that what it started is stopped (``end``) rather than left running."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def run(*cmd: str | Path, check: bool = True) -> int:
    """``cmd`` in this terminal's process group, waited for; interrupted, it is stopped first (``end``)."""
    print("+", " ".join(str(c) for c in cmd), flush=True)
    process = subprocess.Popen([str(c) for c in cmd], cwd=ROOT)
    with _CHILDREN_LOCK:
        _CHILDREN.append(process)
    try:
        code = process.wait()
    except KeyboardInterrupt as exc:
        end(process, exc)
        raise
    finally:
        with _CHILDREN_LOCK:
            _CHILDREN.remove(process)
    if check and code:
        raise subprocess.CalledProcessError(code, [str(c) for c in cmd])
    return code


def end(process: subprocess.Popen[bytes], why: KeyboardInterrupt) -> None:
    """Stops a child of ``run`` once dev.py was interrupted. Ctrl-C in a terminal reached the child too (the
    same process group): it is given ``CHILD_GRACE_S`` to stop the way it stops on Ctrl-C (pytest tears its
    fixtures down, the local runner stops its servers). SIGTERM or SIGHUP reached dev.py alone: the child is
    sent SIGINT, as Ctrl-C would. Killed if still running after that, or on a second interruption."""
    try:
        if getattr(why, "signum", signal.SIGINT) != signal.SIGINT and process.poll() is None:
            if os.name == "nt":
                process.terminate()
            else:
                process.send_signal(signal.SIGINT)
        process.wait(timeout=CHILD_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def end_children(why: KeyboardInterrupt) -> None:
    """``end`` for every child ``run`` is waiting for, on any thread."""
    with _CHILDREN_LOCK:
        children = list(_CHILDREN)
    for process in children:
        end(process, why)


def _stamp(name: str, *files: str) -> tuple[Path, str]:
    digest = hashlib.sha256(b"".join((ROOT / f).read_bytes() for f in files if (ROOT / f).exists())).hexdigest()
    return VENV / f".{name}-installed", digest


CHROMIUM_HINT = """Chromium was not found; the console's browser test (tests/operations) will fail until it is there.
Install it: Debian/Ubuntu `sudo apt-get install chromium`, Fedora `sudo dnf install chromium`,
macOS `brew install --cask chromium`; or point SAS_CHROMIUM at a Chromium or Chrome executable."""


def ensure_chromium() -> None:
    """Debian's ``chromium`` for the browser test, installed with apt-get when missing and possible
    (root, apt-get present); otherwise says what to install. No browser is ever downloaded."""
    if os.environ.get("SAS_CHROMIUM") or any(
        shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
    ):
        return
    if shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
            print("+", " ".join(command), flush=True)
            if subprocess.run(command, env=env, check=False).returncode != 0:
                break
        if shutil.which("chromium"):
            return
    print(CHROMIUM_HINT, file=sys.stderr)


def _setup_npm() -> None:
    stamp, digest = _stamp("npm", "package.json", "package-lock.json")
    if not (ROOT / "node_modules").exists() or not stamp.exists() or stamp.read_text() != digest:
        npm = "npm.cmd" if os.name == "nt" else "npm"
        run(npm, "ci" if (ROOT / "package-lock.json").exists() else "install", "--no-audit", "--no-fund", "--silent")
        stamp.write_text(digest)


def _setup_checkov() -> None:
    if _venv_version(CHECKOV_PYTHON) is None:  # none yet, or one whose creation was interrupted (no pip)
        venv.EnvBuilder(with_pip=True, clear=True).create(CHECKOV_VENV)
    _, digest = _stamp("checkov", "tests/infra/requirements-checkov.txt")
    stamp = CHECKOV_VENV / ".checkov-installed"
    if not stamp.exists() or stamp.read_text() != digest:
        requirements = "tests/infra/requirements-checkov.txt"
        run(CHECKOV_PYTHON, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", requirements)
        stamp.write_text(digest)


def _setup_app_packages() -> None:
    stamp, digest = _stamp("pip", "requirements.txt", "requirements-dev.txt")
    if not stamp.exists() or stamp.read_text() != digest:
        run(PYTHON, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", "requirements-dev.txt")
        stamp.write_text(digest)
    protos_stamp = VENV / ".host-protos-installed"
    if not protos_stamp.exists() or protos_stamp.read_text() != HOST_PROTOS_WHEEL:
        install_host_protos()
        protos_stamp.write_text(HOST_PROTOS_WHEEL)


class _Job(threading.Thread):
    """``work`` on a thread of its own; ``result`` re-raises here what it raised."""

    def __init__(self, work: Callable[[], None]) -> None:
        super().__init__(daemon=True)  # Ctrl-C here ends dev.py; the installs it ran were interrupted too
        self.work = work
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:  # handed to the main thread by result()
            self.error = exc

    def result(self) -> None:
        self.join()
        if self.error is not None:
            raise self.error


SETUP_LOCK = ROOT / ".dev-setup.lock"  # held by the dev.py setting up this checkout (.gitignore)


class Busy(Exception):
    """The lock is another dev.py's; the message says whose."""


@contextlib.contextmanager
def _exclusive(path: Path, waiting: str | None) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` while in the block, released by the system however its holder ends;
    held by another dev.py: ``waiting`` printed after its name and the lock waited for, or with ``waiting`` None,
    ``Busy``. None on Windows (no ``fcntl``), nor where ``path`` cannot be written (nothing can be installed or
    logged there either)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    try:
        lock = open(path, "a+")  # noqa: SIM115 (closed below, after the block)
    except OSError:
        yield
        return
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another dev.py"
            if waiting is None:
                raise Busy(holder) from None
            print(f"waiting for {holder} {waiting}", file=sys.stderr, flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        lock.seek(0)
        lock.truncate()
        lock.write(f"dev.py (pid {os.getpid()})")
        lock.flush()
        try:
            yield
        finally:
            lock.seek(0)
            lock.truncate()
            fcntl.flock(lock, fcntl.LOCK_UN)


def setup(*, for_tests: bool = True) -> None:
    """``.venv`` (Python 3.13), then its pip packages here while npm's packages and ``.venv-checkov``
    install beside them (the three are independent; on a fresh clone they are most of this time). Node.js
    is checked first: without it the npm install would fail only after the pip one. ``for_tests=False``
    (``demo``, ``bench``): not what only the tests use, ``.venv-checkov`` (the Bicep scan) and Chromium (the console's
    browser test). One dev.py at a time sets up a checkout: a second (``demo`` started while ``test`` installs)
    waits for the first, then finds the stamps up to date, instead of a second ``pip install`` into the same
    ``.venv`` and a second ``npm ci`` emptying ``node_modules`` under the first."""
    check_node()
    with _exclusive(SETUP_LOCK, "to finish setting up this checkout"):
        _setup(for_tests)


def _setup(for_tests: bool) -> None:
    if _venv_version(PYTHON) != APP_PYTHON:
        interpreter = find_app_python()
        if VENV.exists():
            print(f"{VENV} is not a whole Python 3.13 venv (another version, or no pip): recreating it")
            shutil.rmtree(VENV)
        print(f"creating {VENV} with {interpreter}")
        subprocess.run([interpreter, "-m", "venv", str(VENV)], check=True)
    # npm's stamp is in .venv: started once it exists
    jobs = [_Job(_setup_npm), _Job(_setup_checkov)] if for_tests else [_Job(_setup_npm)]
    for job in jobs:
        job.start()
    try:
        _setup_app_packages()
    except KeyboardInterrupt as exc:  # the installs beside this one stop too, not only this one
        end_children(exc)
        raise
    finally:
        for job in jobs:
            job.join()
    for job in jobs:
        job.result()
    if for_tests:
        ensure_chromium()


# ``dev.py test`` with no arguments runs the suite as three pytest processes at once, on two cores: the
# end-to-end simulations (``tests/e2e``, the slowest folder, but for one file), the paths of ``BESIDE`` and
# everything else. The rest of the suite waits on servers, subprocesses and sleeps part of the time; three runs keep
# both cores busy through those waits (docs/testing.md, where the figures are). ``tests/e2e`` is the long
# pole (about as much CPU as the other two together, nearly all of it computing): the other two run at a
# lower priority (``BESIDE_NICENESS``), so that it keeps a core of its own while they share the other
# and the gaps it leaves, instead of three equal shares of two cores stretching it. The runs share nothing:
# each starts its own servers on ports the system picks, in its own temporary folders; only the run in
# the terminal writes pytest's cache (``.pytest_cache``), and the screenshots under ``out/`` come from
# one folder (``tests/operations``), in one run.
E2E = "tests/e2e"
# The second run beside the terminal's, chosen by measured time so that the three runs end about together
# (docs/testing.md): whole folders, so a new test file lands in the run of its folder, and one file of
# ``tests/e2e`` (seven simulations of a broken app, about a sixth of that folder's time) that made it the
# long pole by minutes while this run ended first.
BESIDE = ("tests/localrun", "tests/operations", "tests/runtime", "tests/e2e/test_invariants_catch_bugs.py")
# Files of other folders run with ``tests/e2e``: they read its simulations (tests/kept_runs.py: one run of a profile
# serves its e2e test and the checks of what the app logged in it), which another pytest process would make again.
WITH_E2E = ("tests/observability/test_events_match_the_record.py",)
LOG_DIR = ROOT / "out"  # each run beside the terminal's writes out/pytest-NAME.log, printed at the end
LONG_POLE = "e2e"  # the run that keeps its priority; the others are started ``BESIDE_NICENESS`` lower (Unix)
BESIDE_NICENESS = 5  # weight 335 against 1024: the long pole's share of two cores is a whole one
STOP_GRACE_S = 60.0  # after Ctrl-C: how long a pytest has to stop its servers before it is killed


def suite_parts() -> list[tuple[str, list[str]]]:
    """The runs that together are the whole suite, each a name and its pytest arguments: the first runs
    in the terminal, the others beside it (the test of ``dev.py`` checks they collect every test once)."""
    beside = [f"--ignore={path}" for path in BESIDE if not path.startswith(f"{E2E}/")]
    e2e_beside = [f"--ignore={path}" for path in BESIDE if path.startswith(f"{E2E}/")]
    with_e2e = [f"--ignore={path}" for path in WITH_E2E]
    return [
        ("rest", [f"--ignore={E2E}", *beside, *with_e2e]),
        ("beside", [*BESIDE, "-p", "no:cacheprovider"]),
        ("e2e", [E2E, *WITH_E2E, *e2e_beside, "-p", "no:cacheprovider"]),
    ]


def log_of(name: str) -> Path:
    """Where the run ``name`` beside the terminal's writes its output."""
    return LOG_DIR / f"pytest-{name}.log"


def lint() -> None:
    run(PYTHON, "-m", "ruff", "check", ".")
    run(PYTHON, "-m", "ruff", "format", "--check", ".")
    run(PYTHON, "-m", "mypy", ".")


def pytest_verdict(code: int, what: str) -> int:
    if code == 5:
        print(f"{what} collected no tests: that is a failure", file=sys.stderr)
        return 1
    return code


def start(*cmd: str | Path, note: str = "", niceness: int = 0, **options: Any) -> subprocess.Popen[bytes]:
    """``cmd`` started in a process group of its own: Ctrl-C reaches this process only, which then
    stops each run once, the way pytest stops cleanly (``stop``). ``niceness``: that much lower a
    priority (``os.nice``; where there is none, Windows, the same one)."""
    lower = niceness if hasattr(os, "nice") else 0
    print("+", *(("nice", f"-n{lower}") if lower else ()), " ".join(str(c) for c in cmd) + note, flush=True)
    if lower:
        options["preexec_fn"] = lambda: os.nice(lower)  # in the child, before it runs pytest
    return subprocess.Popen([str(c) for c in cmd], cwd=ROOT, start_new_session=os.name != "nt", **options)


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    """Interrupts every process still running as Ctrl-C would (pytest then tears its fixtures down:
    its servers stop), waits ``STOP_GRACE_S`` for them, then kills each one's process group."""
    running = [p for p in processes if p.poll() is None]
    for process in running:
        command = " ".join(cast("list[str]", process.args))  # start() passes a list of str
        print(f"stopping: {command}", file=sys.stderr, flush=True)
        if os.name == "nt":
            process.terminate()
        else:
            process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + STOP_GRACE_S
    for process in running:
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            if os.name == "nt":
                process.kill()
            else:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _interrupted(signum: int, frame: object) -> None:
    raise Interrupted(signum)


def run_whole_suite() -> int:
    """ruff, mypy and the first of ``suite_parts`` in this terminal while the others run beside them,
    each into its ``out/pytest-NAME.log`` (printed when all are done). A lint failure stops the runs
    beside; a failing pytest lets the others finish. Any failing, or collecting nothing, fails. One at a
    time in a checkout: a second would write the same logs, and each would print the other's as its own."""
    LOG_DIR.mkdir(exist_ok=True)
    try:
        with _exclusive(LOG_DIR / ".dev-test.lock", None):
            return _run_whole_suite()
    except Busy as exc:
        logs = os.path.relpath(log_of("*"), ROOT)
        note = f"{exc} is running the whole suite in this checkout (its logs: {logs}); run it again once it is done"
        print(note, file=sys.stderr)
        return 2


def _run_whole_suite() -> int:
    (first, first_args), *beside = suite_parts()
    logs = {name: os.path.relpath(log_of(name), ROOT) for name, _ in beside}
    # Ctrl-C, SIGTERM (a CI job cancelled, ``timeout``) and SIGHUP (the terminal closed) stop the runs.
    # SIGINT too when this process inherited it ignored (a shell's ``cmd &``): the pytest runs inherit an
    # ignored SIGINT, not a handler, and would not stop on the one ``stop`` sends them.
    stops = [signal.SIGINT, signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])]
    previous = {number: signal.signal(number, _interrupted) for number in stops}
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for name, args in beside:
            with open(log_of(name), "wb") as log:
                note = f" > {logs[name]} 2>&1 &   (beside the terminal's run; printed when all are done)"
                niceness = 0 if name == LONG_POLE else BESIDE_NICENESS
                pytest: list[str | Path] = [PYTHON, "-m", "pytest", *args]
                processes.append(
                    start(*pytest, note=note, niceness=niceness, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
                )
        lint()
        niceness = 0 if first == LONG_POLE else BESIDE_NICENESS
        processes.append(start(PYTHON, "-m", "pytest", *first_args, niceness=niceness))
        codes = [process.wait() for process in processes]
    except KeyboardInterrupt:
        output = ", ".join(logs.values())
        print(f"\ninterrupted: stopping the test runs (the others' output: {output})", file=sys.stderr, flush=True)
        stop(processes)
        return 130
    finally:
        stop(processes)  # a lint failure: the runs beside are stopped (nothing to do when all are done)
        for number, handler in previous.items():
            signal.signal(number, handler)
    for name, args in beside:
        print(f"\n==== pytest {' '.join(args)} (ran beside the terminal's run; {logs[name]}) ====", flush=True)
        sys.stdout.buffer.write(log_of(name).read_bytes())
        sys.stdout.flush()
    # ``codes`` is in the order of ``processes``: the runs beside, then the terminal's
    ended = [(name, args, codes[at]) for at, (name, args) in enumerate([*beside, (first, first_args)])]
    verdicts = [pytest_verdict(code, f"pytest {' '.join(args)}") for _, args, code in ended]
    print("\npytest: " + ", ".join(f"{name} exited {code}" for name, _, code in ended), flush=True)
    return next((code for code in verdicts if code), 0)


def test(args: list[str]) -> int:
    """``test``: lint and the whole suite (``run_whole_suite``); ``test ARGS``: lint, then pytest with
    exactly those arguments in one process."""
    setup()
    if not args:
        return run_whole_suite()
    lint()
    return pytest_verdict(run(PYTHON, "-m", "pytest", *args, check=False), "pytest")


def demo(args: list[str]) -> int:
    setup(for_tests=False)
    default = [
        "simulate",
        "--orders",
        "200",
        "--seed",
        "7",
        "--faults",
        "examples/profiles/demo.json",
        "--report",
        "out/demo-report.json",
        "--chart",
        "out/demo-chart.png",
    ]
    # Options alone (``demo --log-level INFO``, ``demo --orders 20``) are added to the demo's own, the last of an
    # option given twice winning; a command (``demo serve ...``, ``demo simulate ...``) replaces them.
    command = [*default, *args] if args and args[0].startswith("-") else (args or default)
    code = run(PYTHON, "-m", "localrun", *command, check=False)
    if code not in (0, 1) or command[0] != "simulate":  # it failed (exit 2: bad input), or it was serve
        return code
    here = "" if Path.cwd().resolve() == ROOT else f"cd {shlex.quote(str(ROOT))} && "  # the command is the checkout's
    serve = f"{PYTHON.relative_to(ROOT)} -m localrun serve --orders 200 --seed 7 --faults examples/profiles/demo.json"
    print(
        "\nWatch it live and act as the operator (answer reviews, resubmit, cancel) in the console:\n"
        f"  {here}{serve}\n"
        "  then open http://127.0.0.1:7071/api/ops/console (README: Operate it)"
    )
    return code


def _children_cpu() -> float:
    import resource  # Unix only (Windows has none): imported by the one command that measures CPU

    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


# The ``simulate`` flags ``bench`` passes on when given: the Durable SDK's speed-ups; every core for the run's threads.
BENCH_FLAGS = ("--sdk-speed-ups", "--all-cores")
BENCH_VALUE_OPTIONS = ("--compare", "--repeat")  # bench's own options, each with a value


def _bench_run(root: Path, orders: int, flags: tuple[str, ...]) -> Run:
    """One benchmark run of the tree at ``root`` with this ``.venv``: (process wall s, CPU s, report,
    exit code). CPU is user + system time of the run and what it waited for (its Cosmos DB server):
    on a shared machine it moves less than the wall time. ``flags``: ``simulate`` flags to pass
    (``BENCH_FLAGS``); those the tree's CLI does not know (an older ref) are left out."""
    cli = (root / "localrun" / "__main__.py").read_text()
    with tempfile.TemporaryDirectory() as tmp:
        report_path = Path(tmp) / "bench.json"
        command = [
            str(PYTHON),
            *("-m", "localrun", "simulate", "--orders", str(orders), "--seed", "1"),
            *("--faults", "examples/profiles/all-faults.json", "--report", str(report_path)),
            "--no-progress",
            *(("--log-level", "CRITICAL") if "--log-level" in cli else ()),
            *(flag for flag in flags if flag in cli),
        ]
        print(f"+ (in {root}) {' '.join(command)}", flush=True)
        started, cpu_before = time.monotonic(), _children_cpu()
        done = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
        wall, cpu = time.monotonic() - started, _children_cpu() - cpu_before
        if not report_path.exists():
            print(done.stdout, done.stderr, sep="\n", file=sys.stderr)
            return wall, cpu, None, done.returncode or 1
        return wall, cpu, json.loads(report_path.read_text()), done.returncode


def _bench_print(report: dict[str, Any], wall: float, cpu: float) -> None:
    runtime = report.get("runtime")
    print(f"orders              {report['orders']} (all-faults, seed 1)")
    if runtime is None:
        print("path                functions called directly (before the real-runtime runner)")
    else:
        print(
            f"path                every invocation through azure-functions-runtime "
            f"({runtime['invocation_requests']} InvocationRequests); Durable SDK "
            + ("with the runner's speed-ups" if runtime["sdk_speed_ups"] else "as shipped")
            + _cores(runtime)
        )
    print(f"wall                {wall:.1f} s (process), {report['wall_s']} s (simulation only)")
    print(f"cpu                 {cpu:.1f} s (user + system, the run and its Cosmos DB server)")
    print(f"orders/s            {report['orders'] / wall:.1f}")
    print(f"simulated           {report['simulated_s']} s")
    print("ops_per_order       " + json.dumps(report["ops_per_order"]))
    print("latency_s           " + json.dumps(report["latency_s"]))
    violated = {k: v for k, v in report["invariants"].items() if v}
    print(f"invariants          {'all 0' if not violated else f'VIOLATED {violated}'}")


def _cores(runtime: dict[str, Any]) -> str:
    """How the run used the cores (``localrun/affinity.py``), as the report says: nothing before it did."""
    if "one_core" not in runtime:
        return ""
    placed = runtime["one_core"]
    if placed is None:
        return "; threads on every core"
    return f"; threads on core {placed['core']}" + (" until the machine got busy" if placed["given_up"] else "")


if TYPE_CHECKING:  # dev.py runs on Python 3.9: annotations only
    Run = tuple[float, float, dict[str, Any] | None, int]  # process wall s, CPU s, report (None: failed), exit code


def _bench_tree(ref: str) -> Path:
    """Git ref ``ref`` checked out into a temporary ``git worktree``, with this tree's ``node_modules``
    symlinked; ``_drop_tree`` removes it."""
    tree = Path(tempfile.mkdtemp(prefix="bench-ref-")) / "tree"
    run("git", "-C", ROOT, "worktree", "add", "--detach", "--quiet", tree, ref)
    try:
        (tree / "node_modules").symlink_to(ROOT / "node_modules", target_is_directory=True)
    except BaseException:
        _drop_tree(tree)
        raise
    return tree


def _drop_tree(tree: Path) -> None:
    run("git", "-C", ROOT, "worktree", "remove", "--force", tree, check=False)
    shutil.rmtree(tree.parent, ignore_errors=True)


def fastest(runs: list[Run]) -> Run:
    """The run with a report that used the least CPU: the one least disturbed by whatever else the
    machine was doing (the same seed does the same work every time; the rest is noise). A failed run
    is picked only when every run failed."""
    return min(runs, key=lambda r: (r[2] is None, r[1]))


def bench_ratio(ref: str, before: list[Run], after: list[Run]) -> list[str]:
    """The lines comparing git ref ``ref``'s runs with the work tree's: the ratios of the fastest run
    of each side and, with more than one round, each round's CPU ratio. Above 1: the work tree is
    faster."""
    ref_wall, ref_cpu, ref_report, _ = fastest(before)
    wall, cpu, report, _ = fastest(after)
    if ref_report is None or report is None:
        raise ValueError("no ratio without a report on each side")
    of = "" if len(after) == 1 else f"; the fastest of {len(after)} runs each"
    lines = [
        f"ratio               {ref_wall / wall:.2f}x process wall "
        f"({ref} {ref_wall:.1f} s / this tree {wall:.1f} s), "
        f"{ref_report['wall_s'] / max(report['wall_s'], 1e-9):.2f}x simulation wall_s, "
        f"{ref_cpu / max(cpu, 1e-9):.2f}x CPU ({ref_cpu:.1f} s / {cpu:.1f} s{of})"
    ]
    if len(after) > 1:
        cpus = [(before[i][1], after[i][1]) for i in range(min(len(before), len(after)))]  # zip(strict=) is 3.10+
        rounds = ", ".join(f"{b / max(a, 1e-9):.2f}x ({b:.1f} s / {a:.1f} s)" for b, a in cpus)
        lines.append(f"each round's CPU    {rounds}")
    return lines


def _bench_options(args: list[str]) -> tuple[int, str | None, int, tuple[str, ...]]:
    """``[ORDERS] [--sdk-speed-ups] [--all-cores] [--compare REF] [--repeat N]`` -> (orders, ref, rounds,
    the ``simulate`` flags given). ``ValueError`` with the message to show."""
    flags = tuple(flag for flag in BENCH_FLAGS if flag in args)
    rest = [a for a in args if a not in BENCH_FLAGS]
    values: dict[str, str] = {}
    for name in BENCH_VALUE_OPTIONS:
        if name in rest:
            at = rest.index(name)
            if at + 1 >= len(rest):
                raise ValueError(f"bench {name} needs a value, e.g. bench 200 --compare HEAD~3 --repeat 3")
            values[name] = rest[at + 1]
            rest = rest[:at] + rest[at + 2 :]
    try:
        orders = int(rest[0]) if rest else 1000
        rounds = int(values.get("--repeat", "1"))
    except ValueError:
        raise ValueError("bench takes a number of orders and --repeat a number of rounds") from None
    if len(rest) > 1 or orders < 1 or rounds < 1:
        raise ValueError("usage: bench [ORDERS] [--sdk-speed-ups] [--all-cores] [--compare REF] [--repeat N]")
    return orders, values.get("--compare"), rounds, flags


def bench(args: list[str]) -> int:
    """The benchmark: a 1,000-order all-faults run (seed 1) through the real Functions runtime. Prints
    wall time, orders/s and the report's operations-per-order and latency lines; the report goes to a
    temporary folder. ``bench [ORDERS] [--sdk-speed-ups] [--all-cores] [--compare REF] [--repeat N]``:
    ``--sdk-speed-ups`` patches two hot spots of the Durable SDK's replay (off by default: what is measured is
    the SDK as shipped), ``--all-cores`` leaves the runs' threads on every core (``localrun/affinity.py``);
    ``--compare REF`` also runs git ref REF (in a temporary worktree, same ``.venv``, before
    the work tree) and prints both figures and the ratio; ``--repeat N`` runs N rounds (REF, then the
    work tree; the other way round in every second round) and compares the fastest run of each side, and prints
    each round's ratio."""
    try:
        orders, ref, rounds, flags = _bench_options(args)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    setup(for_tests=False)
    before: list[Run] = []
    after: list[Run] = []
    tree = _bench_tree(ref) if ref is not None else None
    try:
        for round_number in range(rounds):
            # REF first in odd rounds, the work tree first in even ones: on a machine that slows the second of two
            # runs in a row (a VM's CPU quota after a burst), a fixed order would put every round's penalty on one side
            if tree is not None and round_number % 2 == 0:
                before.append(_bench_run(tree, orders, flags))
            after.append(_bench_run(ROOT, orders, flags))
            if tree is not None and round_number % 2 == 1:
                before.append(_bench_run(tree, orders, flags))
    finally:
        if tree is not None:
            _drop_tree(tree)
    of = "" if rounds == 1 else f" (the fastest of {rounds} runs)"
    ref_best, best = (fastest(before) if before else None), fastest(after)
    if ref_best is not None and ref_best[2] is not None:
        print(f"\n== {ref}{of}")
        _bench_print(ref_best[2], ref_best[0], ref_best[1])
    if best[2] is None:
        return best[3]
    if ref is not None or rounds > 1:
        print(f"\n== this tree{of}")
    _bench_print(best[2], best[0], best[1])
    if ref_best is None:
        if rounds > 1:
            print("each run's CPU      " + ", ".join(f"{r[1]:.1f} s" for r in after))
        return best[3]
    if ref_best[2] is None:
        print(f"\n{ref}: no report (exit code {ref_best[3]}); no ratio", file=sys.stderr)
        return ref_best[3] or 1
    print()
    print("\n".join(bench_ratio(str(ref), before, after)))
    return best[3] or ref_best[3]


def setup_command(args: list[str]) -> int:
    setup()
    return 0


# dev.py's commands (tests/test_docs.py checks each is documented, and that each the docs show is one of them)
COMMANDS: dict[str, Callable[[list[str]], int]] = {"demo": demo, "test": test, "bench": bench, "setup": setup_command}


def main() -> int:
    if len(sys.argv) >= 2 and sys.argv[1] in ("-h", "--help", "help"):
        print(__doc__)
        return 0
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        if len(sys.argv) >= 2:
            print(f"unknown command {sys.argv[1]!r}", file=sys.stderr)
        print(__doc__)
        return 2
    return COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    # SIGTERM and SIGHUP interrupt as Ctrl-C does: what dev.py started is stopped with it, not left running
    for number in (signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])):
        signal.signal(number, _interrupted)
    try:
        sys.exit(main())
    except subprocess.CalledProcessError as exc:
        sys.exit(exc.returncode or 1)
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):  # stderr gone with the terminal (SIGHUP)
            print("\ninterrupted: stopped", file=sys.stderr, flush=True)
        sys.exit(130)
    except BrokenPipeError:  # stdout's reader is gone (``| head``): stop as a command killed by SIGPIPE, quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit then raises nothing either
        sys.exit(128 + 13)
