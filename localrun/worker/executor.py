"""Where the worker's blocking work runs: in the simulated invocation that caused it.

The Functions worker runs every invocation on one event loop; a sync function (and every
``asyncio.to_thread`` / ``run_in_executor`` call of an async one) runs on a thread pool. In the local
runner each invocation is a task of the virtual-time scheduler (``localrun.virtual_time``), and only
a task's own thread may park on the simulated clock. So the worker's executor hands each piece of
blocking work back to the task that is waiting for the invocation: the task runs it in its own
thread (a ``clock.sleep`` there parks the task, as a sleeping pool thread would wait in Azure) and
the loop resumes the coroutine with its result. Work submitted outside any invocation runs inline. An async
invocation's blocking work first waits for a thread of the host's blocking pool (``LocalHost._run_blocking``).
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import queue
from collections.abc import Callable
from typing import Any

from localrun import hostile
from localrun.virtual_time import TaskCancelled

Job = Callable[[], None]

# The inbox of the task that started the invocation now running on the loop. Set in the task's
# context before the invocation is handed to the loop; asyncio copies it into the invocation's
# coroutine, and from there into everything the coroutine schedules.
current_inbox: contextvars.ContextVar[queue.SimpleQueue[Job | None] | None] = contextvars.ContextVar(
    "localrun_worker_inbox", default=None
)


class TaskExecutor(concurrent.futures.ThreadPoolExecutor):  # asyncio's set_default_executor wants this type
    """An executor that never starts a thread: ``submit`` queues the call in the current invocation's
    inbox (or runs it at once when there is none) and returns its future."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def job() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
                stall = hostile.stall_after_work.get()
                if stall is not None:  # the handler stalls past its message lock (localrun.hostile)
                    stall()
                future.set_result(result)
            except TaskCancelled:
                # The simulated host dropped this invocation (restart): like a killed process, it
                # never resumes. Leaving the future unresolved keeps its coroutine from running on.
                raise
            except BaseException as exc:
                future.set_exception(exc)

        inbox = current_inbox.get()
        if inbox is None:
            job()
        else:
            inbox.put(job)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        return None
