"""A notification recorded as waiting for its order, then abandoned (its look again could not be sent) and
redelivered into a store failure, is copied (``submission.store_outage``: a new sequence number, the original
completed): its entry waits for a message that is gone, and the copy, when it is decided, settles it. When
the order was refused in between, the refusal's release of the waiting notifications found the message gone
and reported it ``DeferredMessageExpired`` at once (red team on 1e5441b: every such alert of the harsh
refusal profile, seeds 6 to 8, was this one), then the copy was dead-lettered ``OrderRejected`` and corrected
the entry. A submission of the order now leaves an absent entry younger than ``PEEK_SWEEP_AGE_MINUTES`` to
the copy that may be due, as a ``RetryDeferred`` and ``make_room`` do. Through the registered trigger, the
in-process broker and the Cosmos protocol server."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE
from domain.deferral import EntryStatus
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import context_with
from tests.deferral.support import alerts, deferred_sequence_numbers, deliver, deliver_all, notification, send
from tests.deferral.test_deferred_all_the_same_looks_again import FailsOnCall, refused
from tests.deferral.test_refusal_written_first import SendsFailing

pytestmark = pytest.mark.cosmos


def test_a_refusal_leaves_a_young_entry_whose_message_was_copied_to_its_copy(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    failing = context_with(ctx, sender=SendsFailing(broker, ORDERS_QUEUE))
    send(broker, notification())
    assert deliver(functions, broker)  # recorded; its look again could not be sent: abandoned
    [entry] = ctx.deferrals.get("p1").entries
    blipping = context_with(failing, sender=broker, states=FailsOnCall(ctx.states, "get", 1))
    assert deliver(functions, broker)  # redelivered into a store failure: copied, the original completed
    ctx = context_with(blipping, states=ctx.states)
    assert deferred_sequence_numbers(broker) == []
    assert ctx.deferrals.get("p1").entry(entry.sequence_number).status is EntryStatus.DEFERRED

    refused(functions, ctx, broker, monkeypatch)
    assert "DeferredMessageExpired" not in [a["kind"] for a in alerts(broker)]

    clock.advance(STORE_RETRY_DELAYS[0])
    deliver_all(functions, broker)  # the copy: dead-lettered, its order refused; the original's entry with it
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert dead.reason == "OrderRejected"
    assert ctx.deferrals.get("p1").entry(entry.sequence_number).status is EntryStatus.DEAD_LETTERED
    assert "DeferredMessageExpired" not in [a["kind"] for a in alerts(broker)]
