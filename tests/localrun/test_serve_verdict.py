"""``serve`` stopped while orders are still in flight (Ctrl-C as the README says, before every order settled)
ends its summary with ``non_terminal`` violated. Its verdict sent the reader to "the report's
invariant_examples", but ``serve`` writes no report (docs/local-runner.md): found walking through the README as
a new user. The verdict names the orders itself, and says why an order left in flight counts."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM")


def test_serve_stopped_early_names_the_orders_in_its_verdict() -> None:
    run = subprocess.Popen(
        [sys.executable, "-m", "localrun", "serve", "--orders", "40", "--seed", "1", "--speed", "2", "--port", "0",
         "--no-progress"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert run.stdout is not None
        first = run.stdout.readline()  # printed once the console listens: the run is under way
        assert first.startswith("console: http://127.0.0.1:"), first + run.stderr.read() if run.stderr else first
        run.send_signal(signal.SIGTERM)  # 40 orders at 4 a second and speed 2: most not even sent yet
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, err[-2000:]  # serve's exit code is 0 whatever the invariants
    last = out.rstrip().splitlines()[-1]
    assert last.startswith("verdict: ") and "VIOLATED (non_terminal " in last, last
    assert "the report's" not in last, last  # serve writes no report
    assert "ord-" in last, last  # the orders, named here
    assert "in flight when serve stopped" in last, last
