"""Virtual time for the local runner: many function invocations "run at once" while simulated time
skips ahead, deterministically.

Each invocation is a ``Task`` with a thread of its own while it runs (threads are reused from one
task to the next), but only one task runs at any moment: the scheduler hands it the baton and waits
until it finishes or sleeps. ``SimClock.sleep`` inside a
task parks it until simulated time reaches its wake-up; when nothing is runnable the runner moves
the clock to the next moment something is due. Tasks are resumed in a fixed order (wake-up time,
then creation order), so a run is a pure function of its seed and inputs.
"""

from __future__ import annotations

import contextvars
import heapq
import itertools
import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta


class SimClock:
    """The ``adapters.clock.Clock`` of a simulation. ``sleep`` from a task parks the task; from
    anywhere else it simply advances time."""

    def __init__(self, scheduler: TaskScheduler, start: datetime) -> None:
        self._scheduler = scheduler
        self._now = start
        # Sleeps outside any task, by thread name. One on the Functions worker's event-loop thread is
        # a blocking call in an async function: in Azure it would stall every async invocation.
        self.untracked_sleeps: Counter[str] = Counter()

    def now(self) -> datetime:
        return self._now

    def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        if not self._scheduler.park_current(self._now + timedelta(seconds=seconds)):
            self.untracked_sleeps[threading.current_thread().name] += 1
            self._now += timedelta(seconds=seconds)

    def advance_to(self, moment: datetime) -> None:
        self._now = max(self._now, moment)


@dataclass(order=True)
class _Parked:
    wake: datetime
    seq: int
    task: Task = field(compare=False)


class Task:
    def __init__(self, name: str, body: Callable[[], None]) -> None:
        self.name = name
        self._body = body
        self._worker: _Worker | None = None  # the thread running it, from its first turn until it ends
        self.done = False
        self.error: BaseException | None = None
        self.cancelled = False

    def _run(self, scheduler: TaskScheduler) -> None:
        try:
            if not self.cancelled:
                self._body()
        except TaskCancelled:
            pass
        except BaseException as exc:
            self.error = exc
        finally:
            self.done = True


class TaskCancelled(BaseException):
    """Raised inside a parked task when the simulation drops it (host restart, shutdown)."""


def _held_lock() -> threading.Lock:
    """A lock already taken: the next ``acquire`` blocks until someone ``release``s it (a binary
    semaphore, much cheaper per hand-over than ``threading.Event``)."""
    lock = threading.Lock()
    lock.acquire()
    return lock


