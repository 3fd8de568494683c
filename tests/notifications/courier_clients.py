"""Durable clients for the courier hand-over tests: the SDK's real client against the local extension
API over an engine that only records the starts, and one that cannot reach Durable at all."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from adapters.clock import ManualClock
from localrun.durable.engine import DurableEngine
from tests.localrun.real_durable_client import RealDurableClient


def _never_runs(context: Any) -> Any:
    raise AssertionError("the courier is only started here")


@contextmanager
def courier_client(orchestrator: str) -> Iterator[tuple[DurableEngine, RealDurableClient]]:
    """An engine that knows ``orchestrator`` (never run: the tests look at the starts) and the real
    Durable client bound to it."""
    engine = DurableEngine(
        {orchestrator: _never_runs}, lambda name, value: None, ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    )
    with RealDurableClient(engine) as real:
        yield engine, real


class Unreachable:
    """A Durable client whose every call fails as when the host's Durable endpoint is down."""

    async def start_new(self, name: str, instance_id: str | None = None, client_input: Any | None = None) -> str:
        raise Exception("Cannot connect to host localhost:7071")

    async def get_status(self, instance_id: str) -> Any:
        raise Exception("Cannot connect to host localhost:7071")
