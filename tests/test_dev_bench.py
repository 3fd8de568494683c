"""``python3 dev.py bench``: its options, and how it compares runs of two trees (the runs themselves
are the 1,000-order simulation, timed by docs/benchmark.md's measurements, not here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dev() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dev_under_test", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def report(wall_s: float) -> dict[str, Any]:
    return {
        "orders": 10,
        "wall_s": wall_s,
        "simulated_s": 100.0,
        "ops_per_order": {},
        "latency_s": {},
        "invariants": {"lost_orders": 0},
        "runtime": {"invocation_requests": 7, "sdk_speed_ups": False},
    }


def test_options(dev: ModuleType) -> None:
    assert dev._bench_options([]) == (1000, None, 1, ())
    assert dev._bench_options(["200", "--compare", "HEAD~3", "--repeat", "3", "--sdk-speed-ups"]) == (
        200,
        "HEAD~3",
        3,
        ("--sdk-speed-ups",),
    )
    assert dev._bench_options(["--all-cores", "50", "--sdk-speed-ups"]) == (
        50,
        None,
        1,
        ("--sdk-speed-ups", "--all-cores"),
    )
    for bad in (["--repeat"], ["--compare"], ["--repeat", "0"], ["--repeat", "x"], ["lots"], ["10", "20"], ["0"]):
        with pytest.raises(ValueError):
            dev._bench_options(bad)


def test_the_fastest_run_is_the_one_with_a_report_and_the_least_cpu(dev: ModuleType) -> None:
    slow, quick, failed = (50.0, 40.0, report(45.0), 0), (30.0, 25.0, report(28.0), 0), (1.0, 0.5, None, 1)
    assert dev.fastest([slow, failed, quick]) == quick
    assert dev.fastest([failed]) == failed


def test_the_ratio_compares_the_fastest_run_of_each_side_and_shows_every_round(dev: ModuleType) -> None:
    before = [(100.0, 90.0, report(95.0), 0), (80.0, 70.0, report(75.0), 0)]
    after = [(40.0, 30.0, report(35.0), 0), (55.0, 50.0, report(52.0), 0)]
    ratio, rounds = dev.bench_ratio("fb2f849", before, after)
    assert "2.00x process wall (fb2f849 80.0 s / this tree 40.0 s)" in ratio
    assert "2.33x CPU (70.0 s / 30.0 s; the fastest of 2 runs each)" in ratio
    assert rounds == "each round's CPU    3.00x (90.0 s / 30.0 s), 1.40x (70.0 s / 50.0 s)"
    assert dev.bench_ratio("fb2f849", before[:1], after[:1]) == [
        "ratio               2.50x process wall (fb2f849 100.0 s / this tree 40.0 s), "
        "2.71x simulation wall_s, 3.00x CPU (90.0 s / 30.0 s)"
    ]
    with pytest.raises(ValueError):
        dev.bench_ratio("fb2f849", [(1.0, 1.0, None, 1)], after)


def test_rounds_alternate_the_trees_and_the_worktree_is_removed(
    dev: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    runs: list[Path] = []
    dropped: list[Path] = []
    cpu = iter([9.0, 4.0, 8.0, 5.0, 10.0, 6.0])

    def bench_run(root: Path, orders: int, flags: tuple[str, ...]) -> tuple[float, float, dict[str, Any], int]:
        runs.append(root)
        used = next(cpu)
        return used + 1, used, report(used), 0

    monkeypatch.setattr(dev, "setup", lambda **_: None)
    monkeypatch.setattr(dev, "_bench_tree", lambda ref: tmp_path / ref)
    monkeypatch.setattr(dev, "_drop_tree", dropped.append)
    monkeypatch.setattr(dev, "_bench_run", bench_run)
    assert dev.bench(["10", "--compare", "REF", "--repeat", "3"]) == 0
    # the work tree first in the second round: the second of two runs in a row is not always the same side's
    assert runs == [tmp_path / "REF", dev.ROOT, dev.ROOT, tmp_path / "REF", tmp_path / "REF", dev.ROOT]
    assert dropped == [tmp_path / "REF"]
    out = capsys.readouterr().out
    assert "== REF (the fastest of 3 runs)" in out and "== this tree (the fastest of 3 runs)" in out
    assert "1.25x CPU (5.0 s / 4.0 s; the fastest of 3 runs each)" in out
    assert "each round's CPU    2.25x (9.0 s / 4.0 s), 0.62x (5.0 s / 8.0 s), 1.67x (10.0 s / 6.0 s)" in out

    def broken(root: Path, orders: int, flags: tuple[str, ...]) -> tuple[float, float, dict[str, Any], int]:
        raise KeyboardInterrupt

    monkeypatch.setattr(dev, "_bench_run", broken)
    with pytest.raises(KeyboardInterrupt):
        dev.bench(["10", "--compare", "REF"])
    assert dropped == [tmp_path / "REF"] * 2  # removed even when a run is interrupted


def test_repeated_runs_of_the_work_tree_alone_show_the_fastest_and_every_run(
    dev: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cpu = iter([7.0, 5.0, 6.0])

    def bench_run(root: Path, orders: int, flags: tuple[str, ...]) -> tuple[float, float, dict[str, Any], int]:
        assert root == dev.ROOT
        used = next(cpu)
        return used + 1, used, report(used), 0

    def no_tree(ref: str) -> Path:
        raise AssertionError("no worktree without --compare")

    monkeypatch.setattr(dev, "setup", lambda **_: None)
    monkeypatch.setattr(dev, "_bench_tree", no_tree)
    monkeypatch.setattr(dev, "_bench_run", bench_run)
    assert dev.bench(["10", "--repeat", "3"]) == 0
    out = capsys.readouterr().out
    assert "== this tree (the fastest of 3 runs)" in out
    assert "cpu                 5.0 s" in out
    assert "each run's CPU      7.0 s, 5.0 s, 6.0 s" in out
    assert "ratio" not in out


def test_bad_options_are_refused_before_anything_is_installed(
    dev: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def setup() -> None:
        raise AssertionError("setup ran")

    monkeypatch.setattr(dev, "setup", setup)
    assert dev.bench(["--repeat", "0"]) == 2
    assert "--repeat" in capsys.readouterr().err


def test_the_path_line_says_how_the_run_used_the_cores(dev: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    shown = []
    for one_core in ({"core": 1, "given_up": False}, {"core": 0, "given_up": True}, None):
        run = report(5.0)
        run["runtime"] = {**run["runtime"], "one_core": one_core}
        dev._bench_print(run, 6.0, 5.0)
        shown.append(next(line for line in capsys.readouterr().out.splitlines() if line.startswith("path")))
    assert shown[0].endswith("as shipped; threads on core 1")
    assert shown[1].endswith("as shipped; threads on core 0 until the machine got busy")
    assert shown[2].endswith("as shipped; threads on every core")
    dev._bench_print(report(5.0), 6.0, 5.0)  # an older ref's report says nothing of cores
    assert "(7 InvocationRequests); Durable SDK as shipped\n" in capsys.readouterr().out
