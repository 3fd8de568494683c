"""Handing an owed status to its courier (``notifications.status.hand_to_courier``) through the real
Durable client. A second hand-over of the same status (a redelivered message owing it again) finds its
courier still delivering: that is the hand-over done, logged ``StatusCourierRunning``, not the
``StatusNotHandedOver`` WARNING of a status Durable cannot take (its message is then handled again later:
``submission/courier_retry.py``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Generator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from azure.durable_functions.models.OrchestrationRuntimeStatus import OrchestrationRuntimeStatus

from adapters.clock import ManualClock
from localrun.durable.engine import DurableEngine
from localrun.durable.extension_api.handlers import json_answer
from notifications.status import OwedStatus, hand_to_courier
from orchestrators.names import DELIVER_STATUS
from tests.localrun.real_durable_client import RealDurableClient
from tests.notifications.courier_clients import Unreachable, courier_client

OWED = OwedStatus("ord-1", "Failed", 2, "status-queue", reason="payment declined")


@pytest.fixture
def client() -> Iterator[tuple[DurableEngine, RealDurableClient]]:
    with courier_client(DELIVER_STATUS) as pair:
        yield pair


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


def test_a_status_durable_does_not_take_is_returned_for_its_message_to_be_handled_again(caplog) -> None:
    caplog.set_level(logging.INFO)
    assert asyncio.run(hand_to_courier(Unreachable(), [OWED])) == (OWED,)  # never raised into the trigger
    assert _events(caplog) == [("WARNING", "StatusNotHandedOver")]  # before: ("ERROR", "StatusSendFailed"), lost


def _sent(context: Any) -> Generator[Any, Any, str]:
    """A courier that delivered its status and completed."""
    return "sent"
    yield  # a generator: an orchestrator function


def test_a_hand_over_whose_start_fails_after_the_courier_completed_is_no_lost_status(caplog) -> None:
    """Found by the red team on the Durable client (session 45): a start that fails (its answer lost after it
    landed, or the extension answering 500) beside a courier of the same status that has completed was logged
    ``StatusSendFailed`` at ERROR, "status lost", though the courier had sent it (a false alarm)."""
    engine = DurableEngine(
        {DELIVER_STATUS: _sent}, lambda name, value: None, ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    )
    with RealDurableClient(engine) as real:
        real.run(hand_to_courier(real.client, [OWED]))
        engine.run_until_idle()
        [instance] = engine.instances()
        assert instance.status is OrchestrationRuntimeStatus.Completed
        caplog.set_level(logging.INFO)
        real.api.before_answer = lambda method, path: (
            json_answer(500, {"Message": "storage timeout"}) if method == "POST" else None
        )
        assert real.run(hand_to_courier(real.client, [OWED])) == ()  # a redelivery owing the same status again
    assert _events(caplog) == [("INFO", "StatusCourierDone")]  # before: ("ERROR", "StatusSendFailed")
