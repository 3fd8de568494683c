"""What the runner shows while it runs: its progress line written to a log (a CI job's) is one line per
tenth of the orders, not hundreds of ``\\r`` redraws run together; and ``serve`` says when every order has
settled, so its developer knows the figures are final (it used to give no sign)."""

from __future__ import annotations

import io
import threading
from datetime import timedelta

import pytest

from localrun.__main__ import main
from localrun.progress import ProgressLine
from localrun.report import build_report
from localrun.serve import paced_drive
from localrun.simulation import SimulationConfig, run_simulation


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_the_progress_is_a_line_per_tenth_of_the_orders() -> None:
    log = io.StringIO()
    line = ProgressLine(log, 200)
    for done in range(201):
        for _ in range(3):  # shown several times per count, as the runner does every 0.2 s
            line.show(done, timedelta(seconds=done))
    line.end(200, timedelta(seconds=250))
    lines = log.getvalue().split("\n")
    assert "\r" not in log.getvalue()
    assert lines[-1] == ""  # ended
    assert len(lines[:-1]) == 12  # 0 %, each tenth up to 100 %, and the last figures
    assert lines[-2].startswith("[" + "#" * 30 + "] 200/200 orders settled") and "250s simulated" in lines[-2]


def test_off_a_terminal_the_last_figures_are_not_written_twice() -> None:
    log = io.StringIO()
    line = ProgressLine(log, 2)
    line.show(2, timedelta(seconds=5))
    line.end(2, timedelta(seconds=5))
    assert log.getvalue().count("orders settled") == 1


def test_on_a_terminal_the_progress_is_redrawn_in_place() -> None:
    terminal = Terminal()
    line = ProgressLine(terminal, 4)
    for done in range(5):
        line.show(done, timedelta(seconds=done))
    line.end(4, timedelta(seconds=9))
    text = terminal.getvalue()
    assert text.count("\r") == 6 and text.count("\n") == 1 and text.endswith("9s simulated\n")


def test_a_run_with_its_progress_written_to_a_log_has_no_carriage_returns(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--orders", "20", "--seed", "3", "--report", "out/progress-log.json"])
    err = capsys.readouterr().err
    assert code == 0, err
    progress = [line for line in err.splitlines() if "orders settled" in line]
    assert "\r" not in err and 1 <= len(progress) <= 12, err
    assert progress[-1].startswith("[" + "#" * 30 + "] 20/20 orders settled"), progress


@pytest.mark.cosmos
def test_serve_says_when_every_order_has_settled_and_not_before() -> None:
    stop = threading.Event()
    said: list[int] = []

    def settled() -> None:
        said.append(1)
        stop.set()  # the developer, told, presses Ctrl-C

    gave_up = threading.Timer(300, stop.set)  # never told: the run ends, and the test fails below
    gave_up.start()
    try:
        config = SimulationConfig(
            orders=6,
            seed=2,
            horizon=timedelta(days=7),
            drive=paced_drive(2000.0, 0, stop, lambda _url: None, on_settled=settled),
        )
        report = build_report(run_simulation(config))
    finally:
        gave_up.cancel()
    assert said == [1], "serve never said every order had settled"
    assert report["invariants"]["non_terminal"] == 0  # it said so only once nothing was left in flight
    assert report["horizon_reached"] is False
