"""A payment notification for an order whose refusal stands is dead-lettered ``OrderRejected`` and listed on the
order's deferral document (``refusedNotifications``), to be named to an operator when a later submission of the
order is accepted. The decision is made on the document as recorded moments before; the write that resolves the
entry re-reads the document if another writer came first. A submission accepted between the two (the refusal
withdrawn, the state record written, the list found empty) flags nothing, and the notification listed after it
was never named to anyone: the payment of a live order sat in the dead-letter queue, the only alert saying its
order was refused.

The write now finds the refusal withdrawn and resolves nothing: the notification waits for its order (a look
again on delivery; a deferred one stays deferred, with its look again), and is applied to it.

Through the registered trigger, the in-process broker and Cosmos, as tests/deferral/test_refusal_written_first.py;
the rule on the pure document (domain/deferral.py ``refused_notification``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE
from domain.deferral import DeferralDocument, EntryStatus, accepted, refused_notification, rejected
from settings import Settings
from tests.contexts import context_with
from tests.deferral.support import DurableClientStub, deferred_sequence_numbers, deliver, notification, order
from tests.deferral.test_refusal_written_first import Cap, alert_kinds, submit, told
from tests.deferral.test_refused_notifications_flagged import flagged, waiting

T = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)


class AcceptedBeforeTheDeadLetterWrite:
    """The deferral log, where the write that would dead-letter a waiting notification's entry is preceded by the
    delivery of the next ``orders`` message (another submission of the order, handled by another instance in the
    meantime): once."""

    def __init__(self, log: Any, functions: Any, broker: Any) -> None:
        self._log, self._functions, self._broker = log, functions, broker
        self.interleaved = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def save(self, doc: DeferralDocument) -> DeferralDocument:
        stored = self._log.get(doc.order_id) if not self.interleaved else None
        if stored is not None and any(
            e.status is EntryStatus.DEAD_LETTERED
            and (s := stored.entry(e.sequence_number)) is not None
            and s.status is EntryStatus.DEFERRED
            for e in doc.entries
        ):
            self.interleaved = True
            assert deliver(self._functions, self._broker, DurableClientStub())
        saved: DeferralDocument = self._log.save(doc)
        return saved


@pytest.mark.cosmos
def test_a_notification_decided_while_the_refusal_is_withdrawn_waits_for_the_accepted_order(
    functions, ctx, broker, clock, monkeypatch
):
    """Input: M1 (prepaid order p1) is refused by the pending cap. Notification n-1 is delivered: recorded, its
    order missing and refused; before its entry is resolved ``DeadLettered``, M2 (p1 again) is handled by another
    instance, the cap having room: the refusal withdrawn, the state record written, nothing listed to flag.

    Expected: n-1 is not dead-lettered: it waits for the order (deferred, looked at again) and is applied to it;
    nothing is left listed that no alert names.
    Before: n-1's write listed it and it was dead-lettered ``OrderRejected`` after the acceptance had flagged
    nothing: its payment stayed in the dead-letter queue, named by no ``NotificationsForAcceptedOrder`` alert."""
    cap = Cap(monkeypatch, full=True)
    submit(broker, order())
    assert deliver(functions, broker)  # M1 refused
    cap.full = False
    submit(broker, notification(), "n-1")
    submit(broker, order(), "p1:again")
    racing = AcceptedBeforeTheDeadLetterWrite(ctx.deferrals, functions, broker)
    with_race = context_with(ctx, deferrals=racing)
    assert deliver(functions, broker)  # n-1, and M2 in the middle
    assert racing.interleaved
    context_with(with_race, deferrals=ctx.deferrals)
    assert told(broker) == ["Rejected", "Received"]

    clock.advance(Settings.from_env({}).defer_retry_delay)
    while deliver(functions, broker):  # n-1's look again
        pass
    assert broker.dead_letters(ORDERS_QUEUE) == []
    assert ctx.states.get("p1").payment is not None
    assert deferred_sequence_numbers(broker) == []
    assert not ctx.deferrals.get("p1").to_flag()
    assert "NotificationForRejectedOrder" not in alert_kinds(broker) and flagged(broker) == []


def test_a_withdrawn_refusal_dead_letters_and_lists_nothing() -> None:
    """The pure rule: the write finds the refusal withdrawn (``rejectedAt`` cleared by an accepted submission):
    the entry is left waiting and nothing is listed; while the refusal stands, it is resolved and listed."""
    doc = waiting(rejected(DeferralDocument.empty("p1", T), T, 7), 1)
    withdrawn = accepted(doc, T)
    assert refused_notification(withdrawn, 1, T, "OrderRejected: refused") == withdrawn
    standing = refused_notification(doc, 1, T, "OrderRejected: refused")
    entry = standing.entry(1)
    assert entry is not None and entry.status is EntryStatus.DEAD_LETTERED
    assert [r.sequence_number for r in standing.refused_notifications] == [1]


@pytest.mark.cosmos
def test_a_waiting_notification_released_while_the_refusal_is_withdrawn_is_applied_not_dead_lettered(
    functions, ctx, broker, clock, monkeypatch
):
    """Input: notification n-1 waits (deferred) for prepaid order p1. M1 (p1) is refused by the pending cap and
    releases n-1 (fetched to be dead-lettered); before n-1's entry is resolved, M2 (p1 again) is handled by
    another instance, the cap having room: the refusal withdrawn, the state record written.

    Expected: n-1 is applied to the order, not dead-lettered; nothing is left listed; M1 tells nothing.
    Before: M1 dead-lettered n-1 ``OrderRejected`` after M2 had accepted the order (and, when M2 applied n-1 on
    its own first, dead-lettered a payment that was applied)."""
    submit(broker, notification(), "n-1")
    assert deliver(functions, broker)
    assert len(deferred_sequence_numbers(broker)) == 1
    cap = Cap(monkeypatch, full=True)
    submit(broker, order())
    submit(broker, order(), "p1:again")
    racing = AcceptedBeforeTheDeadLetterWrite(ctx.deferrals, functions, broker)
    with_race = context_with(ctx, deferrals=racing)
    save = racing.save

    def room_after_the_refusal(doc: DeferralDocument) -> DeferralDocument:
        cap.full = cap.full and doc.rejected_at is None  # room once M1's refusal is written
        return save(doc)

    monkeypatch.setattr(racing, "save", room_after_the_refusal)
    assert deliver(functions, broker)  # M1, and M2 in the middle
    assert racing.interleaved
    context_with(with_race, deferrals=ctx.deferrals)
    # M2's alone: M1 looks for the record again once it released n-1, finds it and tells nothing (it told
    # ``Rejected`` after M2's ``Received`` before: red team, races)
    assert told(broker) == ["Received"]

    clock.advance(Settings.from_env({}).defer_retry_delay)
    while deliver(functions, broker):  # n-1's look again
        pass
    assert broker.dead_letters(ORDERS_QUEUE) == []
    assert ctx.states.get("p1").payment is not None
    assert not ctx.deferrals.get("p1").to_flag()
    assert "NotificationForRejectedOrder" not in alert_kinds(broker) and flagged(broker) == []
