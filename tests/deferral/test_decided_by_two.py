"""Two processors deciding one deferred message (submission's recovery, a RetryDeferred, the peek sweep)
now that a message is read by peeking and fetched only to settle (``deferral.apply.process_deferred``).
Red team on 5257408: a message expiring while one processor decided it unlocked was fetched by another,
moved to the dead-letter queue and reported expired (``DeferredMessageExpired``) while the first applied
it. Now a message near its time to live is fetched first, and an outcome once written stands."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import deferral.apply
from deferral.apply import EXPIRY_MARGIN
from deferral.sweep import peek_sweep
from domain.deferral import DeferralDocument, DeferralReason, DeferredEntry, EntryStatus, with_entry, with_status
from tests.deferral.conftest import ORDERS_TTL
from tests.deferral.support import alerts, deferred_sequence_numbers, deliver_all, notification, order, send

NOW = datetime(2026, 5, 1, tzinfo=UTC)


def tracked(status: EntryStatus) -> DeferralDocument:
    entry = DeferredEntry(
        sequence_number=7,
        message_id="n-7",
        message_type="PaymentNotification",
        reason=DeferralReason.ORDER_NOT_SUBMITTED,
        deferred_at=NOW,
        recorded_by="submission",
        updated_at=NOW,
    )
    return with_status(with_entry(DeferralDocument.empty("p1", NOW), entry, NOW), 7, status, NOW)


@pytest.mark.parametrize("first", [EntryStatus.APPLIED, EntryStatus.DEAD_LETTERED])
def test_expired_never_replaces_an_outcome_and_applied_is_never_replaced(first: EntryStatus) -> None:
    doc = tracked(first)
    assert with_status(doc, 7, EntryStatus.EXPIRED, NOW).entry(7).status is first  # type: ignore[union-attr]
    if first is EntryStatus.APPLIED:
        assert with_status(doc, 7, EntryStatus.DEAD_LETTERED, NOW).entry(7).status is first  # type: ignore[union-attr]
    expired = tracked(EntryStatus.EXPIRED)
    assert with_status(expired, 7, EntryStatus.APPLIED, NOW).entry(7).status is EntryStatus.APPLIED  # type: ignore[union-attr]


@pytest.mark.cosmos
def test_a_message_near_its_end_is_fetched_before_it_is_decided_so_a_second_processor_finds_it_locked(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    send(broker, notification())
    deliver_all(functions, broker)  # deferred; its look again finds no order
    [seq] = deferred_sequence_numbers(broker)
    clock.advance(ORDERS_TTL - timedelta(seconds=1) - (clock.now() - datetime(2026, 1, 1, tzinfo=UTC)) % ORDERS_TTL)
    assert timedelta(seconds=1) < EXPIRY_MARGIN

    real = deferral.apply.apply_notification  # type: ignore[attr-defined]
    swept: list[Any] = []

    def slow(c: Any, note: Any, s: int, *, owed: Any) -> Any:  # the sweep runs while the recovery decides
        clock.advance(timedelta(seconds=2))
        swept.append(peek_sweep(ctx))
        return real(c, note, s, owed=owed)

    monkeypatch.setattr(deferral.apply, "apply_notification", slow)
    send(broker, order())
    deliver_all(functions, broker)  # the due look again (not fetched: no order yet), then the order
    monkeypatch.setattr(deferral.apply, "apply_notification", real)

    assert swept and swept[0].expired == 0
    assert "DeferredMessageExpired" not in [a["kind"] for a in alerts(broker)]
    entry = ctx.deferrals.get("p1").entry(seq)
    payment = ctx.states.get("p1").payment
    assert (entry.status is EntryStatus.APPLIED) == (payment is not None and payment.sequence_number == seq)


@pytest.mark.cosmos
def test_a_message_found_gone_after_another_processor_resolved_its_entry_raises_no_expiry_alert(
    functions: Any, ctx: Any, broker: Any
) -> None:
    from contracts.names import ORDERS_QUEUE
    from deferral.apply import account_for_absent
    from deferral.tracking import resolve

    send(broker, notification())
    deliver_all(functions, broker)
    [seq] = deferred_sequence_numbers(broker)
    resolve(ctx, "p1", seq, EntryStatus.DEAD_LETTERED, "decided by another processor")
    with ctx.deferred.open(ORDERS_QUEUE) as receiver:
        [message] = receiver.receive_deferred([seq])
        receiver.complete(message)  # gone from the queue
        assert account_for_absent(ctx, receiver, "p1", seq) == "resolved"
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEAD_LETTERED
    assert alerts(broker) == []


@pytest.mark.cosmos
def test_a_tracked_message_gone_whose_copy_was_applied_is_resolved_applied_without_an_alert(
    functions: Any, ctx: Any, broker: Any
) -> None:
    """A tracked notification handled again later as a copy (``submission.store_outage``: a new sequence
    number): when the copy was applied first, the tracked number found gone is recognised by the
    notification id it was recorded with, not reported expired."""
    from contracts.names import ORDERS_QUEUE
    from deferral.apply import account_for_absent

    send(broker, notification())
    deliver_all(functions, broker)
    [seq] = deferred_sequence_numbers(broker)
    assert ctx.deferrals.get("p1").entry(seq).notification_id == "n-1"
    with ctx.deferred.open(ORDERS_QUEUE) as receiver:
        [message] = receiver.receive_deferred([seq])
        receiver.complete(message)  # as a store-retry copy completes its original
    send(broker, notification(), message_id="n-1:store-retry:1:99")  # the copy: deferred too, a new number
    deliver_all(functions, broker)
    send(broker, order())  # its submission applies the copy, then finds the tracked number gone
    deliver_all(functions, broker)
    payment = ctx.states.get("p1").payment
    assert payment is not None and payment.notification_id == "n-1" and payment.sequence_number != seq
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    with ctx.deferred.open(ORDERS_QUEUE) as receiver:
        assert account_for_absent(ctx, receiver, "p1", seq) == "applied"
    assert "DeferredMessageExpired" not in [a["kind"] for a in alerts(broker)]
