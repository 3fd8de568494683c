"""Handing an owed status to its courier (``notifications.status.hand_to_courier``) through the real
Durable client. A second hand-over of the same status (a redelivered message owing it again) finds its
courier still delivering: that is the hand-over done, logged ``StatusCourierRunning``, not the
``StatusSendFailed`` ERROR kept for a status that is lost because Durable cannot be reached."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from azure.durable_functions.models.OrchestrationRuntimeStatus import OrchestrationRuntimeStatus

from adapters.clock import ManualClock
from localrun.durable.engine import DurableEngine
from notifications.status import OwedStatus, hand_to_courier
from orchestrators.names import DELIVER_STATUS
from tests.localrun.real_durable_client import RealDurableClient

OWED = OwedStatus("ord-1", "Failed", 2, "status-queue", reason="payment declined")


def _never_runs(context: Any) -> Any:
    raise AssertionError("the courier is only started here")


@pytest.fixture
def client() -> Iterator[tuple[DurableEngine, RealDurableClient]]:
    engine = DurableEngine(
        {DELIVER_STATUS: _never_runs}, lambda name, value: None, ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    )
    real = RealDurableClient(engine)
    yield engine, real
    real.close()


def _events(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, str(getattr(r, "event", ""))) for r in caplog.records if getattr(r, "event", None)]


def test_a_second_hand_over_finds_the_courier_delivering_and_logs_no_error(client, caplog) -> None:
    engine, real = client
    caplog.set_level(logging.INFO)
    real.run(hand_to_courier(real.client, [OWED]))
    assert _events(caplog) == []
    real.run(hand_to_courier(real.client, [OWED]))  # a redelivery owing the same status again
    assert _events(caplog) == [("INFO", "StatusCourierRunning")]
    [instance] = engine.instances()
    assert instance.instance_id == OWED.instance_id and instance.status is OrchestrationRuntimeStatus.Pending


class Unreachable:
    async def start_new(self, name: str, instance_id: str | None = None, client_input: Any | None = None) -> str:
        raise Exception("Cannot connect to host localhost:7071")

    async def get_status(self, instance_id: str) -> Any:
        raise Exception("Cannot connect to host localhost:7071")


def test_a_status_durable_does_not_take_is_logged_lost(caplog) -> None:
    caplog.set_level(logging.INFO)
    asyncio.run(hand_to_courier(Unreachable(), [OWED]))  # never raised into the trigger
    assert _events(caplog) == [("ERROR", "StatusSendFailed")]
