#!/usr/bin/env python3
"""The project's two commands, on a fresh machine with Python 3.11+ and Node 20+:

    python3 dev.py demo    # the whole app locally: ~200 orders through chaos, summary, report, chart
    python3 dev.py test    # ruff, mypy and every test (starts and stops the servers the tests use)

Each creates ``.venv`` and installs the pip and npm packages it needs first (skipped when up to date).
``python3 dev.py bench [ORDERS]`` times the 1,000-order all-faults simulation (docs/benchmark.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
# checkov (tests/infra) pins packages the app also uses, so it gets a venv of its own.
CHECKOV_VENV = ROOT / ".venv-checkov"
CHECKOV_PYTHON = CHECKOV_VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def run(*cmd: str | Path, check: bool = True) -> int:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], cwd=ROOT, check=check).returncode


def _stamp(name: str, *files: str) -> tuple[Path, str]:
    digest = hashlib.sha256(b"".join((ROOT / f).read_bytes() for f in files if (ROOT / f).exists())).hexdigest()
    return VENV / f".{name}-installed", digest


def setup() -> None:
    if sys.version_info < (3, 11):
        sys.exit("Python 3.11 or newer is required")
    if not PYTHON.exists():
        print(f"creating {VENV}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    stamp, digest = _stamp("pip", "requirements.txt", "requirements-dev.txt")
    if not stamp.exists() or stamp.read_text() != digest:
        run(PYTHON, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", "requirements-dev.txt")
        stamp.write_text(digest)
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
    return run(PYTHON, "-m", "localrun", *(args or default), check=False)


def bench(args: list[str]) -> int:
    """Issue 5's benchmark: a 1,000-order all-faults run (seed 1). Prints wall time, orders/s and the
    report's operations-per-order and latency lines; the report goes to a temporary folder."""
    setup()
    orders = int(args[0]) if args else 1000
    with tempfile.TemporaryDirectory() as tmp:
        report_path = Path(tmp) / "bench.json"
        command = [
            str(PYTHON),
            *("-m", "localrun", "simulate", "--orders", str(orders), "--seed", "1"),
            *("--faults", "examples/profiles/all-faults.json", "--report", str(report_path)),
            *("--no-progress", "--log-level", "CRITICAL"),
        ]
        print(f"+ {' '.join(command)}", flush=True)
        started = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        wall = time.monotonic() - started
        if not report_path.exists():
            print(done.stdout, done.stderr, sep="\n", file=sys.stderr)
            return done.returncode or 1
        report = json.loads(report_path.read_text())
    print(f"orders              {report['orders']} (all-faults, seed 1)")
    print(f"wall                {wall:.1f} s (process), {report['wall_s']} s (simulation only)")
    print(f"orders/s            {report['orders'] / wall:.1f}")
    print(f"simulated           {report['simulated_s']} s")
    print("ops_per_order       " + json.dumps(report["ops_per_order"]))
    print("latency_s           " + json.dumps(report["latency_s"]))
    violated = {k: v for k, v in report["invariants"].items() if v}
    print(f"invariants          {'all 0' if not violated else f'VIOLATED {violated}'}")
    return done.returncode


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
