"""The orders a simulation submits: valid orders from simulated submitters (each with its own
status queue), plus the profile's duplicates, malformed messages and cancellations, and any raw
messages the user injects."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from adapters.servicebus.sender import MessageRejected, OutgoingMessage
from contracts.names import ORDERS_QUEUE
from contracts.parsing import RepeatedName, each_name_once
from localrun.profile import Profile
from localrun.servicebus import limits

MAX_AT_S = 30 * 24 * 3600  # an --inject-raw line's latest send time (seconds from the start)
SKUS = ("WIDGET-1", "WIDGET-2", "GADGET-7", "BOLT-M8", "NUT-M8", "CABLE-2M")
MALFORMED_BODIES = (
    b"this is not json",
    b'{"type": "OrderSubmitted", "schemaVersion": 1}',
    b'{"type": "OrderShipped", "schemaVersion": 1, "orderId": "x"}',
    b'{"type": "OrderSubmitted", "schemaVersion": 9, "orderId": "x"}',
    b"[]",
)


@dataclass(frozen=True)
class Arrival:
    at: datetime
    message: OutgoingMessage
    kind: str  # "order" | "duplicate" | "malformed" | "cancel" | "notification" | "raw"
    order_id: str | None = None


@dataclass(frozen=True)
class Workload:
    arrivals: list[Arrival]
    # valid orders by id, each reduced to what the report reads of it (``replyTo``): the body sent is
    # the arrival's message (about 1 KB an order less as objects, for the whole run)
    orders: dict[str, dict[str, Any]]
    submitters: list[str]  # status queue of each simulated submitter
    concurrent_notifications: int = 0  # notifications sent together with their order (profile fault)
    # notifications sent for an order never submitted (profile ``orders.orderless_notification_rate``)
    orderless_notifications: int = 0
    # the status queues that --inject-raw submissions name, by order id: the app tells those queues of an order the
    # workload does not have, or of one whose id a line submitted first (the report's ``misrouted_statuses``)
    injected_reply_to: dict[str, frozenset[str]] = field(default_factory=dict)


def submitter_queue(index: int, length: int | None = None) -> str:
    """The status queue of submitter ``index``; padded to ``length`` characters (profile
    ``status_queues.name_length``; a valid queue name is up to 260)."""
    name = f"submitter-{index + 1}-statuses"
    return name if length is None or length <= len(name) else f"{name}-{'q' * (length - len(name) - 1)}"


def long_order_id(number: int) -> str:
    """A 64-character order id, the longest the contract accepts (profile ``orders.long_id_rate``)."""
    head = f"ord-{number:05d}-"
    return head + "L" * (64 - len(head))


def make_workload(
    count: int, profile: Profile, rng: random.Random, start: datetime, raw_lines: list[dict[str, Any]] | None = None
) -> Workload:
    submitters = [submitter_queue(i, profile.status_queues.name_length) for i in range(profile.reply_queues)]
    window = max(30.0, count * 0.25)  # seconds over which orders arrive
    arrivals: list[Arrival] = []
    orders: dict[str, dict[str, Any]] = {}
    mix = profile.orders
    concurrent = 0
    for i in range(count):
        order_id = f"ord-{i + 1:05d}"
        if mix.long_id_rate and rng.random() < mix.long_id_rate:  # drawn only when asked for
            order_id = long_order_id(i + 1)
        at = start + timedelta(seconds=rng.uniform(0, window))
        lines: list[dict[str, Any]] = [
            {"sku": rng.choice(SKUS), "quantity": rng.randint(1, 5), "unitPriceCents": rng.randint(100, 50_000)}
            for _ in range(rng.randint(1, 3))
        ]
        body: dict[str, Any] = {
            "type": "OrderSubmitted",
            "schemaVersion": 1,
            "orderId": order_id,
            "customerId": f"cust-{rng.randint(1, 50)}",
            "lines": lines,
            "currency": "EUR",
            "shipTo": f"{rng.randint(1, 999)} Simulation Street",
            "replyTo": submitters[i % len(submitters)],
        }
        prepaid = rng.random() < mix.prepaid_rate
        if prepaid:
            body["prepaid"] = True
        orders[order_id] = {"replyTo": body["replyTo"]}
        text = json.dumps(body)
        arrivals.append(
            Arrival(at, OutgoingMessage(body=text, message_id=order_id, subject="OrderSubmitted"), "order", order_id)
        )
        if rng.random() < mix.duplicate_submit_rate:
            # A client retry after the duplicate-detection window: it reaches the app, which must
            # see an exact duplicate and write nothing.
            later = at + timedelta(minutes=11) + timedelta(seconds=rng.uniform(0, 60))
            copy = OutgoingMessage(body=text, message_id=f"{order_id}:resend", subject="OrderSubmitted")
            arrivals.append(Arrival(later, copy, "duplicate", order_id))
        if rng.random() < mix.cancel_rate:
            cancel = {"type": "CancelOrder", "schemaVersion": 1, "orderId": order_id, "reason": "customer changed mind"}
            when = at + timedelta(seconds=rng.uniform(0.5, 20))
            arrivals.append(
                Arrival(
                    when, OutgoingMessage(json.dumps(cancel), f"{order_id}:cancel", "CancelOrder"), "cancel", order_id
                )
            )
        if prepaid:
            total = sum(line["quantity"] * line["unitPriceCents"] for line in lines)
            notification = {
                "type": "PaymentNotification",
                "schemaVersion": 1,
                "notificationId": f"pay-{order_id}",
                "orderId": order_id,
                "amountCents": total,
                "currency": "EUR",
                "providerReference": f"psp-{rng.randint(10_000, 99_999)}",
            }
            first = rng.random() < mix.payment_notification_first_rate
            when = at + timedelta(seconds=-rng.uniform(1, 10) if first else rng.uniform(1, 10))
            if mix.concurrent_notification_rate and rng.random() < mix.concurrent_notification_rate:
                when = at - timedelta(milliseconds=1)  # with its order: both handled at once
                concurrent += 1
            if mix.late_notification_rate and rng.random() < mix.late_notification_rate:  # drawn only when asked for
                when = at + timedelta(seconds=rng.uniform(*mix.late_notification_s))  # held up on its way
            arrivals.append(
                Arrival(
                    max(start, when),
                    OutgoingMessage(json.dumps(notification), f"pay-{order_id}", "PaymentNotification"),
                    "notification",
                    order_id,
                )
            )
        if rng.random() < mix.malformed_rate:
            body_bytes = rng.choice(MALFORMED_BODIES)
            arrivals.append(Arrival(at, OutgoingMessage(body_bytes.decode(), f"{order_id}:malformed"), "malformed"))
    # drawn after every order: a workload's orders, duplicates and notifications are as without them
    orderless = _orderless_notifications(count, mix.orderless_notification_rate, rng, start, window)
    arrivals.extend(orderless)
    for n, line in enumerate(raw_lines or []):
        message = raw_message(line, n)
        arrivals.append(Arrival(start + timedelta(seconds=float(line.get("at_s", 0))), message, "raw"))
    arrivals.sort(key=lambda a: (a.at, a.message.message_id))
    injected = _injected_reply_to(raw_lines or [])
    return Workload(
        arrivals, orders, submitters, concurrent, injected_reply_to=injected, orderless_notifications=len(orderless)
    )


def orderless_order_id(number: int) -> str:
    """The order id of the ``number``-th payment notification whose order never comes (profile
    ``orders.orderless_notification_rate``): never one of the workload's (``ord-...``)."""
    return f"orderless-{number:05d}"


