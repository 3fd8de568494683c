"""The async functions' blocking work (``asyncio.to_thread``) runs in the event loop's default executor, which the
Python worker does not set: asyncio makes one of ``ThreadPoolExecutor``'s default size, ``min(32, cores + 4)`` (5 on
one core), whatever ``PYTHON_THREADPOOL_THREAD_COUNT`` says. ``dependencies.size_blocking_pool`` gives it the same
number of threads as the worker's pool for sync functions, on a real event loop here."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from dependencies import size_blocking_pool

THREADS = "PYTHON_THREADPOOL_THREAD_COUNT"


@pytest.fixture
def thread_count() -> Iterator[None]:
    before = os.environ.get(THREADS)
    yield
    if before is None:
        os.environ.pop(THREADS, None)
    else:
        os.environ[THREADS] = before


def _threads_at_once(jobs: int, preset: ThreadPoolExecutor | None = None) -> int:
    """How many of ``jobs`` blocking calls an async function hands to ``asyncio.to_thread`` run at once, after
    ``size_blocking_pool`` (each waits until all have begun, or 1 s)."""
    running, most, lock, all_in = 0, 0, threading.Lock(), threading.Event()

    def block() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            if running == jobs:
                all_in.set()
        all_in.wait(1)
        with lock:
            running -= 1

    async def invocation() -> None:
        if preset is not None:
            asyncio.get_running_loop().set_default_executor(preset)
        size_blocking_pool()
        await asyncio.gather(*(asyncio.to_thread(block) for _ in range(jobs)))

    asyncio.run(invocation())
    return most


@pytest.mark.usefixtures("thread_count")
def test_the_loops_pool_takes_the_worker_thread_count() -> None:
    """Before, 40 ``to_thread`` calls ran at most ``min(32, cores + 4)`` at once (6 on this 2-core machine)."""
    os.environ[THREADS] = "40"
    assert _threads_at_once(40) == 40


@pytest.mark.usefixtures("thread_count")
def test_an_unset_count_or_a_pool_the_loop_has_is_left_alone() -> None:
    """Unset, the worker's default pool is kept; an executor already set (the local runner's) is not replaced."""
    os.environ.pop(THREADS, None)
    default = min(32, (os.cpu_count() or 1) + 4)
    assert _threads_at_once(default + 2) == default
    os.environ[THREADS] = "40"
    assert _threads_at_once(8, preset=ThreadPoolExecutor(max_workers=2)) == 2
