"""``python -m localrun`` in a user's environment: variables set for other things (another project's
``NODE_OPTIONS``, a proxy that does not answer) and an output that takes ASCII only. The Cosmos DB server
failing to start is one line saying why (node's own error, and ``NODE_OPTIONS`` when it is set), exit code
2, not a traceback; the help prints whatever the output's encoding; loopback calls never go to a proxy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def simulate(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "localrun", "simulate", "--orders", "3", "--seed", "1", "--no-progress",
         "--report", str(tmp_path / "report.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False, env={**os.environ, **env},
    )  # fmt: skip


def test_node_options_that_stop_node_are_named_in_one_error(tmp_path: Path) -> None:
    run = simulate(tmp_path, {"NODE_OPTIONS": f"--require {tmp_path / 'absent.js'}"})
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    assert run.stderr.startswith("cannot start the Cosmos DB protocol server: cosmosdb-server exited with 1")
    assert "NODE_OPTIONS is set" in run.stderr and "Cannot find module" in run.stderr  # node's own reason
    assert not (tmp_path / "report.json").exists()


def test_no_node_on_path_is_one_error(tmp_path: Path) -> None:
    run = simulate(tmp_path, {"PATH": str(tmp_path)})  # sys.executable is absolute: Python still starts
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "node is not on PATH" in run.stderr


def test_a_proxy_that_does_not_answer_is_not_used_for_loopback(tmp_path: Path) -> None:
    nowhere = "http://127.0.0.1:9"  # the discard port: nothing listens
    proxies = {name: nowhere for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY")}
    run = simulate(tmp_path, {**proxies, "NO_PROXY": "", "no_proxy": ""})
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads((tmp_path / "report.json").read_text())["orders"] == 3


def test_the_help_prints_on_an_ascii_only_output() -> None:
    for args in (["--help"], ["serve", "--help"], ["simulate", "--help"], ["fuzz", "--help"]):
        run = subprocess.run(
            [sys.executable, "-m", "localrun", *args], cwd=ROOT, capture_output=True, text=True, timeout=60,
            check=False, env={**os.environ, "PYTHONIOENCODING": "ascii"},
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-2000:]


@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal")
def test_the_progress_line_fits_a_narrow_terminal(tmp_path: Path) -> None:
    """On a terminal the bar is redrawn in place with ``\\r``, which goes back to the start of the last row only:
    a line wider than the terminal wraps, and every redraw leaves rows behind. 20 columns: each redraw fits."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    main, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 20, 0, 0))
    run = subprocess.Popen(
        [sys.executable, "-m", "localrun", "simulate", "--orders", "30", "--seed", "1",
         "--report", str(tmp_path / "report.json")],
        cwd=ROOT, stdin=terminal, stdout=terminal, stderr=terminal,
    )  # fmt: skip
    os.close(terminal)
    shown = b""
    while select.select([main], [], [], 120)[0]:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the run ended: the terminal's other end is closed
            break
        if not chunk:
            break
        shown += chunk
    os.close(main)
    assert run.wait(timeout=60) == 0
    progress = shown.decode().split("\n")[0]  # the redraws, up to the line the run ends it with
    redraws = [text.strip() for text in progress.split("\r") if text.strip()]
    assert len(redraws) > 2 and redraws[-1].startswith("30/30 orders")
    assert max(len(text) for text in redraws) < 20, redraws