class _Worker:
    """A reusable thread that runs one task at a time. Starting a thread costs far more than
    handing one a task, and a simulation runs tens of thousands of invocations; which OS thread runs
    a task does not matter (each task runs in a fresh ``contextvars`` context, as on a new thread)."""

    def __init__(self, scheduler: TaskScheduler, number: int) -> None:
        self._scheduler = scheduler
        self.go = _held_lock()  # released by the scheduler: run (or resume) ``task``
        self.task: Task | None = None
        self.thread = threading.Thread(target=self._loop, name=f"localrun-task-{number}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        scheduler = self._scheduler
        while True:
            self.go.acquire()
            task = self.task
            if task is None:  # the scheduler closed
                return
            scheduler._local.task = task
            try:
                contextvars.Context().run(task._run, scheduler)
            finally:
                scheduler._local.task = None
                scheduler._yielded.release()


class TaskScheduler:
    def __init__(self, start: datetime | None = None) -> None:
        self.clock = SimClock(self, start or datetime(2026, 1, 1, tzinfo=UTC))
        self._ready: deque[Task] = deque()
        self._parked: list[_Parked] = []
        # parked until another task wakes them (``wait_current``), not by time; in the order they began to wait
        self._waiting: dict[Task, None] = {}
        self._seq = itertools.count()
        self._yielded = _held_lock()  # released by a task's thread when it parks or ends
        self._local = threading.local()
        self._idle: list[_Worker] = []
        self._workers = 0
        self.failures: list[tuple[str, BaseException]] = []
        self.completed = 0

    # --- used by tasks ------------------------------------------------------------------------

    def current(self) -> Task | None:
        task: Task | None = getattr(self._local, "task", None)
        return task

    def park_current(self, wake: datetime) -> bool:
        """Parks the calling task until ``wake``; False when not called from a task."""
        task = self.current()
        if task is None:
            return False
        worker = task._worker
        assert worker is not None
        heapq.heappush(self._parked, _Parked(wake, next(self._seq), task))
        self._yielded.release()
        worker.go.acquire()
        if task.cancelled:
            raise TaskCancelled(task.name)
        return True

    def wait_current(self, waiters: deque[Task]) -> None:
        """Parks the calling task in ``waiters`` until ``wake_first(waiters)`` (a pool's free slot, say)."""
        task = self.current()
        assert task is not None and task._worker is not None, "wait_current is for tasks"
        worker = task._worker
        waiters.append(task)
        self._waiting[task] = None
        self._yielded.release()
        worker.go.acquire()
        if task.cancelled:
            raise TaskCancelled(task.name)

    def wake_first(self, waiters: deque[Task]) -> bool:
        """Makes the first task of ``waiters`` (``wait_current``) ready again; False when none waits."""
        while waiters:
            task = waiters.popleft()
            if task in self._waiting:
                del self._waiting[task]
                self._ready.append(task)
                return True
        return False

    # --- used by the runner ---------------------------------------------------------------------

    def spawn(self, name: str, body: Callable[[], None]) -> Task:
        task = Task(name, body)
        self._ready.append(task)
        return task

    def has_ready(self) -> bool:
        self._wake_due()
        return bool(self._ready)

    def next_wake(self) -> datetime | None:
        return self._parked[0].wake if self._parked else None

    def busy(self) -> bool:
        """Anything started and not finished (running or parked)."""
        return bool(self._ready) or bool(self._parked) or bool(self._waiting)

    def threads(self) -> int:
        """How many task threads were started (they are reused, so this stays small)."""
        return self._workers

    def run_one(self) -> bool:
        """Runs the next ready task until it finishes or parks. False when none is ready."""
        self._wake_due()
        if not self._ready:
            return False
        task = self._ready.popleft()
        self._turn(task)
        if task.done:
            self.completed += 1
            if task.error is not None:
                self.failures.append((task.name, task.error))
        return True

    def cancel_all(self) -> int:
        """Drops every parked and ready task (what a host restart loses). Returns how many."""
        dropped = 0
        while self._parked:
            parked = heapq.heappop(self._parked)
            self._cancel(parked.task)
            dropped += 1
        while self._ready:
            self._cancel(self._ready.popleft())
            dropped += 1
        while self._waiting:
            task = next(iter(self._waiting))
            del self._waiting[task]
            self._cancel(task)
            dropped += 1
        return dropped

    def stop_idle_threads(self) -> None:
        """Ends the task threads no task is using (a parked task keeps its thread)."""
        while self._idle:
            worker = self._idle.pop()
            worker.task = None
            worker.go.release()
            worker.thread.join()

    def _turn(self, task: Task) -> None:
        """Gives ``task`` the baton and waits until it parks or ends."""
        worker = task._worker
        if worker is None:
            if self._idle:
                worker = self._idle.pop()
            else:
                self._workers += 1
                worker = _Worker(self, self._workers)
            worker.task = task
            task._worker = worker
        worker.go.release()
        self._yielded.acquire()
        if task.done:
            task._worker = None
            worker.task = None
            self._idle.append(worker)

    def _cancel(self, task: Task) -> None:
        task.cancelled = True
        if task._worker is None:  # never started
            task.done = True
            return
        self._turn(task)

    def _wake_due(self) -> None:
        now = self.clock.now()
        while self._parked and self._parked[0].wake <= now:
            self._ready.append(heapq.heappop(self._parked).task)
