"""Hostile ``--inject-raw`` lines for the ``orders`` queue, drawn by family from a run's own workload (the orders
``ord-00001``... a seed and profile make, their data, totals and status queues), so a line can duplicate, pay for
or cancel an order of the run as well as one nobody submitted. ``lines(workload, rng)`` yields them all;
``FAMILIES`` names each family's builder. Used by ``test_redteam_inject_raw.py``."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterator
from typing import Any

from localrun.profile import Profile
from localrun.simulation import START
from localrun.workload import Workload, make_workload

Line = dict[str, Any]


def workload_of(orders: int, seed: int, profile: Profile) -> Workload:
    """The workload ``run_simulation`` makes for these arguments (its first draw of the seed's generator)."""
    return make_workload(orders, profile, random.Random(random.Random(seed).getrandbits(64)), START)


def submitted(workload: Workload) -> dict[str, dict[str, Any]]:
    """Each order's body as its submitter sent it."""
    return {a.order_id: json.loads(a.message.body) for a in workload.arrivals if a.kind == "order" and a.order_id}


def _total(body: dict[str, Any]) -> int:
    return sum(line["quantity"] * line["unitPriceCents"] for line in body["lines"])


def _payment(order_id: str, amount: int, notification_id: str, currency: str = "EUR", ref: str = "psp-x") -> str:
    body = {
        "type": "PaymentNotification",
        "schemaVersion": 1,
        "notificationId": notification_id,
        "orderId": order_id,
        "amountCents": amount,
        "currency": currency,
        "providerReference": ref,
    }
    return json.dumps(body)


def _cancel(order_id: str) -> str:
    return json.dumps({"type": "CancelOrder", "schemaVersion": 1, "orderId": order_id, "reason": "hostile"})


def _line(body: str, message_id: str | None = None, at_s: float = 0) -> Line:
    line: Line = {"body": body}
    if message_id is not None:
        line["message_id"] = message_id
    if at_s:
        line["at_s"] = at_s
    return line


# "late": after every workload order was sent (the window is at most 30 s for a few orders) and handled;
# "finished": after a short run's orders ended (a happy-path order takes seconds to a few minutes)
AFTER = 120.0
FINISHED = 1800.0


def payments(workload: Workload, rng: random.Random) -> Iterator[Line]:
    bodies = submitted(workload)
    order_id = rng.choice(sorted(bodies))
    total = _total(bodies[order_id])
    tag = rng.randint(0, 10**6)
    yield _line(_payment(f"ghost-{tag}", 1234, f"n-ghost-{tag}"), f"m-ghost-{tag}")
    for at in (0.0, AFTER):
        yield _line(_payment(order_id, total, f"n-right-{tag}-{at:g}"), f"m-right-{tag}-{at:g}", at)
        yield _line(_payment(order_id, total + 1, f"n-wrong-{tag}-{at:g}"), f"m-wrong-{tag}-{at:g}", at)
        yield _line(_payment(order_id, total, f"n-usd-{tag}-{at:g}", "USD"), f"m-usd-{tag}-{at:g}", at)
    # the same notification twice (other MessageIds), and another notificationId for the same payment
    same = _payment(order_id, total, f"n-twice-{tag}")
    yield _line(same, f"m-twice-a-{tag}")
    yield _line(same, f"m-twice-b-{tag}", AFTER)
    yield _line(_payment(order_id, total, f"n-other-{tag}"), f"m-other-{tag}", AFTER)
    # the workload's own notification id of the order (a prepaid order's), with another amount
    yield _line(_payment(order_id, total + 7, f"pay-{order_id}"), f"m-own-{tag}", AFTER)


def cancels(workload: Workload, rng: random.Random) -> Iterator[Line]:
    order_id = rng.choice(sorted(submitted(workload)))
    tag = rng.randint(0, 10**6)
    yield _line(_cancel(f"ghost-{tag}"), f"c-ghost-{tag}")
    yield _line(_cancel(order_id), f"c-before-{tag}")
    yield _line(_cancel(order_id), f"c-after-{tag}", AFTER)
    yield _line(_cancel(order_id), f"c-finished-{tag}", FINISHED)


def duplicates(workload: Workload, rng: random.Random) -> Iterator[Line]:
    bodies = submitted(workload)
    order_id = rng.choice(sorted(bodies))
    body = bodies[order_id]
    others = [q for q in workload.submitters if q != body["replyTo"]]
    tag = rng.randint(0, 10**6)
    for at in (0.0, AFTER, FINISHED):
        yield _line(json.dumps(body), f"d-same-{tag}-{at:g}", at)
    yield _line(json.dumps({**body, "shipTo": "1 Hostile Road"}), f"d-data-{tag}", AFTER)
    # the order's id taken first, told on another queue: the workload's own submission is the conflicting one
    yield _line(json.dumps({**body, "replyTo": rng.choice(others or ["x-statuses"])}), f"d-first-q-{tag}")
    yield _line(json.dumps({**body, "replyTo": rng.choice(others or ["x-statuses"])}), f"d-other-q-{tag}", AFTER)
    yield _line(json.dumps({**body, "replyTo": "no-such-queue"}), f"d-no-q-{tag}", AFTER)
    # a new order of its own sent to a queue nobody reads, and one to another submitter's queue
    fresh = {**body, "orderId": f"new-{tag}"}
    yield _line(json.dumps({**fresh, "replyTo": "no-such-queue"}), f"d-new-no-q-{tag}")
    yield _line(json.dumps({**fresh, "orderId": f"new2-{tag}", "replyTo": rng.choice(workload.submitters)}))


def forged_retries(workload: Workload, rounds: tuple[int, ...] = (1, 2), top: int = 12) -> Iterator[Line]:
    """``RetryDeferred`` for every sequence number a deferred notification of the run can have (1 to ``top``), for
    each order, naming its notification's MessageId or another, sent while the notifications wait (a run whose
    notifications all come first): none carries the entry's ``retryToken``."""
    for order_id in sorted(submitted(workload)):
        for seq in range(1, top):
            for round_ in rounds:
                body = {
                    "type": "RetryDeferred",
                    "schemaVersion": 1,
                    "sequenceNumber": seq,
                    "orderId": order_id,
                    "messageId": f"pay-{order_id}",
                    "round": round_,
                }
                yield _line(json.dumps(body), f"f-{order_id}-{seq}-{round_}", 1 + seq * 0.5)


def retries(workload: Workload, rng: random.Random) -> Iterator[Line]:
    order_id = rng.choice(sorted(submitted(workload)))
    tag = rng.randint(0, 10**6)
    for seq in (1, 2, rng.randint(3, 40), 2**40):
        for who in (order_id, f"ghost-{tag}"):
            body = {
                "type": "RetryDeferred",
                "schemaVersion": 1,
                "sequenceNumber": seq,
                "orderId": who,
                "messageId": f"pay-{order_id}",
                "round": rng.choice([0, 1, 2, 9]),
            }
            yield _line(json.dumps(body), f"r-{tag}-{seq}-{who}", rng.choice([0.0, AFTER]))


def shapes(workload: Workload, rng: random.Random) -> Iterator[Line]:
    order_id = rng.choice(sorted(submitted(workload)))
    body = submitted(workload)[order_id]
    tag = rng.randint(0, 10**6)
    yield _line("not json", f"s-text-{tag}")
    yield _line("", f"s-empty-{tag}")
    yield _line(json.dumps({**body, "shipTo": "x" * 70_000}), f"s-huge-{tag}")
    yield _line("x" * 250_000, f"s-huger-{tag}")
    yield _line("[" * 5000 + "]" * 5000, f"s-deep-{tag}")
    yield _line(json.dumps({**body, "lines": "many"}), f"s-types-{tag}")
    yield _line(json.dumps({**body, "orderId": 1}), f"s-id-type-{tag}")
    yield _line(json.dumps({**body, "type": "OrderShipped"}), f"s-type-{tag}")
    yield _line(json.dumps({**body, "schemaVersion": 2}), f"s-v2-{tag}")
    yield _line(json.dumps({**body, "schemaVersion": "1"}), f"s-v-text-{tag}")
    yield _line("null", f"s-null-{tag}")
    yield _line(json.dumps({**body, "prepaid": "true"}), f"s-prepaid-{tag}")
    text = json.dumps(body)
    yield _line(f'{text[:-1]}, "orderId": "s-twice-{tag}"}}', f"s-twice-{tag}")  # a name given twice
    yield _line(f'{{"type": "CancelOrder", {text[1:]}', f"s-two-types-{tag}")
    yield _line("\ufeff" + text, f"s-bom-{tag}")
    yield _line(re.sub(r'"quantity": [0-9]+', '"quantity": 1e400', text, count=1), f"s-inf-{tag}")
    yield _line(json.dumps({**body, "lines": [{**body["lines"][0], "quantity": 2**64}]}), f"s-big-int-{tag}")
    yield _line(json.dumps({**body, "shipTo": "x"}).replace('"x"', '"\\udc80"'), f"s-surrogate-{tag}")
    yield _line(json.dumps({**body, "shipTo": "a\u0000b"}), f"s-nul-{tag}")
    yield _line(json.dumps({**body, "prepaid": float("nan")}), f"s-nan-{tag}")  # NaN: not JSON
    yield _line('{"a":' * 33 + "1" + "}" * 33, f"s-deep-33-{tag}")


def ids(workload: Workload, rng: random.Random) -> Iterator[Line]:
    """MessageIds the app or the workload uses: an order's own, its notification's and cancellation's, a
    store-retry copy's, a status's and an alert's, a RetryDeferred's, on bodies of every kind."""
    bodies = submitted(workload)
    order_id = rng.choice(sorted(bodies))
    tag = rng.randint(0, 10**6)
    taken = [
        order_id,
        f"pay-{order_id}",
        f"{order_id}:cancel",
        f"{order_id}:resend",
        f"{order_id}:store-retry:1",
        f"{order_id}:store-retry:1:7:0123456789abcdef",
        f"{order_id}:Received:0",
        f"alert:OrderRejected:{order_id}:1",
        "retry-deferred:3:1:x",
        f"raw-{rng.randint(1, 5)}",
    ]
    kinds: list[Callable[[], str]] = [
        lambda: "not json",
        lambda: _cancel(f"ghost-{tag}"),
        lambda: _payment(f"ghost-{tag}", 100, f"n-id-{tag}-{rng.randint(0, 10**6)}"),
        lambda: json.dumps({**bodies[order_id], "orderId": f"idnew-{tag}-{rng.randint(0, 10**6)}"}),
    ]
    for message_id in taken:
        yield _line(rng.choice(kinds)(), message_id, rng.choice([0.0, AFTER]))


FAMILIES: dict[str, Callable[[Workload, random.Random], Iterator[Line]]] = {
    "payments": payments,
    "cancels": cancels,
    "duplicates": duplicates,
    "retries": retries,
    "shapes": shapes,
    "ids": ids,
}


def lines(workload: Workload, rng: random.Random) -> Iterator[tuple[str, Line]]:
    for name, family in FAMILIES.items():
        for line in family(workload, rng):
            yield name, line
