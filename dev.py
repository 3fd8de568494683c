#!/usr/bin/env python3
"""The project's two commands, on a fresh machine with Python 3.13 and Node 20+:

    python3 dev.py demo    # the whole app locally: ~200 orders through chaos, summary, report, chart
    python3 dev.py test    # ruff, mypy and every test (starts and stops the servers the tests use)

Each creates ``.venv`` with Python 3.13 (the version the app runs on in Azure, with the pinned
``azure-functions-runtime``) and installs the pip and npm packages it needs first (skipped when up to
date). ``dev.py`` itself runs on any Python 3.9+; it finds a Python 3.13 to build ``.venv`` with.
``python3 dev.py bench [ORDERS] [--compare REF]`` times the 1,000-order all-faults simulation, and with
``--compare`` the same for git ref REF and the ratio (docs/benchmark.md).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path
from typing import Any

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
  Debian/Ubuntu: sudo apt-get install python3.13 python3.13-venv   (or: pyenv install 3.13)
  macOS:         brew install python@3.13
  Windows:       winget install Python.Python.3.13
Or point SAS_PYTHON at a Python 3.13 executable."""


def _version_of(executable: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [executable, "-c", "import sys, venv; print(*sys.version_info[:2])"],
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


def _venv_version(python: Path) -> tuple[int, int] | None:
    return _version_of(str(python)) if python.exists() else None


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


def run(*cmd: str | Path, check: bool = True) -> int:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], cwd=ROOT, check=check).returncode


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


