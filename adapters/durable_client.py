"""The app's calls to the Durable Functions client, each bounded.

The SDK's ``DurableOrchestrationClient`` sends every call over one ``aiohttp.ClientSession`` per worker process
(``azure.durable_functions.models.utils.http_utils``) with a 240 s total timeout, and closes that session as soon
as one request raises aiohttp's ``ClientError`` or times out (``_handle_request_error``): every other call in flight
on it fails then (``ServerDisconnectedError``, ``ClientConnectionError: Connector is closed.``), whatever the
extension does with it, and the next call opens a new session. It does not catch a cancellation. So a call the app
gives up first (``bounded``: ``asyncio.wait_for``, ``DURABLE_CALL_TIMEOUT``, well inside the 240 s) is cancelled,
its connection dropped, and the session and the worker's other calls live on: a stall of the extension (its
storage slow) fails the call it holds, not the starts, raises and reads of other orders made meanwhile. A connection
the host resets or refuses still closes the session (the host is going away: the other calls fail with it).

A call given up raises ``TimeoutError``; like any failed call, its outcome is unknown (a start or a raise may still
be carried out), and each caller handles it as it handles the SDK's other failures.

A timer phase that makes a call per record (the starter's starts, the supervisor's compensation starts and
terminations) runs them ``PARALLEL_CALLS`` at a time within a budget (``each_within``): no call starts that could
end past it, so a stalled extension holds the run about the budget, not records x bound (50 starts x 20 s; the
timers are singletons: every later run waited). What is left is logged (``DurablePhaseStopped``); each caller says
why leaving it is safe."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import Any

from observability.events import app_event
from settings import DURABLE_CALL_TIMEOUT

# A phase's calls in flight at once (as ``supervisor.backend_wait`` reads statuses).
PARALLEL_CALLS = 8


async def bounded[T](call: Awaitable[T]) -> T:
    """``call`` given up after ``DURABLE_CALL_TIMEOUT``, raising ``TimeoutError`` saying so; its outcome is then
    unknown."""
    limit = DURABLE_CALL_TIMEOUT.total_seconds()
    try:
        return await asyncio.wait_for(call, limit)
    except TimeoutError:
        raise TimeoutError(f"the Durable extension did not answer within {limit:g} s") from None


class BoundedClient:
    """The calls of ``azure.durable_functions.DurableOrchestrationClient`` the app's triggers make, each ``bounded``."""

    def __init__(self, client: Any) -> None:
        self._client = client

    async def start_new(
        self, orchestration_function_name: str, instance_id: str | None = None, client_input: Any | None = None
    ) -> str:
        started: str = await bounded(self._client.start_new(orchestration_function_name, instance_id, client_input))
        return started

    async def raise_event(self, instance_id: str, event_name: str, event_data: Any = None) -> None:
        await bounded(self._client.raise_event(instance_id, event_name, event_data))

    async def get_status(
        self, instance_id: str, show_history: bool = False, show_history_output: bool = False, show_input: bool = False
    ) -> Any:
        shown = {"show_history": show_history, "show_history_output": show_history_output, "show_input": show_input}
        return await bounded(self._client.get_status(instance_id, **{name: True for name, on in shown.items() if on}))

    async def terminate(self, instance_id: str, reason: str) -> None:
        await bounded(self._client.terminate(instance_id, reason))

    async def purge_instance_history_by(
        self, created_time_from: datetime, created_time_to: datetime, runtime_status: list[Any]
    ) -> Any:
        """The SDK writes the times with ``strftime`` and a ``Z``, whatever their zone: give them in UTC."""
        return await bounded(self._client.purge_instance_history_by(created_time_from, created_time_to, runtime_status))


def bounded_client(client: Any) -> BoundedClient:
    """The trigger's ``durableClient`` binding, each call bounded (see the module)."""
    return BoundedClient(client)


# The HTTP status codes of the extension's answers to the GET requests made inside ``answer_codes`` (per task).
_ANSWER_CODES: ContextVar[list[int] | None] = ContextVar("durable_answer_codes", default=None)


