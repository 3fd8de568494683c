"""What users hand ``python -m localrun``, as their tools write it: a fault profile saved by a Windows editor or
PowerShell (a UTF-8 byte order mark, UTF-16), one that is no text at all, an ``--inject-raw`` file with a BOM, a
``fuzz --out`` that is a file. Each is read, or refused before the run in one line (exit code 2), never a traceback."""

from __future__ import annotations

import codecs
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROFILE = {"cosmos": {"throttle_rate": 0.05}}


def localrun(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "localrun", *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize(
    "encoded",
    [
        codecs.BOM_UTF8 + json.dumps(PROFILE).encode(),  # Notepad, PowerShell's Set-Content -Encoding UTF8
        json.dumps(PROFILE).encode("utf-16"),  # PowerShell 5's `>` and Out-File: UTF-16 with its BOM
    ],
    ids=["utf-8-bom", "utf-16"],
)
def test_a_profile_saved_by_windows_tools_is_read(tmp_path: Path, encoded: bytes) -> None:
    profile = tmp_path / "profile.json"
    profile.write_bytes(encoded)
    report = tmp_path / "report.json"
    run = localrun("simulate", "--orders", "3", "--seed", "1", "--no-progress", "--faults", str(profile),
                   "--report", str(report))  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(report.read_text())["orders"] == 3


def test_a_profile_that_is_not_text_is_refused_in_one_line(tmp_path: Path) -> None:
    profile = tmp_path / "profile.json"
    profile.write_bytes(b'{"cosmos": {"throttle_rate": 0.05, "\xe9": 1}}')  # Latin-1, not UTF-8
    run = localrun("simulate", "--orders", "3", "--seed", "1", "--faults", str(profile),
                   "--report", str(tmp_path / "r.json"))  # fmt: skip
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "not UTF-8" in run.stderr


def test_an_inject_raw_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    raw = tmp_path / "raw.jsonl"
    raw.write_bytes(codecs.BOM_UTF8 + b'{"body": "not an order"}\n')
    report = tmp_path / "report.json"
    run = localrun("simulate", "--orders", "2", "--seed", "1", "--no-progress", "--inject-raw", str(raw),
                   "--report", str(report))  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(report.read_text())["orders"] == 2


def test_fuzz_out_that_is_a_file_is_refused_before_the_first_seed(tmp_path: Path) -> None:
    out = tmp_path / "fuzz-runs"
    out.write_text("")
    run = localrun("fuzz", "--count", "1", "--orders", "2", "--out", str(out))
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "is not a folder" in run.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="a named pipe")
def test_a_report_path_that_is_no_file_is_written_as_it_is(tmp_path: Path) -> None:
    """``--report /dev/stdout`` (piped to ``jq``), ``/dev/null``, a named pipe: written into, never replaced by a
    file (the whole-file rename would replace /dev/null itself, as root). A named pipe stands in for them here."""
    import stat
    import threading

    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    run = localrun("simulate", "--orders", "2", "--seed", "1", "--no-progress", "--report", str(fifo))
    if reader.is_alive():  # nothing was written into the pipe: open it so the reader ends
        with open(fifo, "wb"):
            pass
    reader.join(timeout=30)
    assert run.returncode == 0, run.stderr[-2000:]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)  # still the pipe, not a file in its place
    assert json.loads(received[0])["orders"] == 2


