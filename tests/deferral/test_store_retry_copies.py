"""The copies ``submission.store_outage`` sends of an ``orders`` message that met a store failure, through
the registered trigger and the in-process broker (duplicate detection included)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage
from contracts.names import ORDERS_QUEUE
from domain.deferral import EntryStatus
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import while_using
from tests.deferral.support import DurableClientStub, deliver, deliver_all, order, send
from tests.fakes import StateStoreThatFails

pytestmark = pytest.mark.cosmos


def test_an_order_whose_client_messageid_looks_like_a_copy_is_still_handled_after_a_store_failure(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """Found by the red team on 3737d51: MessageId ``batch-7:store-retry:1`` from a client, a blip of the
    state store: the copy was named ``batch-7:store-retry:1`` too, duplicate detection dropped it, and
    the order, its original completed, was never written."""
    broker.send(ORDERS_QUEUE, OutgoingMessage(body=json.dumps(order("p9")), message_id="batch-7:store-retry:1"))
    with while_using(ctx, states=StateStoreThatFails(ctx.states, "get")):
        assert deliver(functions, broker)
    clock.advance(STORE_RETRY_DELAYS[0])
    deliver_all(functions, broker)
    assert broker.counters(ORDERS_QUEUE).duplicates_dropped == 0
    assert ctx.states.get("p9") is not None


def test_a_sender_who_sends_a_copys_messageid_first_without_the_body_does_not_make_the_copy_a_duplicate(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """docs/deferral.md, "What a sender to ``orders`` can still do": a copy was named
    ``<original MessageId>:store-retry:<round>:<sequence number>``. Another sender, knowing the order's
    MessageId (its order id) and guessing its sequence number, sent a message under that id first; the
    original then met a state store failure, its copy was dropped as a duplicate (10 minutes of duplicate
    detection), the original was completed: the order lost. The copy's id now carries a digest of its body:
    the forger's ids (with or without a guessed digest) are not its id."""
    send(broker, order("p9"))
    [original] = broker.peek(ORDERS_QUEUE, 10)
    seq = original.sequence_number
    for forged in (f"p9:store-retry:1:{seq}", f"p9:store-retry:1:{seq}:{'0' * 16}"):
        broker.send(ORDERS_QUEUE, OutgoingMessage(body=json.dumps(order("x1")), message_id=forged))
    with while_using(ctx, states=StateStoreThatFails(ctx.states, "get")):
        assert deliver(functions, broker)  # the original: copied, due in 10 s, and completed
    clock.advance(STORE_RETRY_DELAYS[0])
    deliver_all(functions, broker)
    assert broker.counters(ORDERS_QUEUE).duplicates_dropped == 0
    assert ctx.states.get("p9") is not None


def test_the_same_message_meeting_the_store_failure_twice_sends_one_copy(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """Its settlement lost (the lock lapsed), the original is delivered again and meets the failure again:
    the second copy has the first's id, digest included, and duplicate detection drops it."""
    send(broker, order("p9"))
    first = broker.receive(ORDERS_QUEUE)
    fn = functions["submit_order"].func.client_function
    with while_using(ctx, states=StateStoreThatFails(ctx.states, "get")):
        asyncio.run(fn(message=first, message_actions=SettlementLost(broker.actions), client=DurableClientStub()))
        clock.advance(broker.policy(ORDERS_QUEUE).lock_duration)
        again = broker.receive(ORDERS_QUEUE)
        assert again.sequence_number == first.sequence_number  # a redelivery
        asyncio.run(fn(message=again, message_actions=broker.actions, client=DurableClientStub()))
    assert broker.counters(ORDERS_QUEUE).duplicates_dropped == 1
    [copy] = broker.peek(ORDERS_QUEUE, 10)
    assert copy.message_id.startswith(f"p9:store-retry:1:{first.sequence_number}:")
    clock.advance(STORE_RETRY_DELAYS[0])
    deliver_all(functions, broker)
    assert ctx.states.get("p9") is not None


class SettlementLost:
    """The broker's message actions; ``complete`` is lost (the lock lapsed first): the message is redelivered."""

    def __init__(self, actions: Any) -> None:
        self._actions = actions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._actions, name)

    def complete(self, message: Any) -> None:
        return None


