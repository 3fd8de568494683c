"""Every test here leaves no task thread of the runner's scheduler alive (``localrun-task-N``, daemon threads
blocked until their scheduler ends them: ``TaskScheduler.stop_idle_threads``, which a simulation and
``RuntimeHarness.close`` call). ``test_virtual_time.py`` left 56 to the end of the session."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest


def task_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("localrun-task-")}


@pytest.fixture(autouse=True)
def no_task_thread_left() -> Iterator[None]:
    before = task_threads()
    yield
    left = task_threads() - before
    assert not left, f"task threads left alive: {sorted(t.name for t in left)}"
