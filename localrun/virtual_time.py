"""Virtual time for the local runner: many function invocations "run at once" while simulated time
skips ahead, deterministically.

Each invocation is a ``Task`` in its own thread, but only one task runs at any moment: the
scheduler hands it the baton and waits until it finishes or sleeps. ``SimClock.sleep`` inside a
task parks it until simulated time reaches its wake-up; when nothing is runnable the runner moves
the clock to the next moment something is due. Tasks are resumed in a fixed order (wake-up time,
then creation order), so a run is a pure function of its seed and inputs.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta


class SimClock:
    """The ``adapters.clock.Clock`` of a simulation. ``sleep`` from a task parks the task; from
    anywhere else it simply advances time."""

    def __init__(self, scheduler: TaskScheduler, start: datetime) -> None:
        self._scheduler = scheduler
        self._now = start

    def now(self) -> datetime:
        return self._now

    def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        if not self._scheduler.park_current(self._now + timedelta(seconds=seconds)):
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
        self._resume = threading.Event()
        self._thread: threading.Thread | None = None
        self.done = False
        self.error: BaseException | None = None
        self.cancelled = False

    def _run(self, scheduler: TaskScheduler) -> None:
        self._resume.wait()
        self._resume.clear()
        try:
            if not self.cancelled:
                self._body()
        except TaskCancelled:
            pass
        except BaseException as exc:
            self.error = exc
        finally:
            self.done = True
            scheduler._yielded.set()


class TaskCancelled(BaseException):
    """Raised inside a parked task when the simulation drops it (host restart, shutdown)."""


class TaskScheduler:
    def __init__(self, start: datetime | None = None) -> None:
        self.clock = SimClock(self, start or datetime(2026, 1, 1, tzinfo=UTC))
        self._ready: deque[Task] = deque()
        self._parked: list[_Parked] = []
        self._seq = itertools.count()
        self._yielded = threading.Event()
        self._local = threading.local()
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
        heapq.heappush(self._parked, _Parked(wake, next(self._seq), task))
        self._yielded.set()
        task._resume.wait()
        task._resume.clear()
        if task.cancelled:
            raise TaskCancelled(task.name)
        return True

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
        return bool(self._ready) or bool(self._parked)

    def run_one(self) -> bool:
        """Runs the next ready task until it finishes or parks. False when none is ready."""
        self._wake_due()
        if not self._ready:
            return False
        task = self._ready.popleft()
        if task._thread is None:
            task._thread = threading.Thread(target=self._enter, args=(task,), name=task.name, daemon=True)
            task._thread.start()
        self._yielded.clear()
        task._resume.set()
        self._yielded.wait()
        if task.done:
            task._thread.join()
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
        return dropped

    def _cancel(self, task: Task) -> None:
        task.cancelled = True
        if task._thread is None:
            task.done = True
            return
        self._yielded.clear()
        task._resume.set()
        self._yielded.wait()
        task._thread.join()

    def _enter(self, task: Task) -> None:
        self._local.task = task
        task._run(self)

    def _wake_due(self) -> None:
        now = self.clock.now()
        while self._parked and self._parked[0].wake <= now:
            self._ready.append(heapq.heappop(self._parked).task)