class DeferLost:
    """The broker's message actions; ``defer`` is lost (the lock lapsed first): the message is redelivered."""

    def __init__(self, actions: Any) -> None:
        self._actions = actions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._actions, name)

    def defer(self, message: Any) -> None:
        return None


def recorded_then_copied(functions: Any, ctx: Any, broker: Any, clock: Any, body: dict[str, Any] | None = None) -> int:
    """A notification (``body``, else ``notification()``) recorded as deferred (#S) whose defer is lost with its
    lock, then redelivered into a state store failure: copied (a new number, due in 10 s) and completed. Returns S."""
    import asyncio

    from tests.contexts import context_with
    from tests.deferral.support import DurableClientStub, notification, send

    send(broker, body or notification(), "n-1")
    first = broker.receive(ORDERS_QUEUE)
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=first, message_actions=DeferLost(broker.actions), client=DurableClientStub()))
    assert ctx.deferrals.get("p1").entry(first.sequence_number) is not None  # recorded, not deferred
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration)
    down = context_with(ctx, states=StateStoreThatFails(ctx.states, "get"))
    assert deliver(functions, broker)  # delivery 2, the store down: copied (delivery counts are not
    context_with(down, states=ctx.states)  # seen by a Python trigger in Azure: it cannot tell a redelivery)
    return int(first.sequence_number)


@pytest.mark.parametrize("order_first", [False, True])
def test_a_recorded_notification_copied_after_a_lost_defer_takes_its_copys_outcome_not_an_expiry(
    functions: Any, ctx: Any, broker: Any, clock: Any, order_first: bool
) -> None:
    """Found in the runner on c1fada6 (the fault red team's combo1, seed 2): the tracked number pointed at
    a message its copy had completed, and was reported ``DeferredMessageExpired`` while the copy was
    applied or dead-lettered. Now the copy's outcome settles the original's entry (same notification id),
    and a tracked number found gone whose notification is on the record is ``Applied``."""
    from tests.deferral.support import alerts

    seq = recorded_then_copied(functions, ctx, broker, clock)
    if order_first:
        send_order_and_deliver(functions, broker)
    clock.advance(STORE_RETRY_DELAYS[0])
    deliver_all(functions, broker)  # the copy: deferred beside the original's entry, or applied
    if not order_first:
        send_order_and_deliver(functions, broker)
    assert ctx.states.get("p1").payment.notification_id == "n-1"
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    if not order_first:  # the order first, in the minute before its copy is decided: the window left
        assert alerts(broker) == []  # (its number is reported expired, then corrected: docs/deferral.md)


def send_order_and_deliver(functions: Any, broker: Any) -> None:
    from tests.deferral.support import send

    send(broker, order())
    deliver_all(functions, broker)


class FirstReadMisses:
    """The state store; its first ``get`` answers None (the record is created just after it is read: an order
    submitted concurrently), every later one the real store's answer."""

    def __init__(self, store: Any) -> None:
        self._store, self.calls = store, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return None if self.calls == 1 else self._store.get(*args, **kwargs)


def test_a_copy_applied_on_its_look_again_settles_its_originals_entry(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """The copy finds no order, is recorded, and its look again finds the order (submitted meanwhile, after
    its submission reported the original's number expired: the window docs/deferral.md names): the
    original's entry is corrected to the copy's outcome there too, not only when the copy is applied at once.
    The submission, finding the original gone while its entry is young, leaves it waiting (a copy may be on its
    way) instead of reporting it expired: before, an alert told an operator it had expired."""
    seq = recorded_then_copied(functions, ctx, broker, clock)
    send_order_and_deliver(functions, broker)  # the original is gone, its entry young: left waiting
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEFERRED
    clock.advance(STORE_RETRY_DELAYS[0])
    from dependencies import installed_context
    from tests.contexts import context_with

    racing = context_with(installed_context() or ctx, states=FirstReadMisses(ctx.states))
    assert deliver(functions, broker)  # the copy: no order at first, then applied on its look again
    context_with(racing, states=ctx.states)
    assert ctx.states.get("p1").payment.notification_id == "n-1"
    entries = {e.sequence_number: e.status for e in ctx.deferrals.get("p1").entries}
    assert entries[seq] is EntryStatus.APPLIED, entries
    assert list(entries.values()) == [EntryStatus.APPLIED, EntryStatus.APPLIED]
