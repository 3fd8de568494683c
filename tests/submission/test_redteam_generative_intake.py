"""Red team: every message type of the ``orders`` queue, mutated field by field (fixed families and a seeded
``random`` mix), through the registered ``submit_order`` trigger against the Cosmos protocol server. The rule:
each message is settled on its first delivery (completed, deferred or dead-lettered with a carriable reason and
description), no exception escapes the trigger, a refused message writes nothing, and an accepted order reads
back from the store as the very contract that was accepted (a redelivery of it is an identical duplicate)."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator
from typing import Any

import pytest

from contracts.messages import OrderSubmitted
from contracts.parsing import parse
from domain.ids import is_valid_order_id
from domain.text import carriable
from tests.fakes import FakeReceivedMessage, RecordingActions, RecordingClient
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos

# Values of every JSON type and of the edges of each: put in place of any field.
WRONG_TYPES: list[Any] = [None, True, False, 0, -1, 1.5, [], {}, "", [1], {"a": 1}]
NUMBERS: list[Any] = [0, -1, 1, 2**31, 2**53, 2**53 + 1, 2**63 - 1, 2**63, -(2**63) - 1, 1.0, -0.0, 1e308, "1"]
TEXTS: list[str] = [
    "x" * 200,
    "x" * 201,
    "\u00e9" * 200,  # 200 code points, 400 UTF-8 bytes
    "\U0001f600" * 200,  # 200 code points, 800 UTF-8 bytes, 400 UTF-16 units
    "\U0001f600" * 101,
    "\udc80",  # a lone surrogate (JSON escapes it)
    "a\ud83d",  # a high surrogate at the end
    "\ud83d\ude00",  # an escaped surrogate pair: one emoji, fine
    "\u202eevil",
    "\u2066x\u2069",
    "a\x00b",
    "\x1b[2J",
    "a\u0085b",
    "a\u2028b",
    "a\nb",
    "a\tb",
    " ",
    "\u200b",
    "\ufeff",
    "\u3164",
    "\u200f\u05e9\u05dc\u05d5\u05dd",  # RTL mark and Hebrew
    "e\u0301" * 50,  # combining marks
    "\u0301",  # a lone combining mark
    "\ufffe\uffff",  # noncharacters
    "\U0010ffff",
    "a/b",
    "a\\b",
    "a?b",
    "a#b",
    "a%2Fb",
    "a b",
    "..",
    "<script>",
    "'; DROP TABLE x; --",
    "${jndi:ldap://x}",
]
IDS: list[str] = [
    "ORD-1",
    "ord_1",
    "a" * 64,
    "a" * 65,
    "-a",
    "_a",
    "a.b",
    "a:b",
    "a:1",
    "a/b",
    "a\\b",
    "a?b",
    "a#b",
    "a%b",
    "a b",
    "a\n",
    "\uff41",  # fullwidth a
    "\u0131",  # dotless i (uppercases to I)
    "K",  # KELVIN SIGN (lowercases to k)
    "o\u0308",  # o + combining diaeresis
    "\u00f6",
]
SCHEMA_VERSIONS: list[Any] = [0, -1, 2, 1.0, True, 2**64, "1", None, [1]]


def _payment(**overrides: Any) -> dict[str, Any]:
    body = {
        "type": "PaymentNotification",
        "schemaVersion": 1,
        "notificationId": "n-1",
        "orderId": "ord-1",
        "amountCents": 2500,
        "currency": "EUR",
        "providerReference": "psp-1",
    }
    body.update(overrides)
    return body


def _cancel(**overrides: Any) -> dict[str, Any]:
    body = {"type": "CancelOrder", "schemaVersion": 1, "orderId": "ord-1", "reason": "changed my mind"}
    body.update(overrides)
    return body


def _retry(**overrides: Any) -> dict[str, Any]:
    body = {
        "type": "RetryDeferred",
        "schemaVersion": 1,
        "sequenceNumber": 7,
        "orderId": "ord-1",
        "messageId": "m-1",
        "round": 1,
    }
    body.update(overrides)
    return body


def _line(**overrides: Any) -> dict[str, Any]:
    line = {"sku": "SKU-1", "quantity": 2, "unitPriceCents": 1250}
    line.update(overrides)
    return line


BUILDERS = {"OrderSubmitted": order, "PaymentNotification": _payment, "CancelOrder": _cancel, "RetryDeferred": _retry}


def _values_for(field: str) -> list[Any]:
    if field == "orderId":
        return [*WRONG_TYPES, *IDS]
    if field == "schemaVersion":
        return SCHEMA_VERSIONS
    if field in ("amountCents", "sequenceNumber", "round"):
        return [*WRONG_TYPES, *NUMBERS]
    return [*WRONG_TYPES, *TEXTS]


def _cases() -> Iterator[tuple[str, str, Any]]:
    """(kind, name, body: a dict, or the raw text of one) for every family, then a seeded random mix."""
    for kind, build in BUILDERS.items():
        base = build()
        for field in base:
            if field == "type":
                continue
            yield kind, f"{kind} without {field}", {k: v for k, v in base.items() if k != field}
            for n, value in enumerate(_values_for(field)):
                yield kind, f"{kind}.{field}#{n}", {**base, field: value}
        yield kind, f"{kind} with an unknown field", {**base, "extra": 1}
        yield kind, f"{kind} with a null unknown field", {**base, "Type": None}
        text = json.dumps(base)
        # duplicate keys: the last one wins in json.loads, everywhere the app reads the body
        yield kind, f"{kind} duplicate orderId", text.replace('"orderId"', '"orderId": "zz-dup", "orderId"', 1)
        yield kind, f"{kind} duplicate type", text.replace('"type"', '"type": "Nope", "type"', 1)
        yield kind, f"{kind} NaN orderId", text.replace('"ord-1"', "NaN", 1)
        yield kind, f"{kind} with a BOM", "\ufeff" + text
        yield kind, f"{kind} camel and snake", {**base, "order_id": base["orderId"]}
    for field in ("sku", "quantity", "unitPriceCents"):
        values = TEXTS if field == "sku" else NUMBERS
        for n, value in enumerate([*WRONG_TYPES, *values]):
            yield "OrderSubmitted", f"lines.0.{field}#{n}", order(lines=[_line(**{field: value})])
    yield "OrderSubmitted", "101 lines", order(lines=[_line()] * 101)
    yield (
        "OrderSubmitted",
        "100 lines at the top price",
        order(lines=[_line(quantity=1000, unitPriceCents=10**7)] * 100),
    )
    yield "OrderSubmitted", "a line with an extra field", order(lines=[{**_line(), "note": "x"}])
    yield "OrderSubmitted", "lines of nulls", order(lines=[None])
    yield "OrderSubmitted", "prepaid 1", order(prepaid=1)
    yield "OrderSubmitted", "prepaid 'true'", order(prepaid="true")
    rng = random.Random(20261204)
    for n in range(60):
        kind = rng.choice(sorted(BUILDERS))
        base = BUILDERS[kind]()
        body = dict(base)
        for field in rng.sample([f for f in base if f != "type"], k=rng.randint(1, 3)):
            body[field] = rng.choice(_values_for(field))
        yield kind, f"random#{n}", body


CASES = list(_cases())


def _unique(body: Any, n: int) -> Any:
    """Each case its own order (a case that changes ``orderId`` keeps its change)."""
    if isinstance(body, dict) and body.get("orderId") == "ord-1":
        return {**body, "orderId": f"g{n}"}
    if isinstance(body, str):
        return body.replace('"ord-1"', f'"g{n}"')
    return body


def _submit(functions: dict[str, Any], body: Any) -> tuple[RecordingActions, RecordingClient]:
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else json.dumps(body).encode()
    actions, client = RecordingActions(), RecordingClient()
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=FakeReceivedMessage.of(raw), message_actions=actions, client=client))
    return actions, client


def _read_back(app_context: Any, order_id: str) -> OrderSubmitted:
    stored = app_context.orders.get(order_id)
    body = {k: v for k, v in stored.items() if k not in ("id", "totalCents", "schemaVersion")}
    return parse(json.dumps({"type": "OrderSubmitted", "schemaVersion": 1, **body}), {"OrderSubmitted": OrderSubmitted})


def _carriable(text: Any) -> bool:
    return isinstance(text, str) and text.strip() != "" and carriable(text) == text and len(text) <= 1024


REFUSED_UNREAD = {"InvalidFields", "NotJson", "MissingType", "UnknownType", "NotAnObject", "UnsupportedSchemaVersion"}


def _check(functions: dict[str, Any], app_context: Any, n: int, kind: str, name: str, body: Any) -> str | None:
    """What is wrong with how the case was handled, or None."""
    body = _unique(body, n)
    if kind in ("PaymentNotification", "CancelOrder"):  # its order exists (prepaid, 2,500 EUR)
        assert _submit(functions, order(orderId=f"g{n}", prepaid=True))[0].calls == [("complete", {})]
    order_id = body.get("orderId") if isinstance(body, dict) else f"g{n}"
    known = isinstance(order_id, str) and is_valid_order_id(order_id)
    before = (app_context.states.get(order_id), app_context.orders.get(order_id)) if known else None
    try:
        actions, _ = _submit(functions, body)
    except Exception as exc:  # what the host would abandon, and redeliver until MaxDeliveryCountExceeded
        return f"{name}: the trigger raised {type(exc).__name__}: {exc}"
    if len(actions.calls) != 1:
        return f"{name}: settled {actions.calls}"
    settled, details = actions.calls[0]
    if settled == "abandon":
        return f"{name}: abandoned with no store or bus failure"
    if settled == "deadletter":
        if not (_carriable(details["reason"]) and _carriable(details["description"])):
            return f"{name}: dead-letter reason or description not carriable: {details!r}"
        after = (app_context.states.get(order_id), app_context.orders.get(order_id)) if known else None
        if details["reason"] in REFUSED_UNREAD and after != before:
            return f"{name}: refused ({details['reason']}) but its order's documents changed"
        return None
    if kind == "OrderSubmitted" and settled == "complete":
        accepted = parse(json.dumps(body) if isinstance(body, dict) else body, {"OrderSubmitted": OrderSubmitted})
        if _read_back(app_context, accepted.order_id) != accepted:
            return f"{name}: the stored order is not the accepted one"
        if app_context.states.get(accepted.order_id) is None:
            return f"{name}: accepted without a state record"
        again, _ = _submit(functions, body)
        if again.calls != [("complete", {})]:
            return f"{name}: its redelivery was settled {again.calls}"
    return None


def test_every_mutated_orders_message_is_settled_with_a_reason_and_leaves_no_partial_write(functions, app_context):
    problems: list[str] = []
    for n, (kind, name, body) in enumerate(CASES):
        try:
            problem = _check(functions, app_context, n, kind, name, body)
        except Exception as exc:
            problem = f"{name}: {type(exc).__name__}: {exc}"
        if problem is not None:
            problems.append(problem[:300])
    assert not problems, f"{len(problems)} of {len(CASES)} cases:\n" + "\n".join(problems)


def test_the_families_are_broad():
    assert len(CASES) > 600
    assert {kind for kind, _, _ in CASES} == set(BUILDERS)
