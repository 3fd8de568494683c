"""``python3 dev.py demo`` interrupted: Ctrl-C in the terminal (SIGINT to the whole process group), SIGTERM
(a CI job cancelled, ``kill PID``) or SIGHUP (the terminal closed) to dev.py alone. What it started, the local
runner and its Cosmos DB server, stops with it (before, SIGTERM or SIGHUP left the run going on for as long as
it takes, orphaned), and it says so in one line with exit code 130, where Ctrl-C printed a traceback of dev.py
under the runner's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.localrun.test_cli_interrupts import PROFILE, descendants, gone, wait_for_node

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")


@pytest.mark.parametrize("how", ["ctrl-c", "SIGTERM", "SIGHUP"])
def test_an_interrupted_demo_stops_the_run_it_started(tmp_path: Path, how: str) -> None:
    report = tmp_path / "report.json"
    # files, not pipes: a run left behind would hold a pipe open, and reading it to its end would wait for that run
    out_file, err_file = (tmp_path / "stdout.txt").open("w"), (tmp_path / "stderr.txt").open("w")
    demo = subprocess.Popen(
        [sys.executable, str(ROOT / "dev.py"), "demo", "simulate", "--orders", "400", "--seed", "1",
         "--faults", str(PROFILE), "--report", str(report), "--no-progress"],
        cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=out_file, stderr=err_file,
        start_new_session=True,  # its own process group: Ctrl-C's SIGINT goes to the group, as a terminal sends it
    )  # fmt: skip
    try:
        below = wait_for_node(demo)  # dev.py's setup is done and the simulation is under way
        time.sleep(1.0)
        if how == "ctrl-c":
            os.killpg(demo.pid, signal.SIGINT)
        else:
            demo.send_signal(getattr(signal, how))  # to dev.py alone
        demo.wait(timeout=120)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
        out_file.close()
        err_file.close()
    out, err = (tmp_path / "stdout.txt").read_text(), (tmp_path / "stderr.txt").read_text()
    alive = gone(below)
    for pid in alive:  # not left running on this machine when the test fails
        os.kill(pid, signal.SIGKILL)
    assert alive == [], f"{len(alive)} processes of the demo outlived dev.py"
    assert demo.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert err.rstrip().endswith("interrupted: stopped")
    assert "Watch it live" not in out  # the blurb after a finished demo
    assert not report.exists()
    assert descendants(demo.pid) == []


def test_dev_py_piped_into_a_reader_that_stops_early_ends_quietly(tmp_path: Path) -> None:
    """``python3 dev.py --help | head -1``: the reader gone, dev.py stops as a command killed by SIGPIPE (141),
    without a BrokenPipeError traceback."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    err = tmp_path / "stderr.txt"
    with err.open("w") as stderr:
        code = subprocess.run([sys.executable, str(ROOT / "dev.py"), "--help"], stdout=write, stderr=stderr,
                              timeout=60, check=False).returncode  # fmt: skip
    os.close(write)
    assert code == 141, err.read_text()
    assert err.read_text() == ""
