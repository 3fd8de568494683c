"""A run under host restarts ends without noise on stderr: a restart drops in-flight invocations
as a killed process would (their coroutines never resume), and asyncio used to report each one
"Task was destroyed but it is pending!" at exit; gRPC's core logged the settlement server's
shutdown at INFO ("Got goaway"). Neither is an error a user should have to read past."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.localrun.test_restart_jitter import FUZZED

ROOT = Path(__file__).resolve().parents[2]


def test_a_run_with_dropped_invocations_exits_quietly(tmp_path: Path) -> None:
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(FUZZED))
    report = tmp_path / "report.json"
    run = subprocess.run(
        [sys.executable, "-m", "localrun", "simulate", "--orders", "30", "--seed", "3824", "--faults", str(profile),
         "--report", str(report), "--no-progress", "--log-level", "CRITICAL"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(report.read_text())["runtime"]["invocation_requests"] > 0
    assert json.loads(report.read_text())["recoveries"]["host_restarts"] >= 8
    assert "Task was destroyed" not in run.stderr
    assert "goaway" not in run.stderr.lower()
