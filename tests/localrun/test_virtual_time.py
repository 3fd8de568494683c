"""The virtual-time scheduler: concurrent sleeps overlap, order is deterministic, restarts drop work."""

from __future__ import annotations

import contextvars
import functools
import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest

from localrun.virtual_time import TaskScheduler


@pytest.fixture
def s() -> Iterator[TaskScheduler]:
    """A scheduler whose task threads end with the test (each one started is a thread alive to the end of the
    session otherwise: this module left 56 of them)."""
    scheduler = TaskScheduler()
    yield scheduler
    scheduler.cancel_all()  # a task a test left parked keeps its thread
    scheduler.stop_idle_threads()


def drain(s: TaskScheduler) -> None:
    while True:
        if s.run_one():
            continue
        wake = s.next_wake()
        if wake is None:
            return
        s.clock.advance_to(wake)


def test_sleeping_tasks_overlap_in_simulated_time(s: TaskScheduler) -> None:
    start = s.clock.now()
    finished: list[tuple[str, float]] = []

    def worker(name: str, seconds: float) -> None:
        s.clock.sleep(seconds)
        finished.append((name, (s.clock.now() - start).total_seconds()))

    for i in range(50):
        s.spawn(f"w{i}", functools.partial(worker, f"w{i}", 10))
    drain(s)
    assert len(finished) == 50
    assert {t for _, t in finished} == {10.0}  # fifty 10 s sleeps take 10 s, not 500 s
    assert s.clock.now() - start == timedelta(seconds=10)


def test_resume_order_is_wake_time_then_creation_order(s: TaskScheduler) -> None:
    order: list[str] = []

    def worker(name: str, seconds: float) -> None:
        s.clock.sleep(seconds)
        order.append(name)

    s.spawn("late", lambda: worker("late", 3))
    s.spawn("early-1", lambda: worker("early-1", 1))
    s.spawn("early-2", lambda: worker("early-2", 1))
    drain(s)
    assert order == ["early-1", "early-2", "late"]


def test_a_task_can_sleep_many_times_and_failures_are_recorded(s: TaskScheduler) -> None:
    ticks: list[float] = []
    start = s.clock.now()

    def ticker() -> None:
        for _ in range(3):
            s.clock.sleep(2)
            ticks.append((s.clock.now() - start).total_seconds())
        raise RuntimeError("boom")

    s.spawn("ticker", ticker)
    drain(s)
    assert ticks == [2.0, 4.0, 6.0]
    assert [(n, str(e)) for n, e in s.failures] == [("ticker", "boom")]


def test_cancel_all_drops_parked_tasks_without_running_the_rest_of_them(s: TaskScheduler) -> None:
    reached: list[str] = []

    def slow() -> None:
        s.clock.sleep(5)
        reached.append("after sleep")

    s.spawn("slow", slow)
    s.run_one()  # runs until it parks
    assert s.busy()
    assert s.cancel_all() == 1
    drain(s)
    assert reached == []
    assert not s.busy()


def test_sleep_outside_a_task_advances_the_clock(s: TaskScheduler) -> None:
    start = s.clock.now()
    s.clock.sleep(7)
    assert s.clock.now() - start == timedelta(seconds=7)


def test_task_threads_are_reused_and_each_task_starts_with_fresh_context_variables(s: TaskScheduler) -> None:
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")
    seen: list[tuple[str, str]] = []

    def task(name: str) -> None:
        seen.append((name, marker.get()))
        marker.set(name)

    for i in range(20):
        s.spawn(f"t{i}", functools.partial(task, f"t{i}"))
    drain(s)
    assert seen == [(f"t{i}", "unset") for i in range(20)]  # nothing leaks from the previous task
    assert s.threads() == 1  # twenty tasks one after the other: one thread


def test_a_thread_freed_by_a_cancelled_task_runs_the_next_task_and_idle_threads_can_be_stopped():
    before = set(threading.enumerate())
    s = TaskScheduler()
    ran: list[str] = []

    def sleeper() -> None:
        s.clock.sleep(5)
        ran.append("sleeper woke")  # never: cancelled while parked

    s.spawn("sleeper", sleeper)
    s.run_one()
    s.cancel_all()
    s.spawn("next", lambda: ran.append("next"))
    drain(s)
    assert ran == ["next"]
    assert s.threads() == 1
    started = set(threading.enumerate()) - before
    assert len(started) == 1
    s.stop_idle_threads()
    assert not any(t.is_alive() for t in started)
