"""Red team (races): two submissions of one order, one refused by the pending cap and one accepted, at every
interleaving of their Cosmos DB calls, with a payment notification for the order waiting or arriving meanwhile.

A (the first ``orders`` message delivered) runs; before its k-th call on the state, deferral or order store, B
(the next message, the other submission) and whatever was queued with it run whole; then A goes on. Every k up
to A's calls when it runs alone is tried (and B after A: the serial order). After the run, every message due is
delivered (a look again, a retry) until the queue is empty. Then, whichever came first:

* the order's state record exists (the accepted submission wrote it) and no refusal stands on its deferral
  document (``rejectedAt``): a refusal standing beside a live order dead-letters nothing now, but says the
  order was refused where it was not;
* the notification is either applied to the record or in the dead-letter queue and named to an operator by a
  ``NotificationsForAcceptedOrder`` alert (a payment in the dead-letter queue that no alert says is for a live
  order is lost to the prepaid order waiting for it), and nothing is left listed unflagged on the document;
* the submitter's last word is ``Received``: a ``Rejected`` told after it says the order was refused when it is
  being processed.

Through the registered trigger, the in-process broker and Cosmos, as
tests/deferral/test_refusal_and_acceptance_at_once.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE
from dependencies import installed_context
from tests.contexts import context_with
from tests.deferral.support import DurableClientStub, alerts, deliver, notification, order
from tests.deferral.test_refusal_written_first import Cap, submit, told
from tests.deferral.test_refused_notifications_flagged import flagged

pytestmark = pytest.mark.cosmos


class Interleaving:
    """Counts A's calls on the stores; before the ``at``-th one, runs ``b`` whole (its own calls not counted)."""

    def __init__(self, at: int, b: Callable[[], None]) -> None:
        self.at, self.b = at, b
        self.calls = 0
        self.fired = False
        self._in_b = False

    def before_call(self) -> None:
        if self._in_b:
            return
        self.calls += 1
        if self.calls == self.at and not self.fired:
            self.fired = True
            self._in_b = True
            try:
                self.b()
            finally:
                self._in_b = False


class Counted:
    """A store whose every public call first tells the interleaving."""

    def __init__(self, inner: Any, interleaving: Interleaving) -> None:
        self._inner, self._interleaving = inner, interleaving

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._interleaving.before_call()
            return attr(*args, **kwargs)

        return call


# (A accepted?, the notification waits before A (else it arrives with B), the order refused once before A)
SCENES = [
    (accepted, waiting, refused_before)
    for accepted in (True, False)
    for waiting in (True, False)
    for refused_before in (False, True)
]


def _scene_name(scene: tuple[bool, bool, bool]) -> str:
    accepted, waiting, refused_before = scene
    return (
        f"{'A-accepted' if accepted else 'A-refused'}-"
        f"{'notification-waiting' if waiting else 'notification-with-B'}"
        f"{'-refused-before' if refused_before else ''}"
    )


def _run(
    functions: Any, ctx: Any, broker: Any, clock: Any, cap: Cap, scene: tuple[bool, bool, bool], at: int, oid: str
) -> int:
    """One interleaving of ``scene`` for order ``oid``, with B before A's ``at``-th call; A's calls (counted)."""
    a_accepted, waiting, refused_before = scene
    if refused_before:
        cap.full = True
        submit(broker, order(oid), f"{oid}:m0")
        assert deliver(functions, broker)
    if waiting:
        submit(broker, notification(oid), f"{oid}:n-1")
        assert deliver(functions, broker)
    submit(broker, order(oid), f"{oid}:a")
    submit(broker, order(oid), f"{oid}:b")
    if not waiting:
        submit(broker, notification(oid), f"{oid}:n-1")

    return interleave(functions, broker, clock, cap, at, a_full=not a_accepted, b_full=a_accepted)


