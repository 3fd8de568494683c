"""A payment notification recorded as waiting for its order, whose second look decides it (dead-lettered for a
refused order) with a write whose response is lost after it landed (``StoreOutcomeUnknown``): its entry is
resolved, so the look again that "deferred all the same" scheduled found nothing to do and completed, and the
message stayed deferred until the peek sweep settled it as recorded, ten minutes and more later (a
refusal-then-acceptance profile, 150 orders, seed 8: ``stranded_messages`` and ``unmatched_notifications``
at the run's end). It is abandoned instead and decided again on its redelivery. Through the registered trigger,
the in-process broker and the Cosmos protocol server."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.cosmos.errors import StoreOutcomeUnknown
from contracts.names import ORDERS_QUEUE
from deferral.tracking import resolve
from domain.deferral import EntryStatus
from tests.contexts import context_with
from tests.deferral.support import deferred_sequence_numbers, deliver, deliver_all, notification, send
from tests.deferral.test_deferred_all_the_same_looks_again import refused
from tests.deferral.test_retry_sweep_expiry import scheduled_retries

pytestmark = pytest.mark.cosmos


class SecondSaveLandsUnanswered:
    """The deferral log, whose second ``save`` is written and then answered by no response."""

    def __init__(self, inner: Any) -> None:
        self._inner, self._calls = inner, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def save(self, doc: Any) -> Any:
        self._calls += 1
        saved = self._inner.save(doc)
        if self._calls == 2:
            raise StoreOutcomeUnknown("Cosmos DB: no response to save (the write committed)")
        return saved


def test_a_refused_orders_notification_whose_dead_letter_write_lands_unanswered_is_dead_lettered_at_once(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    refused(functions, ctx, broker, monkeypatch)
    lossy = context_with(ctx, deferrals=SecondSaveLandsUnanswered(ctx.deferrals))
    send(broker, notification())
    assert deliver(functions, broker)  # recorded (save 1), its refusal's write landed unanswered (save 2)
    context_with(lossy, deferrals=ctx.deferrals)
    [entry] = ctx.deferrals.get("p1").entries
    assert entry.status is EntryStatus.DEAD_LETTERED
    assert deferred_sequence_numbers(broker) == [] and scheduled_retries(broker) == []  # abandoned, not deferred

    deliver_all(functions, broker)  # its redelivery, at once
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert (dead.sequence_number, dead.reason) == (entry.sequence_number, "OrderRejected")
    assert deferred_sequence_numbers(broker) == []
    assert [r.sequence_number for r in ctx.deferrals.get("p1").refused_notifications] == [entry.sequence_number]


def test_a_look_again_for_an_entry_resolved_while_its_message_stayed_deferred_settles_it_as_recorded(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    """The write that decided a deferred notification landed and its settlement did not happen (the handler's
    response was lost and it failed, or the host crashed): its look again, finding the entry resolved, settles
    the message as recorded; before, it completed and left the message deferred for the peek sweep."""
    send(broker, notification())  # its order has not arrived: recorded, its look again scheduled, deferred
    assert deliver(functions, broker)
    [seq] = deferred_sequence_numbers(broker)
    assert [r["sequenceNumber"] for r in scheduled_retries(broker)] == [seq]
    resolve(ctx, "p1", seq, EntryStatus.DEAD_LETTERED, "OrderRejected: order p1 was rejected by admission control")

    clock.advance(ctx.settings.defer_retry_delay)
    deliver_all(functions, broker)
    assert deferred_sequence_numbers(broker) == []
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert (dead.sequence_number, dead.reason) == (seq, "OrderRejected")
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEAD_LETTERED
