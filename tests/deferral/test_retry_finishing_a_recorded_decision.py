"""A ``RetryDeferred`` (a look again, a round's retry) that decides its message writes the outcome first,
sends the alert that follows the write, and settles the message last. When the outcome's write landed with
its response lost (``StoreOutcomeUnknown``: the retry handled again later, as a store-retry copy), the copy
came back to an entry already resolved and was completed, doing nothing (red team on 1e5441b): the message
stayed deferred until the peek sweep settled it as recorded, ten minutes and more later, and its alert
(``NotificationForRejectedOrder``) was never sent. Now a retry that finds its entry resolved and its message
still deferred finishes the decision as recorded: the alert sent again under the same id (collapsed if it
went out), the message settled as its entry says. Through the registered trigger, the in-process broker and
the Cosmos protocol server."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE
from deferral.tracking import resolve_refused
from domain.deferral import EntryStatus
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import context_with, while_using
from tests.deferral.support import (
    DurableClientStub,
    alerts,
    deferred_sequence_numbers,
    deliver,
    deliver_all,
    notification,
    send,
)
from tests.deferral.test_deferred_all_the_same_looks_again import FailsOnCall, refused
from tests.deferral.test_retry_finding_its_message_held import deliver_unsettled
from tests.deferral.test_second_look_outcome_unknown import SaveLandsUnanswered

pytestmark = pytest.mark.cosmos


def waiting_with_its_look_again(functions: Any, ctx: Any, broker: Any, monkeypatch: Any) -> tuple[Any, int]:
    """Order p1 refused; its notification recorded, its second look (the state read) met a blip: deferred all
    the same, its look again scheduled to decide it. Returns the context installed and its sequence number."""
    refused(functions, ctx, broker, monkeypatch)
    blipping = context_with(ctx, states=FailsOnCall(ctx.states, "get", 2))
    send(broker, notification())
    assert deliver(functions, broker)
    ctx = context_with(blipping, states=ctx.states)
    [seq] = deferred_sequence_numbers(broker)
    return ctx, seq


def assert_dead_lettered_with_its_alert(ctx: Any, broker: Any, seq: int) -> None:
    assert deferred_sequence_numbers(broker) == []
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert (dead.sequence_number, dead.reason) == (seq, "OrderRejected")
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEAD_LETTERED
    assert [a["kind"] for a in alerts(broker)].count("NotificationForRejectedOrder") == 1


def test_a_look_again_whose_refusal_write_lost_its_response_finishes_the_refusal_on_its_copy(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    ctx, seq = waiting_with_its_look_again(functions, ctx, broker, monkeypatch)
    clock.advance(ctx.settings.defer_retry_delay)
    lossy = context_with(ctx, deferrals=SaveLandsUnanswered(ctx.deferrals, 2))  # the 1st save records it again
    assert deliver(functions, broker)  # the look again: the refusal's write lands, its response is lost
    ctx = context_with(lossy, deferrals=ctx.deferrals)
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEAD_LETTERED

    clock.advance(ctx.settings.defer_retry_delay)
    deliver_all(functions, broker)  # the look again's store-retry copy
    assert_dead_lettered_with_its_alert(ctx, broker, seq)


def test_a_copy_finished_as_recorded_settles_its_originals_entry_too(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    """The copy's decision settles its original's entry (the same notification, recorded under another number
    and then copied). Before it did so in the write of its own outcome, it did so after it, and a store failure
    between the two left the original's entry waiting for a message that is gone, later reported
    ``DeferredMessageExpired`` (harsh refusal profile, 150 orders, seed 6). A document so left (by that version,
    or by a write whose response was lost) is finished as recorded by the copy's look again, which settles the
    original's entry as its decision would have."""
    send(broker, notification())
    original = deliver_unsettled(functions, broker)  # recorded, its look again sent, its defer lost with its lock
    refused(functions, ctx, broker, monkeypatch)  # its order refused meanwhile (the message held: left)
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))
    redelivered = broker.receive(ORDERS_QUEUE)
    assert redelivered is not None and redelivered.sequence_number == original
    with while_using(ctx, states=FailsOnCall(ctx.states, "get", 1)):
        deliver_message(functions, broker, redelivered)  # a store failure: copied, the original completed
    clock.advance(STORE_RETRY_DELAYS[0])
    copied = next(m for m in iter(lambda: broker.receive(ORDERS_QUEUE), None) if is_notification(m))
    with while_using(ctx, states=FailsOnCall(ctx.states, "get", 2)):
        deliver_message(functions, broker, copied)  # recorded, its second look fails: deferred, its look again sent
    copy = int(copied.sequence_number)
    assert deferred_sequence_numbers(broker) == [copy]

    # the copy's refusal written alone, as that version's first write was
    assert resolve_refused(ctx, "p1", copy, "OrderRejected: order p1 was rejected by admission control (MAX_PENDING)")
    assert ctx.deferrals.get("p1").entry(original).status is EntryStatus.DEFERRED

    clock.advance(ctx.settings.defer_retry_delay)
    deliver_all(functions, broker)  # the copy's look again finishes it
    assert deferred_sequence_numbers(broker) == []
    assert ctx.deferrals.get("p1").entry(original).status is EntryStatus.DEAD_LETTERED
    assert [d.reason for d in broker.dead_letters(ORDERS_QUEUE)] == ["OrderRejected"]


def deliver_message(functions: Any, broker: Any, message: Any) -> None:
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=message, message_actions=broker.actions, client=DurableClientStub()))


def is_notification(message: Any) -> bool:
    return bool(json.loads(message.body)["type"] == "PaymentNotification")


def retries(message: Any, seq: int) -> bool:
    body = json.loads(message.body)
    return bool(body["type"] == "RetryDeferred" and body["sequenceNumber"] == seq)
