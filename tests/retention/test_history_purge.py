"""The hourly purge of finished Durable instances (``retention.purge``), through the real Durable Python SDK's
``purge_instance_history_by`` and the runner's emulated extension HTTP API (its purge endpoints as
``HttpApiHandler`` answers them), bounded as every Durable call of the app (``adapters.durable_client``)."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import azure.durable_functions as df
import pytest
from azure.durable_functions import OrchestrationRuntimeStatus
from azure.durable_functions.models.utils import http_utils

from adapters import durable_client
from adapters.clock import ManualClock
from adapters.durable_client import bounded_client
from localrun.durable.engine import DurableEngine
from localrun.durable.http_api import DurableExtensionApi
from localrun.durable.registry import registered_orchestrators
from retention.purge import FLOOR, RECENT_WINDOWS, RUN_BUDGET, WINDOW, purge_history, windows
from settings import DURABLE_CALL_TIMEOUT
from tests.localrun.durable_samples import FUNCTIONS, REPLY_EVENT

REPO = Path(__file__).resolve().parents[2]

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
SAMPLE = "reply_or_deadline_orchestrator"
RETENTION = timedelta(days=30)


def activities(name: str, value: Any) -> Any:
    return "prepared" if name == "prepare" else {"done": value}


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    http_utils._client_session = None  # a session of another module's loop: start clean
    loop = asyncio.new_event_loop()
    yield loop
    loop.run_until_complete(http_utils._close_session())
    loop.close()


@pytest.fixture
def backend(loop: asyncio.AbstractEventLoop) -> Iterator[tuple[DurableEngine, ManualClock, Any]]:
    clock = ManualClock(T0)
    engine = DurableEngine(registered_orchestrators(FUNCTIONS), activities, clock)
    api = DurableExtensionApi(engine)
    api.start()
    yield engine, clock, df.DurableOrchestrationClient(api.client_binding_json())
    loop.run_until_complete(http_utils._close_session())
    api.close()


def _start(engine: DurableEngine, instance: str) -> None:
    assert engine.start(SAMPLE, instance, '"{}"').status == 202
    engine.run_until_idle()


def test_finished_old_instances_are_purged_running_pending_and_recent_ones_kept(backend, loop, caplog) -> None:
    engine, clock, client = backend
    _start(engine, "old-completed:1")
    engine.raise_event("old-completed:1", REPLY_EVENT, '{"outcome": "ok"}')
    _start(engine, "old-failed:1")
    engine.instance("old-failed:1").status = OrchestrationRuntimeStatus.Failed  # type: ignore[union-attr]
    _start(engine, "old-terminated:1")
    engine.terminate("old-terminated:1", "expired")
    _start(engine, "old-running:1")
    assert engine.start(SAMPLE, "old-pending:1", '"{}"').status == 202
    clock.advance(timedelta(days=31))
    _start(engine, "recent-completed:1")
    engine.raise_event("recent-completed:1", REPLY_EVENT, '{"outcome": "ok"}')
    engine.run_until_idle()
    # still in the backend's hands after 31 days: an attempt paused for review (Running), a start not delivered
    engine.instance("old-running:1").status = OrchestrationRuntimeStatus.Running  # type: ignore[union-attr]
    engine.instance("old-pending:1").status = OrchestrationRuntimeStatus.Pending  # type: ignore[union-attr]
    assert engine.instance("recent-completed:1").status is OrchestrationRuntimeStatus.Completed  # type: ignore[union-attr]

    with caplog.at_level(logging.INFO):
        report = loop.run_until_complete(purge_history(bounded_client(client), clock.now(), RETENTION))

    assert report.purged == 3 and report.failed is None, report
    kept = {instance.instance_id for instance in engine.instances()}
    assert kept == {"old-running:1", "old-pending:1", "recent-completed:1"}
    assert report.windows == len(windows(clock.now() - RETENTION))
    [event] = [r for r in caplog.records if getattr(r, "event", None) == "HistoryPurged"]
    assert event.purged == 3 and event.levelno == logging.INFO  # type: ignore[attr-defined]


def test_a_retention_of_zero_purges_nothing(backend, loop) -> None:
    engine, clock, client = backend
    _start(engine, "done:1")
    engine.raise_event("done:1", REPLY_EVENT, '{"outcome": "ok"}')
    engine.run_until_idle()
    clock.advance(timedelta(days=3650))
    report = loop.run_until_complete(purge_history(bounded_client(client), clock.now(), timedelta(0)))
    assert report.cutoff is None and report.windows == 0
    assert engine.instance("done:1") is not None


def test_the_windows_are_bounded_newest_first_and_cover_everything_older() -> None:
    cutoff = datetime(2026, 1, 1, tzinfo=UTC)
    found = windows(cutoff)
    assert found[0] == (cutoff - WINDOW, cutoff)
    assert [end - start for start, end in found[:RECENT_WINDOWS]] == [WINDOW] * RECENT_WINDOWS
    assert found[-1] == (FLOOR, cutoff - RECENT_WINDOWS * WINDOW)
    assert all(older[1] == newer[0] for newer, older in itertools.pairwise(found))


class _Stalled:
    """An extension that never answers a purge (its storage stalled)."""

    calls = 0

    async def purge_instance_history_by(self, *args: Any) -> Any:
        self.calls += 1
        await asyncio.sleep(3600)


def test_a_stalled_backend_ends_the_run_at_the_calls_bound(monkeypatch, caplog) -> None:
    monkeypatch.setattr(durable_client, "DURABLE_CALL_TIMEOUT", timedelta(seconds=0.05))
    stalled = _Stalled()
    with caplog.at_level(logging.INFO):
        report = asyncio.run(purge_history(bounded_client(stalled), T0, RETENTION))
    assert stalled.calls == 1 and report.windows == 0  # given up, and no further call piled on it
    assert report.failed is not None and "did not answer" in report.failed
    [event] = [r for r in caplog.records if getattr(r, "event", None) == "HistoryPurged"]
    assert event.levelno == logging.WARNING


class _Slow:
    """An extension that answers each purge after ``seconds`` of a fake monotonic clock."""

    def __init__(self, clock: list[float], seconds: float) -> None:
        self.clock, self.seconds, self.calls = clock, seconds, 0

    async def purge_instance_history_by(self, *args: Any) -> Any:
        self.calls += 1
        self.clock[0] += self.seconds
        return type("Result", (), {"instances_deleted": 10})()


def test_a_slow_backend_ends_the_run_within_its_budget_far_inside_function_timeout() -> None:
    now = [0.0]
    slow = _Slow(now, seconds=DURABLE_CALL_TIMEOUT.total_seconds())  # every call takes its whole bound
    report = asyncio.run(purge_history(slow, T0, RETENTION, monotonic=lambda: now[0]))
    assert now[0] <= RUN_BUDGET.total_seconds()  # the run's whole time, its last call included
    assert slow.calls == report.windows < len(windows(T0 - RETENTION)) and report.purged == 10 * slow.calls
    assert report.failed is not None and "budget" in report.failed
    hours, minutes, seconds = json.loads((REPO / "host.json").read_text())["functionTimeout"].split(":")
    assert timedelta(hours=int(hours), minutes=int(minutes), seconds=int(seconds)) > RUN_BUDGET
