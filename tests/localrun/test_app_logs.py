"""``--log-level`` shows the app's own logs at the level asked, not only its named events (localrun/app_logs.py).

Before, only the ``orders`` logger (the named events, held at INFO by the simulation) reached the runner's stderr
handler at INFO: every other ``log.info`` of the app (``notifications``, ``status``, ``supervisor``, each module's
``__name__`` logger) took the root logger's WARNING and was dropped, though the option said INFO shows them."""

from __future__ import annotations

import ast
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from localrun.app_logs import APP_LOGGERS, app_log_level
from tests.test_layers import LAYERS

ROOT = Path(__file__).resolve().parents[2]


def _production_files() -> Iterator[Path]:
    for unit in LAYERS:
        package = ROOT / unit
        yield from sorted(package.rglob("*.py")) if package.is_dir() else [ROOT / f"{unit}.py"]


def _logger_names(path: Path) -> Iterator[str]:
    """The names ``path`` passes to ``logging.getLogger``: a literal, or its module's for ``__name__``."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "getLogger" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                yield arg.value
            elif isinstance(arg, ast.Name) and arg.id == "__name__":
                yield module


def test_every_logger_the_app_names_is_one_the_option_lowers() -> None:
    names = {name for path in _production_files() for name in _logger_names(path)}
    assert {"orders", "status", "notifications", "supervisor"} <= names  # the scan finds what it should
    third_party = {"azure"}  # quietened by the app (observability/setup.py), not its own
    missed = sorted(n for n in names - third_party if n.split(".")[0] not in APP_LOGGERS)
    assert missed == []
    assert set(LAYERS) <= set(APP_LOGGERS)  # a module's logger is a child of its package's


@pytest.fixture
def root_at_warning() -> Iterator[list[logging.LogRecord]]:
    """The root logger at WARNING (as in the runner's process), with a handler that keeps what reaches it."""
    root = logging.getLogger()
    kept: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            kept.append(record)

    handler, previous = Keep(logging.DEBUG), root.level
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    try:
        yield kept
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


def test_the_app_s_info_lines_pass_for_the_run_only(root_at_warning: list[logging.LogRecord]) -> None:
    module_logger = logging.getLogger("notifications.repeats.test")
    sdk_logger = logging.getLogger("azure.core.test")
    with app_log_level("INFO"):
        module_logger.info("inside")
        sdk_logger.info("an SDK's request line")
        logging.getLogger("supervisor").debug("below the level asked")
    module_logger.info("after")
    assert [r.getMessage() for r in root_at_warning] == ["inside"]
    assert logging.getLogger("notifications").level == logging.NOTSET  # given back


def test_a_level_an_app_logger_set_lower_is_kept(root_at_warning: list[logging.LogRecord]) -> None:
    orders = logging.getLogger("orders")
    previous = orders.level
    orders.setLevel(logging.DEBUG)
    try:
        with app_log_level("ERROR"):
            assert orders.level == logging.DEBUG
        assert orders.level == logging.DEBUG
    finally:
        orders.setLevel(previous)


def _run(tmp_path: Path, level: str) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "localrun", "simulate", "--orders", "2", "--seed", "1", "--no-progress",
         "--report", str(tmp_path / f"{level}.json"), "--log-level", level],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stderr


def test_log_level_info_shows_the_agents_lines_and_warning_does_not(tmp_path: Path) -> None:
    info = _run(tmp_path, "INFO")
    assert "INFO order_agents.runtime: calling payment.charge" in info  # failed before: only "INFO orders:" lines
    assert "INFO orders:" in info
    assert "INFO " not in _run(tmp_path, "WARNING")