def _recording(get: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """The SDK's ``get_async_request`` (it returns ``[status code, body]``), noting each answer's status code in the
    ``answer_codes`` block the request is made in (none outside one)."""

    async def get_noting_the_code(url: str, *args: Any, **kwargs: Any) -> Any:
        answer = await get(url, *args, **kwargs)
        codes = _ANSWER_CODES.get()
        if codes is not None:
            codes.append(int(answer[0]))
        return answer

    get_noting_the_code.notes_codes = True  # type: ignore[attr-defined]
    return get_noting_the_code


@contextmanager
def answer_codes(client: Any) -> Iterator[list[int]]:
    """The HTTP status codes the Durable extension answered the GET requests of ``client`` (the SDK's
    ``DurableOrchestrationClient``, or a ``BoundedClient`` of it) made in this block, in this task: its
    ``get_status`` reads the code (``_get_async_request`` returns ``[status code, body]``, azure-functions-durable
    1.7.0, pinned) and drops it, taking a 200, 202, 400, 404 and 500 alike for a status. Its request function is
    wrapped once per client, to note the codes only inside such a block. Empty for a client that has no such
    function (a test's fake)."""
    sdk = client._client if isinstance(client, BoundedClient) else client
    get = getattr(sdk, "_get_async_request", None)
    if get is not None and not getattr(get, "notes_codes", False):
        sdk._get_async_request = _recording(get)
    codes: list[int] = []
    token = _ANSWER_CODES.set(codes)
    try:
        yield codes
    finally:
        _ANSWER_CODES.reset(token)


def claims_close(start_by: datetime, start_grace: timedelta) -> datetime:
    """When a batch of claims whose first claim must be started by ``start_by`` (its ``completeBy``: its write time
    plus ``start_grace``) takes no more claims: a wave of starts (``DURABLE_CALL_TIMEOUT``, at most half the grace)
    before it. A claim taken later could not be started within the first claim's grace; the record stays due (or
    Pending) for the next run."""
    return start_by - min(DURABLE_CALL_TIMEOUT, start_grace / 2)


def grace_left(start_bys: Iterable[datetime | None], now: datetime, start_grace: timedelta) -> timedelta:
    """What is left, at ``now``, of the start grace of the first of a batch of claims (the earliest of their
    ``completeBy``, ``start_bys``); ``start_grace`` when none says."""
    firsts = [start_by for start_by in start_bys if start_by is not None]
    return min(firsts) - now if firsts else start_grace


class CallBudget:
    """The time a phase has for its calls: ``fits`` says whether one more bounded call can end within it (a budget
    shorter than ``DURABLE_CALL_TIMEOUT`` is taken as that). ``each_within`` makes its first wave without asking."""

    def __init__(self, length: timedelta, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.length = max(length, DURABLE_CALL_TIMEOUT)
        self._monotonic = monotonic
        self._ends = monotonic() + self.length.total_seconds()

    def fits(self) -> bool:
        return self._monotonic() + DURABLE_CALL_TIMEOUT.total_seconds() <= self._ends


async def each_within[T](
    phase: str, items: Sequence[T], call: Callable[[T], Awaitable[bool]], budget: CallBudget
) -> list[bool]:
    """``call(item)`` for each item, ``PARALLEL_CALLS`` at a time, in their order: the first wave (the first
    ``PARALLEL_CALLS`` items) always, each after it only while ``budget`` fits one more call; ``call`` handles its
    own failures and returns False if it stopped for the budget itself (a second call that no longer fits).
    Returns, per item, whether its calls were made; logs ``DurablePhaseStopped`` when some were not.

    The first wave was asked ``budget.fits()`` too, which a budget of ``DURABLE_CALL_TIMEOUT`` or less (what is
    left of a start grace after a slow run: 40 s of recoveries and claims of the 60 s) never does once any time has
    passed since it was made: no round a supervisor run had claimed was started, each left to cost a failed round."""
    gate = asyncio.Semaphore(PARALLEL_CALLS)

    async def one(index: int, item: T) -> bool:
        async with gate:
            return (index < PARALLEL_CALLS or budget.fits()) and await call(item)

    made = list(await asyncio.gather(*(one(index, item) for index, item in enumerate(items))))
    if not all(made):
        skipped = made.count(False)
        app_event(
            "DurablePhaseStopped",
            f"{phase}: {skipped} of {len(items)} left, the run's {budget.length.total_seconds():g} s for them spent "
            "(the Durable extension is slow or stalled)",
            logging.WARNING,
            phase=phase,
            skipped=skipped,
            made=len(items) - skipped,
            budgetSeconds=budget.length.total_seconds(),
        )
    return made
