"""Red team (rt-hostile), through the whole runner: malformed bodies on ``orders`` are dead-lettered by the app with
the reason that names what is wrong, at once. A submission naming ``orderId`` twice is dead-lettered
``InvalidFields`` at its first delivery and writes nothing for either id; before, the app accepted it under the
last one (``json.loads`` keeps it), an order a reader keeping the first would never find
(``tests/contracts/test_duplicate_names.py``)."""

from __future__ import annotations

import json
import random

import pytest

from tests.localrun.hostile_lines import shapes, submitted, workload_of
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


@pytest.mark.parametrize("name", ["happy-path", "all-faults"])
def test_every_malformed_shape_is_dead_lettered_with_its_own_reason_at_its_first_delivery(name):
    """Each line of the ``shapes`` family (not JSON, empty, huge, deep, wrong types, a name given twice, a BOM,
    ``1e400``, an integer past int64, a lone surrogate, NUL, ``NaN``), all at once: dead-lettered by the app with
    the reason that names what is wrong, at its first delivery, never left to Service Bus's generic
    ``MaxDeliveryCountExceeded`` after failing every delivery. Under ``all-faults`` (store outages, send
    failures, host restarts) too: a malformed body is refused before any store or send is used."""
    lines = list(shapes(workload_of(4, 2, profile(name)), random.Random(2)))
    result = run(lines, orders=4, seed=2, name=name)
    assert check(result, lines) == []
    dead = {d.message_id: d for d in result.broker.dead_letters()}
    for line in lines:
        letter = dead.get(line["message_id"])
        assert letter is not None, line["message_id"]
        assert letter.reason in SPECIFIC and letter.description, (line["message_id"], letter.reason)
        assert letter.delivery_count == 1 or name == "all-faults", (line["message_id"], letter.delivery_count)


SPECIFIC = {"NotJson", "BodyTooLarge", "NestingTooDeep", "InvalidFields", "UnknownType", "UnsupportedSchemaVersion",
            "NotAnObject", "MissingType"}  # fmt: skip
