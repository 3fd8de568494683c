"""``python -m localrun`` as a user runs it: interrupted (Ctrl-C, SIGTERM from a CI job or ``kill``, SIGHUP
from a closed terminal), piped into ``head``, pointed at a report path it cannot write, out of disk space.
Each case exits with a code that says what happened, without a traceback, with no process of the run left
behind (the Cosmos DB server, ``fuzz``'s run of a seed) and no part of a file where the report or chart goes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "examples" / "profiles" / "all-faults.json"

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")


def descendants(pid: int) -> list[int]:
    """Every live process under ``pid`` (children, their children...), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # ended meanwhile
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":  # a zombie has ended; only its parent's wait is missing
                parents[int(entry.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def started(*args: str) -> subprocess.Popen[str]:
    """``python -m localrun ARGS`` in a session of its own: a signal reaches it alone, as `kill PID` sends it."""
    return subprocess.Popen(
        [sys.executable, "-m", "localrun", *args],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


def wait_for_node(process: subprocess.Popen[str] | subprocess.Popen[bytes], timeout: float = 60.0) -> list[int]:
    """The run's processes once its Cosmos DB server (node) is up: the run is under way."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        below = descendants(process.pid)
        if any("node" in _command_line(pid) for pid in below):
            return below
        assert process.poll() is None, "the run ended before its Cosmos DB server started"
        time.sleep(0.05)
    raise AssertionError("no Cosmos DB server started")


def _command_line(pid: int) -> str:
    """``pid``'s command line, empty once it ended (a short-lived child of a setup, seen listed and gone before its
    command line was read: failed a fresh-clone run under load)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    """Those of ``pids`` still alive after ``timeout``."""
    deadline = time.monotonic() + timeout
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)]
        time.sleep(0.1)
    return alive


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_an_interrupted_simulation_stops_its_server_and_says_so_in_one_line(tmp_path: Path, number: int) -> None:
    report, chart = tmp_path / "report.json", tmp_path / "chart.png"
    run = started(
        *("simulate", "--orders", "200", "--seed", "1", "--faults", str(PROFILE), "--no-progress"),
        *("--report", str(report), "--chart", str(chart)),
    )
    try:
        below = wait_for_node(run)
        time.sleep(1.0)  # mid-simulation
        run.send_signal(number)
        _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 128 + number, err[-2000:]  # 130 for Ctrl-C, 143 SIGTERM, 129 SIGHUP
    assert "Traceback" not in err
    assert f"interrupted ({signal.Signals(number).name}): stopped" in err
    assert gone(below) == [], "a process of the run outlived it"
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no report, no chart, no part of either


def test_serve_stopped_by_ctrl_c_in_its_terminal_prints_the_summary(tmp_path: Path) -> None:
    """Ctrl-C in a terminal sends SIGINT to the whole foreground process group, the Cosmos DB server (node)
    included. ``serve`` reads the store for its summary after the signal, so node stopped with it and the README's
    console command ended in a traceback and exit code 1, with no summary: found walking through the README."""
    out_path = tmp_path / "out.txt"
    with out_path.open("w") as out_file:
        run = subprocess.Popen(
            [sys.executable, "-m", "localrun", "serve", "--orders", "3", "--seed", "1", "--speed", "100",
             "--port", "0", "--no-progress"],
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out_file, stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, which Ctrl-C's SIGINT reaches whole
        )  # fmt: skip
        try:
            below = wait_for_node(run)
            deadline = time.monotonic() + 60
            while "console: http://127.0.0.1:" not in out_path.read_text() and time.monotonic() < deadline:
                time.sleep(0.1)  # the console listens: the run is under way
            os.killpg(run.pid, signal.SIGINT)
            run.wait(timeout=120)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
    out = out_path.read_text()
    assert run.returncode == 0, out[-3000:]  # serve's exit code is 0 whatever the invariants
    assert "Traceback" not in out, out[-3000:]
    assert out.rstrip().splitlines()[-1].startswith("verdict: "), out[-3000:]
    assert gone(below) == [], "a process of the run outlived it"


def test_fuzz_stopped_ends_the_seed_it_was_running_and_keeps_no_file_of_it(tmp_path: Path) -> None:
    out = tmp_path / "fuzz"
    run = started(
        *("fuzz", "--first", "1", "--count", "3", "--orders", "150", "--out", str(out)),
    )
    try:
        below = wait_for_node(run)  # the seed's own simulate process and its server
        time.sleep(0.5)
        run.send_signal(signal.SIGTERM)  # to fuzz alone, as a CI job's cancel or `kill PID` sends it
        stdout, stderr = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 143, stderr[-2000:]
    assert "Traceback" not in stderr
    assert "interrupted at seed 1: 0 seeds run" in stdout
    assert gone(below) == [], "the seed's run outlived fuzz"
    assert list(out.iterdir()) == []  # the interrupted seed is no failing seed