def _orderless_notifications(
    count: int, rate: float, rng: random.Random, start: datetime, window: float
) -> list[Arrival]:
    """For each of ``count`` orders, with probability ``rate`` (nothing drawn at 0): a ``PaymentNotification`` for
    an order never submitted, sent at a uniform time of the arrival ``window``: the app defers it, the peek sweep
    tells an operator (``PaymentWithoutOrder``) once it waited ``ORDERLESS_PAYMENT_ALERT_MINUTES``, and only an
    operator's discard settles it (profile ``operator.discard_orderless``); otherwise it stays deferred, told."""
    if not rate:
        return []
    arrivals: list[Arrival] = []
    for i in range(count):
        if rng.random() >= rate:
            continue
        order_id = orderless_order_id(i + 1)
        notification = {
            "type": "PaymentNotification",
            "schemaVersion": 1,
            "notificationId": f"pay-{order_id}",
            "orderId": order_id,
            "amountCents": rng.randint(100, 250_000),
            "currency": "EUR",
            "providerReference": f"psp-{rng.randint(10_000, 99_999)}",
        }
        at = start + timedelta(seconds=rng.uniform(0, window))
        message = OutgoingMessage(json.dumps(notification), f"pay-{order_id}", "PaymentNotification")
        arrivals.append(Arrival(at, message, "notification", order_id))
    return arrivals


