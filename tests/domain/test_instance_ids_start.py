"""Every orchestration instance id the app starts is one the extension takes (``DurableClient.StartNewAsync``:
no leading ``@``; no ``/``, ``\\``, ``#``, ``?`` or control character; at most 256 UTF-16 units;
``localrun.durable.engine.instance_id_refusal``) and goes into the start URL as it is: an attempt
(``<orderId>:<attempt>``), a compensation round (``<orderId>:compensate:<round>``) and a status courier
(``status:...``, bounded), for the longest order ids and numbers there can be. An order id outside
``ORDER_ID_PATTERN`` (unicode, ``:``, ``#``, ``/``, ``@``, 65 characters) never gets that far: intake
refuses it."""

from __future__ import annotations

from typing import get_args

import pytest

from contracts.messages import StatusName
from domain.compensation import compensation_instance_id
from domain.ids import MAX_ATTEMPT, instance_id, is_valid_order_id, url_instance_id
from localrun.durable.engine import instance_id_refusal
from notifications.status import OwedStatus
from supervisor.outage import WAITING_VARIANT

LONGEST = ["A" * 64, "z" + "-_" * 31 + "9", "0" + "_" * 63]
HOSTILE = ["ordér-1", "o:1", "o#1", "o/1", "@o1", "o?1", "o 1", "o.1", "-o1", "A" * 65, "o1\n", ""]


def _started_ids(order_id: str) -> list[str]:
    ids = [instance_id(order_id, MAX_ATTEMPT), compensation_instance_id(order_id, MAX_ATTEMPT)]
    for status in get_args(StatusName):
        for variant in (None, WAITING_VARIANT, str(2**63 - 1)):
            ids.append(OwedStatus(order_id, status, MAX_ATTEMPT, "client-statuses", variant=variant).instance_id)
    return ids


@pytest.mark.parametrize("order_id", LONGEST)
def test_every_instance_id_of_the_longest_orders_is_started_as_it_is(order_id: str) -> None:
    assert is_valid_order_id(order_id)
    for started in _started_ids(order_id):
        assert instance_id_refusal(started) is None, started
        assert url_instance_id(started) == started  # nothing to escape in the start URL


@pytest.mark.parametrize("order_id", HOSTILE)
def test_a_hostile_order_id_is_refused_before_any_instance_is_formed(order_id: str) -> None:
    assert not is_valid_order_id(order_id)