def test_a_report_path_that_cannot_be_written_is_refused_before_the_run(tmp_path: Path) -> None:
    began = time.monotonic()
    for report, problem in ((tmp_path, "is a directory"), (tmp_path / "file" / "report.json", "cannot be created")):
        (tmp_path / "file").write_text("")
        run = subprocess.run(
            [sys.executable, "-m", "localrun", "simulate", "--orders", "2000", "--seed", "1", "--report", str(report)],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert run.returncode == 2, run.stderr[-2000:]
        assert problem in run.stderr and "Traceback" not in run.stderr
    assert time.monotonic() - began < 30  # not after 2,000 orders


def test_a_chart_path_without_a_suffix_is_written_there_and_an_unknown_format_is_refused(tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    run = subprocess.run(
        [sys.executable, "-m", "localrun", "simulate", "--orders", "3", "--seed", "1", "--no-progress",
         "--report", str(tmp_path / "r.json"), "--chart", str(chart)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"chart: {chart}" in run.stdout
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # where it says, not chart.png
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chart", "r.json"]
    refused = subprocess.run(
        [sys.executable, "-m", "localrun", "simulate", "--orders", "3", "--seed", "1", "--no-progress",
         "--report", str(tmp_path / "r.json"), "--chart", str(tmp_path / "chart.txt")],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert refused.returncode == 2 and "no chart format 'txt'" in refused.stderr


def _no_room_past(size: int) -> None:
    """In the child: files may not grow past ``size`` bytes (EFBIG, as a full disk's ENOSPC, to the writer)."""
    import resource

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


def test_a_report_that_cannot_be_written_whole_leaves_none_and_still_shows_the_summary(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text('{"from": "an earlier run"}\n')
    run = subprocess.run(
        [sys.executable, "-m", "localrun", "simulate", "--orders", "3", "--seed", "1", "--no-progress",
         "--report", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False, preexec_fn=lambda: _no_room_past(1000),
    )  # fmt: skip
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    assert f"could not write {report}: File too large" in run.stderr
    assert "verdict: all" in run.stdout  # the run's figures are not lost with the file
    assert json.loads(report.read_text()) == {"from": "an earlier run"}  # the earlier report, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no part left


@pytest.mark.parametrize("closed", ["stdout", "stderr"])
def test_a_run_whose_reader_went_away_still_writes_its_report(tmp_path: Path, closed: str) -> None:
    """``simulate ... | head -1`` (stdout) and ``simulate ... 2>&1 | head -1`` (the progress lines on stderr):
    the report is the run's product; the run goes on to it, quietly, exit code the verdict."""
    report = tmp_path / "report.json"
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    kept = tmp_path / "kept.txt"
    with kept.open("w") as other:
        run = subprocess.run(
            [sys.executable, "-m", "localrun", "simulate", "--orders", "20", "--seed", "1", "--report", str(report)],
            cwd=ROOT, timeout=120, check=False,
            stdout=write if closed == "stdout" else other, stderr=write if closed == "stderr" else other,
        )  # fmt: skip
    os.close(write)
    assert run.returncode == 0, kept.read_text()[-2000:]
    assert "Traceback" not in kept.read_text() and "Exception ignored" not in kept.read_text()
    assert json.loads(report.read_text())["orders"] == 20


@pytest.mark.parametrize("closed", [1, 2])
def test_a_run_started_with_stdout_or_stderr_closed_writes_its_report(tmp_path: Path, closed: int) -> None:
    """``simulate ... 2>&-`` (or ``>&-``, a daemon's closed descriptors): Python starts with ``sys.stderr`` None,
    and the run stopped at its first progress line (exit 1, no report, the traceback going nowhere)."""
    report = tmp_path / "report.json"
    run = subprocess.run(
        [sys.executable, "-m", "localrun", "simulate", "--orders", "5", "--seed", "1", "--report", str(report)],
        cwd=ROOT, timeout=120, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=lambda: os.close(closed),
    )  # fmt: skip
    assert run.returncode == 0
    assert json.loads(report.read_text())["orders"] == 5