def _injected_reply_to(raw_lines: list[dict[str, Any]]) -> dict[str, frozenset[str]]:
    """The ``replyTo`` queues that injected ``OrderSubmitted`` bodies name, by order id."""
    named: dict[str, set[str]] = {}
    for line in raw_lines:
        try:
            body = json.loads(str(line["body"]))
        except ValueError:
            continue
        if isinstance(body, dict) and body.get("type") == "OrderSubmitted":
            order_id, reply_to = body.get("orderId"), body.get("replyTo")
            if isinstance(order_id, str) and isinstance(reply_to, str):
                named.setdefault(order_id, set()).add(reply_to)
    return {order_id: frozenset(queues) for order_id, queues in named.items()}


def read_raw(path: str | Path) -> list[dict[str, Any]]:
    """``--inject-raw``: one JSON object per line, ``{"body": "<text>", "message_id": "<optional>", "at_s": <n>}``
    (``at_s``, optional: when it is sent, in simulated seconds from the start, default 0)."""
    lines: list[dict[str, Any]] = []
    # UTF-8 whatever the locale, a byte order mark (Windows editors write one) skipped
    for number, text in enumerate(Path(path).read_text(encoding="utf-8-sig").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            item = json.loads(text, object_pairs_hook=each_name_once)
        except RepeatedName as exc:  # the line's own keys (its body is text, sent as it is)
            raise ValueError(f"{path}:{number}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON: {exc}") from None
        except (ValueError, RecursionError) as exc:  # an integer of over 4300 digits, brackets nested past the stack
            raise ValueError(f"{path}:{number}: not JSON the runner reads: {exc}") from None
        if not isinstance(item, dict) or not isinstance(item.get("body"), str):
            raise ValueError(f'{path}:{number}: expected {{"body": "<text>", "message_id": "<optional>"}}')
        unknown = set(item) - {"body", "message_id", "at_s"}
        if unknown:
            raise ValueError(f"{path}:{number}: unknown key {sorted(unknown)[0]!r}")
        try:
            raw_message(item, len(lines))
        except ValueError as exc:
            raise ValueError(f"{path}:{number}: {exc}") from None
        lines.append(item)
    return lines


def raw_message(line: dict[str, Any], n: int) -> OutgoingMessage:
    """The message an ``--inject-raw`` line (the ``n``-th, from 0) sends, or ``ValueError`` for one no Service Bus
    client could send (checked before the run: a run does not fail on it half-way): a body that is not UTF-8 text (a
    lone surrogate), a MessageId over 128 characters or a message over 256 KB (``localrun/servicebus/limits.py``),
    an ``at_s`` that is not a number of seconds from 0 to 30 days."""
    at_s = line.get("at_s", 0)
    if isinstance(at_s, bool) or not isinstance(at_s, int | float) or not 0 <= at_s <= MAX_AT_S:
        raise ValueError(f"at_s must be a number of seconds from 0 to {MAX_AT_S}, not {at_s!r}")
    body = str(line["body"])
    try:
        body.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"the body is not UTF-8 text (a lone surrogate at {exc.start})") from None
    message = OutgoingMessage(body, str(line.get("message_id") or f"raw-{n + 1}"))
    try:
        limits.check(ORDERS_QUEUE, message, python_sdk=False)
    except MessageRejected as exc:
        raise ValueError(str(exc)) from None
    return message
