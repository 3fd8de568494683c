"""Red team (rt-hostile), through the whole runner: a submission naming ``orderId`` twice is dead-lettered
``InvalidFields`` at its first delivery and writes nothing for either id; before, the app accepted it under the
last one (``json.loads`` keeps it), an order a reader keeping the first would never find
(``tests/contracts/test_duplicate_names.py``)."""

from __future__ import annotations

import json

import pytest

from tests.localrun.hostile_lines import submitted, workload_of
from tests.localrun.test_redteam_inject_raw import check, profile, run

pytestmark = pytest.mark.cosmos


def test_an_order_naming_its_id_twice_is_dead_lettered_and_writes_nothing():
    body = {**submitted(workload_of(3, 1, profile("happy-path")))["ord-00002"], "orderId": "first-1"}
    text = json.dumps(body)
    text = f'{text[:-1]}, "orderId": "second-1"}}'
    lines = [{"body": text, "message_id": "twice-1"}]
    result = run(lines, orders=3)
    assert check(result, lines) == []
    [dead] = [d for d in result.broker.dead_letters() if d.message_id == "twice-1"]
    assert (dead.reason, dead.delivery_count) == ("InvalidFields", 1)
    assert "'orderId' appears more than once" in str(dead.description)
    orders = {str(state.get("orderId")) for state in result.states}
    assert not orders & {"first-1", "second-1"}, orders