def test_a_report_path_that_is_a_symbolic_link_keeps_the_link(tmp_path: Path) -> None:
    target, link = tmp_path / "runs" / "latest-report.json", tmp_path / "report.json"
    target.parent.mkdir()
    target.write_text("{}")
    link.symlink_to(target)
    run = localrun("simulate", "--orders", "2", "--seed", "1", "--no-progress", "--report", str(link))
    assert run.returncode == 0, run.stderr[-2000:]
    assert link.is_symlink() and json.loads(target.read_text())["orders"] == 2


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--orders", "2", "--seed", "1", "--port", "0", "--speed", "inf"],  # OverflowError in the pacer
        ["serve", "--orders", "2", "--seed", "1", "--port", "0", "--speed", "nan"],  # ValueError in the pacer
        ["serve", "--orders", "2", "--seed", "1", "--port", "0", "--speed", "1e308"],
        ["serve", "--orders", "2", "--seed", "1", "--port", "0", "--review-timeout", "99999999999999"],
        ["fuzz", "--count", "1", "--orders", "2", "--timeout", "nan"],  # ValueError in subprocess.run
    ],
    ids=["speed-inf", "speed-nan", "speed-huge", "review-timeout-huge", "fuzz-timeout-nan"],
)
def test_a_number_out_of_range_is_refused_in_one_line(tmp_path: Path, args: list[str]) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "localrun", *args, *(["--out", str(tmp_path)] if args[0] == "fuzz" else [])],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize(
    "profile",
    [
        '{"host": {"restart_every_s": NaN}}',  # Python's json reads NaN and Infinity
        '{"host": {"restart_every_s": Infinity}}',
        '{"host": {"restart_every_s": true}}',
        '{"host": {"restart_every_s": 1e300}}',
        '{"host": {"clock_skew_s": {"supervisor": NaN}}}',
        '{"cosmos": {"outages": [{"start_s": NaN, "duration_s": 5}]}}',
        '{"cosmos": {"outages": [{"start_s": 1e300, "duration_s": 5}]}}',
        '{"remote": {"payment": {"outages": [{"start_s": 1, "duration_s": Infinity}]}}}',
        '{"remote": {"payment": {"latency_ms": [0, 1e300]}}}',  # every call an OverflowError, exit 0
        '{"remote": {"shipping": {"slow_call_rate": 1, "slow_latency_ms": [1e20, 1e20]}}}',
        '{"reply_queues": 2, "status_queues": {"refusing": [{"submitter": 1, "error": "quota_exceeded", '
        '"start_s": 1e300}]}}',
    ],
)
def test_a_profile_time_that_is_no_finite_number_of_seconds_is_refused_before_the_run(
    tmp_path: Path, profile: str
) -> None:
    """Each was a ValueError or OverflowError traceback from inside the run (NaN, Infinity, 1e300 seconds)."""
    path = tmp_path / "profile.json"
    path.write_text(profile)
    run = localrun("simulate", "--orders", "2", "--seed", "1", "--faults", str(path), "--report", str(tmp_path / "r"))
    assert run.returncode == 2, run.stderr[-2000:]
    assert run.stderr.startswith("fault profile: ") and "Traceback" not in run.stderr


@pytest.mark.parametrize(
    ("option", "name", "text", "said"),
    [
        # the payment faults asked for, then a second "remote" json.loads kept instead: a run without them
        ("--faults", "p.json", '{"remote": {"payment": {"transient_error_rate": 0.5}}, "remote": {}}', "'remote'"),
        ("--faults", "p.json", '{"cosmos": {"throttle_rate": 0.5, "throttle_rate": 0}}', "'throttle_rate'"),
        ("--inject-raw", "raw.jsonl", '{"body": "{}"}\n{"body": "a", "at_s": 5, "at_s": 0}\n', ":2: field 'at_s'"),
    ],
)
def test_a_key_given_twice_is_refused_in_one_line(tmp_path: Path, option: str, name: str, text: str, said: str) -> None:
    """Red team (rt-hostile): before, ``json.loads`` kept the last value of a key given twice, silently: a profile
    naming ``remote`` twice ran without the faults of the first, and the run's verdict spoke for a profile the user
    did not ask for."""
    given = tmp_path / name
    given.write_text(text, encoding="utf-8")
    run = localrun("simulate", "--orders", "2", "--seed", "1", "--no-progress", option, str(given),
                   "--report", str(tmp_path / "r.json"))  # fmt: skip
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and said in run.stderr and "more than once" in run.stderr, run.stderr
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    ("option", "text"),
    [
        ("--faults", "[" * 100_000 + "]" * 100_000),  # RecursionError in json's decoder
        ("--faults", '{"admission": {"max_pending": ' + "9" * 5000 + "}}"),  # over Python's 4300 digits
        ("--inject-raw", '{"body": "{}", "at_s": ' + "[" * 100_000 + "]" * 100_000 + "}\n"),
    ],
    ids=["profile-nested", "profile-long-integer", "raw-nested"],
)
def test_json_python_cannot_read_is_refused_in_one_line(tmp_path: Path, option: str, text: str) -> None:
    """Red team (extreme faults): the readers caught ``JSONDecodeError`` only; brackets nested past the stack ended the
    run with a ``RecursionError`` traceback (a profile or an --inject-raw line), and an integer of 5,000 digits in a
    profile with a ``ValueError`` one. The app's own reader refuses both with a reason (contracts/parsing.py)."""
    given = tmp_path / "input"
    given.write_text(text, encoding="utf-8")
    run = localrun("simulate", "--orders", "1", "--seed", "1", "--no-progress", option, str(given),
                   "--report", str(tmp_path / "r.json"))  # fmt: skip
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "not JSON the runner reads" in run.stderr, run.stderr[-2000:]