def interleave(
    functions: Any,
    broker: Any,
    clock: Any,
    cap: Cap,
    at: int,
    *,
    a_full: bool,
    b_full: bool,
    client: DurableClientStub | None = None,
) -> int:
    """The next ``orders`` message (A, the pending cap ``a_full`` for it) delivered with the rest of the queue (B,
    ``b_full``) delivered before A's ``at``-th store call (after A if it makes fewer), then all that comes due;
    A's store calls. ``client``: the durable client of every delivery."""

    def b() -> None:
        cap.full = b_full
        while deliver(functions, broker, client):
            pass
        cap.full = a_full

    interleaving = Interleaving(at, b)
    ctx = installed_context()
    assert ctx is not None
    stores = {name: getattr(ctx, name) for name in ("states", "deferrals", "orders")}
    racing = context_with(ctx, **{name: Counted(store, interleaving) for name, store in stores.items()})
    cap.full = a_full
    assert deliver(functions, broker, client)  # A, with B somewhere in it
    context_with(racing, **stores)
    if not interleaving.fired:
        b()  # B after A
    for _ in range(4):  # looks again, retries: all that comes due
        clock.advance(timedelta(minutes=2))
        while deliver(functions, broker, client):
            pass
    return interleaving.calls


def _problems(ctx: Any, broker: Any, oid: str) -> list[str]:
    found: list[str] = []
    record = ctx.states.get(oid)
    if record is None:
        return ["no state record: the accepted submission wrote none"]
    doc = ctx.deferrals.get(oid)
    if doc is not None and doc.rejected_at is not None:
        found.append("a refusal stands on the deferral document of the accepted order")
    dead = [d.message_id.removeprefix(f"{oid}:") for d in broker.dead_letters(ORDERS_QUEUE) if _for(d, oid)]
    named = [n["notificationId"] for a in flagged(broker) if a["orderId"] == oid for n in a["details"]["notifications"]]
    applied = record.payment is not None
    if applied == ("n-1" in dead):
        found.append(f"the notification is {'applied and dead-lettered' if applied else 'neither applied nor dead'}")
    if "n-1" in dead and "n-1" not in named:
        kinds = [a["kind"] for a in alerts(broker) if a.get("orderId") == oid]
        found.append(f"n-1 is dead-lettered and no NotificationsForAcceptedOrder alert names it ({kinds})")
    if doc is not None and doc.to_flag():
        found.append(f"notifications left listed unflagged: {doc.refused_notifications}")
    said = told(broker, oid)
    if not said or said[-1] != "Received":
        found.append(f"the submitter was told {said}, last not Received")
    return found


@pytest.mark.parametrize("scene", SCENES, ids=_scene_name)
def test_a_refusal_and_an_acceptance_of_one_order_at_every_interleaving(
    functions, ctx, broker, clock, monkeypatch, cosmos_db, scene
):
    cap = Cap(monkeypatch, full=False)
    calls: int | None = None
    found: list[str] = []
    at = 1
    while calls is None or at <= calls + 1:  # the last: B after A
        oid = f"p{at}"
        made = _run(functions, ctx, broker, clock, cap, scene, at, oid)
        calls = made if calls is None else max(calls, made)
        found += [f"B before A's call {at}: {p}" for p in _problems(ctx, broker, oid)]
        at += 1
    assert calls > 3
    assert not found, "\n".join(found)


def _for(message: Any, oid: str) -> bool:
    return bool(json.loads(message.body).get("orderId") == oid)


def _every_interleaving(run: Callable[[int, str], int], check: Callable[[str], list[str]]) -> list[str]:
    """``run(at, order id)`` for every ``at`` up to A's calls and one more (B after A); ``check``'s findings."""
    calls: int | None = None
    found: list[str] = []
    at = 1
    while calls is None or at <= calls + 1:
        oid = f"q{at}-{id(run) % 10000}"
        made = run(at, oid)
        calls = made if calls is None else max(calls, made)
        found += [f"B before A's call {at}: {p}" for p in check(oid)]
        at += 1
    assert calls > 3
    return found


