"""Malformed and hostile bodies for the ``orders`` queue, with the dead-letter reason each must get."""

from __future__ import annotations

import json
from typing import Any


def order(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "OrderSubmitted",
        "schemaVersion": 1,
        "orderId": "ord-1",
        "customerId": "cust-1",
        "lines": [{"sku": "SKU-1", "quantity": 2, "unitPriceCents": 1250}],
        "currency": "EUR",
        "shipTo": "1 Main St",
        "replyTo": "client-statuses",
    }
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not _DROP}


_DROP = object()


def without(field: str) -> dict[str, Any]:
    return order(**{field: _DROP})


# (case name, body, expected dead-letter reason, a word the description must contain)
MALFORMED: list[tuple[str, bytes, str, str]] = [
    ("empty body", b"", "NotJson", "not JSON"),
    ("not json", b"hello", "NotJson", "not JSON"),
    ("truncated json", b'{"type": "OrderSubmitted", ', "NotJson", "line 1"),
    ("invalid utf-8", b"\xff\xfe\x00", "NotJson", "UTF-8"),
    ("json array", b"[1, 2]", "NotAnObject", "list"),
    ("json string", b'"OrderSubmitted"', "NotAnObject", "str"),
    ("json null", b"null", "NotAnObject", "NoneType"),
    ("no type", json.dumps(without("type")).encode(), "MissingType", "type"),
    ("type not string", json.dumps(order(type=7)).encode(), "MissingType", "type"),
    ("unknown type", json.dumps(order(type="OrderShipped")).encode(), "UnknownType", "OrderShipped"),
    ("no schemaVersion", json.dumps(without("schemaVersion")).encode(), "InvalidFields", "schemaVersion"),
    ("schemaVersion as string", json.dumps(order(schemaVersion="1")).encode(), "InvalidFields", "schemaVersion"),
    ("future schemaVersion", json.dumps(order(schemaVersion=2)).encode(), "UnsupportedSchemaVersion", "2"),
    ("no orderId", json.dumps(without("orderId")).encode(), "InvalidFields", "orderId"),
    ("orderId with slash", json.dumps(order(orderId="a/b")).encode(), "InvalidFields", "orderId"),
    ("orderId too long", json.dumps(order(orderId="x" * 65)).encode(), "InvalidFields", "orderId"),
    ("no lines", json.dumps(order(lines=[])).encode(), "InvalidFields", "lines"),
    (
        "negative quantity",
        json.dumps(order(lines=[{"sku": "A", "quantity": -1, "unitPriceCents": 1}])).encode(),
        "InvalidFields",
        "lines.0.quantity",
    ),
    (
        "quantity as string",
        json.dumps(order(lines=[{"sku": "A", "quantity": "2", "unitPriceCents": 1}])).encode(),
        "InvalidFields",
        "quantity",
    ),
    (
        "price as float",
        json.dumps(order(lines=[{"sku": "A", "quantity": 1, "unitPriceCents": 9.99}])).encode(),
        "InvalidFields",
        "unitPriceCents",
    ),
    ("bad currency", json.dumps(order(currency="euro")).encode(), "InvalidFields", "currency"),
    ("unknown field", json.dumps(order(discountCode="FREE")).encode(), "InvalidFields", "discountCode"),
    ("replyTo with spaces", json.dumps(order(replyTo="my queue")).encode(), "InvalidFields", "replyTo"),
    ("html injection in shipTo", json.dumps(order(shipTo="")).encode(), "InvalidFields", "shipTo"),
    ("body too large", json.dumps(order(shipTo="x" * 70_000)).encode(), "BodyTooLarge", "limit"),
    ("lines not a list", json.dumps(order(lines={"sku": "A"})).encode(), "InvalidFields", "lines"),
    # hostile shapes: each must be a dead-letter reason, never a crash of the function
    ("5,000 nested arrays", b"[" * 5000 + b"]" * 5000, "NestingTooDeep", "5000 levels"),
    ("30,000 nested arrays", b"[" * 30_000 + b"]" * 30_000, "NestingTooDeep", "30000 levels"),
    (
        "nested objects in a field",
        json.dumps(order(lines=[{"sku": "A"}]))
        .replace('{"sku": "A"}', '{"sku": ' + '{"a": ' * 40 + "1" + "}" * 40 + "}")
        .encode(),
        "NestingTooDeep",
        "limit",
    ),
    ("replyTo too long", json.dumps(order(replyTo="q" * 261)).encode(), "InvalidFields", "replyTo"),
    ("orderId of 200 characters", json.dumps(order(orderId="o" * 200)).encode(), "InvalidFields", "orderId"),
    (
        "notificationId too long",
        json.dumps(
            {
                "type": "PaymentNotification",
                "schemaVersion": 1,
                "notificationId": "n" * 201,
                "orderId": "ord-1",
                "amountCents": 100,
                "currency": "EUR",
                "providerReference": "psp-1",
            }
        ).encode(),
        "InvalidFields",
        "notificationId",
    ),
    ("body of 200 KB", json.dumps(order(shipTo="x" * 200_000)).encode(), "BodyTooLarge", "limit"),
    # numbers no contract can hold: the field is named, never a ValueError out of json.loads
    (
        "unitPriceCents of 4,400 digits",
        json.dumps(order()).replace('"unitPriceCents": 1250', '"unitPriceCents": ' + "9" * 4400).encode(),
        "InvalidFields",
        "lines.0.unitPriceCents",
    ),
    (
        "integer just past int64 in an unknown field",
        json.dumps(order()).replace('"shipTo"', f'"note": {2**63}, "shipTo"').encode(),
        "InvalidFields",
        "note",
    ),
    (
        "negative integer just past int64",
        json.dumps(order()).replace('"unitPriceCents": 1250', f'"unitPriceCents": {-(2**63) - 1}').encode(),
        "InvalidFields",
        "lines.0.unitPriceCents",
    ),
    (
        "float literal that overflows to infinity",
        json.dumps(order()).replace('"unitPriceCents": 1250', '"unitPriceCents": 1e999').encode(),
        "InvalidFields",
        "lines.0.unitPriceCents",
    ),
    ("NaN literal", json.dumps(order()).replace('"shipTo"', '"x": NaN, "shipTo"').encode(), "NotJson", "NaN"),
    (
        "-Infinity literal",
        json.dumps(order()).replace('"shipTo"', '"x": -Infinity, "shipTo"').encode(),
        "NotJson",
        "Infinity",
    ),
    (
        "amountCents over the largest order total",
        json.dumps(
            {
                "type": "PaymentNotification",
                "schemaVersion": 1,
                "notificationId": "n-1",
                "orderId": "ord-1",
                "amountCents": 10**12 + 1,
                "currency": "EUR",
                "providerReference": "psp-1",
            }
        ).encode(),
        "InvalidFields",
        "amountCents",
    ),
    (
        "RetryDeferred sequenceNumber past int64",
        json.dumps(
            {
                "type": "RetryDeferred",
                "schemaVersion": 1,
                "sequenceNumber": 2**63,
                "orderId": "ord-1",
                "messageId": "m-1",
                "round": 1,
            }
        ).encode(),
        "InvalidFields",
        "sequenceNumber",
    ),
    # statuses never go to the app's own queues (Service Bus names are case-insensitive)
    ("replyTo the orders queue", json.dumps(order(replyTo="orders")).encode(), "InvalidFields", "replyTo"),
    ("replyTo Operator-Alerts", json.dumps(order(replyTo="Operator-Alerts")).encode(), "InvalidFields", "replyTo"),
    ("replyTo a request queue", json.dumps(order(replyTo="payment-requests")).encode(), "InvalidFields", "replyTo"),
]
