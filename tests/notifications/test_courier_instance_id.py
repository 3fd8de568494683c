"""The courier's orchestration instance id (``OwedStatus.instance_id``) is one the Durable extension
starts as it is, whatever the order id, status and attempt. It is bounded to 100 characters; the
bound used to put ``#`` before its digest, which the extension refuses in an instance id
(``DurableClient.StartNewAsync``) and which, in the URL the Durable client builds, ends the path: the
extension would have started the id's head alone, shared by every long id with the same head."""

from __future__ import annotations

from collections.abc import Iterator
from typing import get_args

import pytest

from contracts.messages import StatusName
from domain.ids import MAX_ATTEMPT
from localrun.durable.engine import DurableEngine, instance_id_refusal
from notifications.status import OwedStatus, hand_to_courier
from orchestrators.names import DELIVER_STATUS
from tests.localrun.real_durable_client import RealDurableClient
from tests.notifications.courier_clients import courier_client

LONGEST_ORDER_ID = "o" * 64  # the longest id the contract accepts
LONGEST_STATUS = max(get_args(StatusName), key=len)


@pytest.fixture
def client() -> Iterator[tuple[DurableEngine, RealDurableClient]]:
    with courier_client(DELIVER_STATUS) as pair:
        yield pair


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