def setup() -> None:
    if _venv_version(PYTHON) != APP_PYTHON:
        interpreter = find_app_python()
        if VENV.exists():
            print(f"{VENV} is not Python 3.13: recreating it")
            shutil.rmtree(VENV)
        print(f"creating {VENV} with {interpreter}")
        subprocess.run([interpreter, "-m", "venv", str(VENV)], check=True)
    stamp, digest = _stamp("pip", "requirements.txt", "requirements-dev.txt")
    if not stamp.exists() or stamp.read_text() != digest:
        run(PYTHON, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", "requirements-dev.txt")
        stamp.write_text(digest)
    protos_stamp = VENV / ".host-protos-installed"
    if not protos_stamp.exists() or protos_stamp.read_text() != HOST_PROTOS_WHEEL:
        install_host_protos()
        protos_stamp.write_text(HOST_PROTOS_WHEEL)
    stamp, digest = _stamp("npm", "package.json", "package-lock.json")
    if not (ROOT / "node_modules").exists() or not stamp.exists() or stamp.read_text() != digest:
        npm = "npm.cmd" if os.name == "nt" else "npm"
        run(npm, "ci" if (ROOT / "package-lock.json").exists() else "install", "--no-audit", "--no-fund", "--silent")
        stamp.write_text(digest)
    if not CHECKOV_PYTHON.exists():
        venv.EnvBuilder(with_pip=True).create(CHECKOV_VENV)
    _, digest = _stamp("checkov", "tests/infra/requirements-checkov.txt")
    stamp = CHECKOV_VENV / ".checkov-installed"
    if not stamp.exists() or stamp.read_text() != digest:
        requirements = "tests/infra/requirements-checkov.txt"
        run(CHECKOV_PYTHON, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", requirements)
        stamp.write_text(digest)
    ensure_chromium()


def test(args: list[str]) -> int:
    setup()
    run(PYTHON, "-m", "ruff", "check", ".")
    run(PYTHON, "-m", "ruff", "format", "--check", ".")
    run(PYTHON, "-m", "mypy", ".")
    code = run(PYTHON, "-m", "pytest", *args, check=False)
    if code == 5:
        print("pytest collected no tests: that is a failure", file=sys.stderr)
        return 1
    return code


def demo(args: list[str]) -> int:
    setup()
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
    code = run(PYTHON, "-m", "localrun", *(args or default), check=False)
    print(
        "\nWatch it live and act as the operator (answer reviews, resubmit, cancel) in the console:\n"
        f"  {PYTHON.relative_to(ROOT)} -m localrun serve --orders 200 --seed 7 --faults examples/profiles/demo.json\n"
        "  then open http://127.0.0.1:7071/api/ops/console (README: Operate it)"
    )
    return code


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _bench_run(root: Path, orders: int, speed_ups: bool) -> tuple[float, float, dict[str, Any] | None, int]:
    """One benchmark run of the tree at ``root`` with this ``.venv``: (process wall s, CPU s, report,
    exit code). CPU is user + system time of the run and what it waited for (its Cosmos DB server):
    on a shared machine it moves less than the wall time. Flags the tree's CLI does not know (an
    older ref) are left out."""
    cli = (root / "localrun" / "__main__.py").read_text()
    with tempfile.TemporaryDirectory() as tmp:
        report_path = Path(tmp) / "bench.json"
        command = [
            str(PYTHON),
            *("-m", "localrun", "simulate", "--orders", str(orders), "--seed", "1"),
            *("--faults", "examples/profiles/all-faults.json", "--report", str(report_path)),
            "--no-progress",
            *(("--log-level", "CRITICAL") if "--log-level" in cli else ()),
            *(("--sdk-speed-ups",) if speed_ups and "--sdk-speed-ups" in cli else ()),
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
        )
    print(f"wall                {wall:.1f} s (process), {report['wall_s']} s (simulation only)")
    print(f"cpu                 {cpu:.1f} s (user + system, the run and its Cosmos DB server)")
    print(f"orders/s            {report['orders'] / wall:.1f}")
    print(f"simulated           {report['simulated_s']} s")
    print("ops_per_order       " + json.dumps(report["ops_per_order"]))
    print("latency_s           " + json.dumps(report["latency_s"]))
    violated = {k: v for k, v in report["invariants"].items() if v}
    print(f"invariants          {'all 0' if not violated else f'VIOLATED {violated}'}")


def _bench_ref(ref: str, orders: int, speed_ups: bool) -> tuple[float, float, dict[str, Any] | None, int]:
    """The benchmark for git ref ``ref``: checked out into a temporary ``git worktree`` (removed
    afterwards) with this tree's ``node_modules`` symlinked, run with this ``.venv``."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-ref-"))
    tree = tmp / "tree"
    run("git", "-C", ROOT, "worktree", "add", "--detach", "--quiet", tree, ref)
    try:
        (tree / "node_modules").symlink_to(ROOT / "node_modules", target_is_directory=True)
        return _bench_run(tree, orders, speed_ups)
    finally:
        run("git", "-C", ROOT, "worktree", "remove", "--force", tree, check=False)
        shutil.rmtree(tmp, ignore_errors=True)


def bench(args: list[str]) -> int:
    """The benchmark: a 1,000-order all-faults run (seed 1) through the real Functions runtime. Prints
    wall time, orders/s and the report's operations-per-order and latency lines; the report goes to a
    temporary folder. ``bench [ORDERS] [--sdk-speed-ups] [--compare REF]``: the flag patches two hot
    spots of the Durable SDK's replay (off by default: what is measured is the SDK as shipped);
    ``--compare REF`` also runs git ref REF (in a temporary worktree, same ``.venv``, run first) and
    prints both figures and the ratio."""
    setup()
    speed_ups = "--sdk-speed-ups" in args
    args = [a for a in args if a != "--sdk-speed-ups"]
    ref = None
    if "--compare" in args:
        at = args.index("--compare")
        if at + 1 >= len(args):
            print("bench --compare needs a git ref, e.g. bench 200 --compare HEAD~3", file=sys.stderr)
            return 2
        ref = args[at + 1]
        args = args[:at] + args[at + 2 :]
    orders = int(args[0]) if args else 1000
    before = _bench_ref(ref, orders, speed_ups) if ref is not None else None
    wall, cpu, report, code = _bench_run(ROOT, orders, speed_ups)
    if before is not None and before[2] is not None:
        print(f"\n== {ref}")
        _bench_print(before[2], before[0], before[1])
    if report is None:
        return code
    if before is not None:
        print("\n== this tree")
    _bench_print(report, wall, cpu)
    if before is None:
        return code
    ref_wall, ref_cpu, ref_report, ref_code = before
    if ref_report is None:
        print(f"\n{ref}: no report (exit code {ref_code}); no ratio", file=sys.stderr)
        return ref_code or 1
    print(
        f"\nratio               {ref_wall / wall:.2f}x process wall "
        f"({ref} {ref_wall:.1f} s / this tree {wall:.1f} s), "
        f"{ref_report['wall_s'] / max(report['wall_s'], 1e-9):.2f}x simulation wall_s, "
        f"{ref_cpu / max(cpu, 1e-9):.2f}x CPU ({ref_cpu:.1f} s / {cpu:.1f} s)"
    )
    return code or ref_code


def main() -> int:
    commands = {"demo": demo, "test": test, "bench": bench}
    if len(sys.argv) < 2 or sys.argv[1] not in (*commands, "setup"):
        print(__doc__)
        return 2
    command, rest = sys.argv[1], sys.argv[2:]
    if command == "setup":
        setup()
        return 0
    return commands[command](rest)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except subprocess.CalledProcessError as exc:
        sys.exit(exc.returncode or 1)
