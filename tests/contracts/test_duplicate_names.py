"""A body that names a field twice in one object (``{"orderId": "a", ..., "orderId": "b"}``) is refused
``InvalidFields`` naming the field, at any depth. ``json.loads`` keeps the last value; other readers keep the first
or refuse the body, so a gateway, an audit log or a support tool reading the same message would see another order
(or, with two ``type``s, another kind of message) than the app acted on.

Red team (rt-hostile): before, ``contracts.parsing.parse`` read such a body as ``json.loads`` does, the last value
winning: an ``OrderSubmitted`` naming two order ids was accepted under the second, one naming ``type`` twice as
whichever came last."""

from __future__ import annotations

import json

import pytest

from contracts.messages import ORDERS_QUEUE_TYPES, AgentReply, OrderSubmitted
from contracts.parsing import InvalidMessage, parse
from tests.contracts.test_hostile_fields import _reply

ORDER = {
    "type": "OrderSubmitted",
    "schemaVersion": 1,
    "orderId": "o-1",
    "customerId": "c-1",
    "lines": [{"sku": "A-1", "quantity": 1, "unitPriceCents": 100}],
    "currency": "EUR",
    "shipTo": "1 Main St",
}


def _text(extra: str, where: int = -1) -> str:
    """``ORDER`` as JSON text with ``extra`` (``"name": value``) written into its top object."""
    text = json.dumps(ORDER)
    return f"{text[:where]}, {extra}{text[where:]}" if where == -1 else f"{{{extra}, {text[1:]}"


def _refused(body: str) -> InvalidMessage:
    with pytest.raises(InvalidMessage) as caught:
        parse(body, ORDERS_QUEUE_TYPES)
    return caught.value


def test_a_valid_order_still_parses():
    parsed = parse(json.dumps(ORDER), ORDERS_QUEUE_TYPES)
    assert isinstance(parsed, OrderSubmitted) and parsed.order_id == "o-1"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (_text('"orderId": "o-2"'), "orderId"),  # the last one, which json.loads kept
        (_text('"orderId": "o-1"'), "orderId"),  # even the same value twice
        (_text('"type": "CancelOrder"', where=0), "type"),  # read as the OrderSubmitted that came last
        (_text('"prepaid": false, "prepaid": true'), "prepaid"),
        (json.dumps(ORDER).replace('"quantity": 1', '"quantity": 1, "quantity": 1000'), "quantity"),
        (json.dumps(ORDER).replace('"schemaVersion": 1', '"schemaVersion": 1, "schemaVersion": 2'), "schemaVersion"),
    ],
)
def test_a_field_named_twice_is_invalid_fields_naming_it(body, field):
    refused = _refused(body)
    assert refused.reason == "InvalidFields"
    assert f"'{field}' appears more than once" in refused.description


def test_a_name_repeated_inside_a_free_form_value_is_refused_too():
    reply = _reply(result={"chargeId": "ch-1"})
    body = json.dumps(reply).replace('"chargeId": "ch-1"', '"chargeId": "ch-1", "chargeId": "ch-2"')
    with pytest.raises(InvalidMessage) as caught:
        parse(body, {"AgentReply": AgentReply})
    assert caught.value.reason == "InvalidFields"
    assert "'chargeId'" in caught.value.description


def test_a_long_or_odd_repeated_name_is_shown_short_and_carriable():
    name = "\u0000x" * 200
    refused = _refused(_text(f'"{json.dumps(name)[1:-1]}": 1, "{json.dumps(name)[1:-1]}": 2'))
    assert refused.reason == "InvalidFields"
    assert len(refused.description) < 200
    assert "\u0000" not in refused.description
