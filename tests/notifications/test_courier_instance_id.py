"""The courier's orchestration instance id (``OwedStatus.instance_id``) is one the Durable extension
starts as it is, whatever the order id, status and attempt. It is bounded to 100 characters; the
bound used to put ``#`` before its digest, which the extension refuses in an instance id
(``DurableClient.StartNewAsync``) and which, in the URL the Durable client builds, ends the path: the
extension would have started the id's head alone, shared by every long id with the same head."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, get_args

import pytest

from adapters.clock import ManualClock
from contracts.messages import StatusName
from domain.ids import MAX_ATTEMPT
from localrun.durable.engine import DurableEngine, instance_id_refusal
from notifications.status import OwedStatus, hand_to_courier
from orchestrators.names import DELIVER_STATUS
from tests.localrun.real_durable_client import RealDurableClient

LONGEST_ORDER_ID = "o" * 64  # the longest id the contract accepts
LONGEST_STATUS = max(get_args(StatusName), key=len)


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


def test_the_longest_courier_id_is_bounded_and_the_extension_accepts_it() -> None:
    owed = OwedStatus(LONGEST_ORDER_ID, LONGEST_STATUS, MAX_ATTEMPT, "status-queue")
    assert len(f"status:{LONGEST_ORDER_ID}:{LONGEST_STATUS}:{MAX_ATTEMPT}") > 100  # so it is bounded
    assert len(owed.instance_id) == 100
    assert instance_id_refusal(owed.instance_id) is None
    other = OwedStatus(LONGEST_ORDER_ID, LONGEST_STATUS, MAX_ATTEMPT - 1, "status-queue")
    assert other.instance_id != owed.instance_id


def test_a_bounded_courier_id_is_started_under_that_very_id(client) -> None:
    engine, real = client
    owed = OwedStatus(LONGEST_ORDER_ID, LONGEST_STATUS, MAX_ATTEMPT, "status-queue")

    real.run(hand_to_courier(real.client, [owed]))

    assert [i.instance_id for i in engine.instances()] == [owed.instance_id]