@pytest.mark.parametrize("waiting", [True, False], ids=["notification-waiting", "notification-with-B"])
def test_two_accepted_submissions_of_one_order_at_every_interleaving(
    functions, ctx, broker, clock, monkeypatch, waiting
):
    """Two deliveries of one order's submission (a redelivery, or the client sending it twice), both with room
    under the cap, and its payment notification: one state record, one attempt started, the payment applied, the
    submitter told ``Received``."""
    cap = Cap(monkeypatch, full=False)
    client = DurableClientStub()

    def run(at: int, oid: str) -> int:
        if waiting:
            submit(broker, notification(oid), f"{oid}:n-1")
            assert deliver(functions, broker, client)
        submit(broker, order(oid), f"{oid}:a")
        submit(broker, order(oid), f"{oid}:b")
        if not waiting:
            submit(broker, notification(oid), f"{oid}:n-1")
        return interleave(functions, broker, clock, cap, at, a_full=False, b_full=False, client=client)

    def check(oid: str) -> list[str]:
        found: list[str] = []
        record = ctx.states.get(oid)
        started = [i for _, i, _ in client.started if i is not None and i.startswith(f"{oid}:")]
        if record is None or record.payment is None:
            found.append(f"the record {record and record.process_state} has no payment")
        if len(started) != 1:
            found.append(f"attempts started: {started}")
        return found + _received_alone(broker, oid)

    found = _every_interleaving(run, check)
    assert not found, "\n".join(found)


def test_a_cancellation_while_its_order_is_accepted_at_every_interleaving(functions, ctx, broker, clock, monkeypatch):
    """The client's ``CancelOrder`` handled while its order's submission is: the order ends compensating (a
    cancellation that finds no record yet looks again later), the submitter told ``Received``."""
    cap = Cap(monkeypatch, full=False)
    client = DurableClientStub()

    def run(at: int, oid: str) -> int:
        submit(broker, order(oid), f"{oid}:a")
        cancel = {"type": "CancelOrder", "schemaVersion": 1, "orderId": oid, "reason": "changed my mind"}
        submit(broker, cancel, f"{oid}:cancel")
        return interleave(functions, broker, clock, cap, at, a_full=False, b_full=False, client=client)

    def check(oid: str) -> list[str]:
        record = ctx.states.get(oid)
        found: list[str] = []
        if record is None or record.process_state.value != "Compensating":
            found.append(f"the record is {record and record.process_state}")
        return found + _received_alone(broker, oid)

    found = _every_interleaving(run, check)
    assert not found, "\n".join(found)


def _received_alone(broker: Any, oid: str) -> list[str]:
    """What is wrong with what ``oid``'s submitter heard (``Received`` alone) and its dead letters (none)."""
    found = [] if told(broker, oid) == ["Received"] else [f"told {told(broker, oid)}"]
    return found + (["dead letters"] if any(_for(d, oid) for d in broker.dead_letters(ORDERS_QUEUE)) else [])


@pytest.mark.parametrize("refusal_first", [True, False], ids=["A-refused", "A-notification"])
def test_a_refusal_and_a_notification_for_its_order_at_every_interleaving(
    functions, ctx, broker, clock, monkeypatch, refusal_first
):
    """An order refused by the pending cap while its payment notification arrives, with no other submission: the
    refusal stands, the submitter told ``Rejected`` alone, and the notification dead-lettered ``OrderRejected``
    with its alert (``NotificationForRejectedOrder``), never left waiting for an order that is not coming."""
    cap = Cap(monkeypatch, full=True)

    def run(at: int, oid: str) -> int:
        first, then = (order(oid), notification(oid)) if refusal_first else (notification(oid), order(oid))
        submit(broker, first, f"{oid}:a")
        submit(broker, then, f"{oid}:b")
        return interleave(functions, broker, clock, cap, at, a_full=True, b_full=True)

    def check(oid: str) -> list[str]:
        found: list[str] = []
        doc = ctx.deferrals.get(oid)
        if ctx.states.get(oid) is not None or doc is None or doc.rejected_at is None:
            found.append("the refusal does not stand")
        if told(broker, oid) != ["Rejected"]:
            found.append(f"told {told(broker, oid)}")
        dead = [d.reason for d in broker.dead_letters(ORDERS_QUEUE) if _for(d, oid)]
        if dead != ["OrderRejected"]:
            found.append(f"dead letters {dead}")
        kinds = sorted(a["kind"] for a in alerts(broker) if a.get("orderId") == oid)
        if kinds != ["NotificationForRejectedOrder", "OrderRejected"]:
            found.append(f"alerts {kinds}")
        waiting = [m.sequence_number for m in broker.peek(ORDERS_QUEUE, 100) if _for(m, oid)]
        if waiting:
            found.append(f"messages left on the queue: {waiting}")
        return found

    found = _every_interleaving(run, check)
    assert not found, "\n".join(found)
