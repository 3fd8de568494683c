"""Pure rules of an operator's discard of a payment notification deferred for an order that never came
(``domain.deferral.discarded``): which entries may be discarded, what the entry says afterwards (who, why, and the
dead-letter reason whoever settles its message as recorded uses), the same discard posted again, and its take-back
when the order turns out to exist."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from adapters.cosmos.mapping import from_document, to_document
from deferral.apply import recorded_settlement
from domain.deferral import (
    DISCARDED,
    DeferralDocument,
    DeferralReason,
    DeferredEntry,
    EntryStatus,
    discard_taken_back,
    discarded,
    discarded_as,
    why_not_discardable,
    with_entry,
    with_status,
)

NOW = datetime(2026, 3, 1, tzinfo=UTC)
LATER = NOW + timedelta(hours=3)


def waiting(seq: int = 7, **changes: object) -> DeferredEntry:
    entry = DeferredEntry(
        sequence_number=seq,
        message_id="n-1",
        message_type="PaymentNotification",
        reason=DeferralReason.ORDER_NOT_SUBMITTED,
        deferred_at=NOW,
        recorded_by="submission",
        updated_at=NOW,
        notification_id="n-1",
        notification_digest="d" * 32,
    )
    return replace(entry, **changes)  # type: ignore[arg-type]


def doc_with(*entries: DeferredEntry) -> DeferralDocument:
    doc = DeferralDocument.empty("p1", NOW)
    for entry in entries:
        doc = with_entry(doc, entry, NOW)
    return doc


def test_a_waiting_orderless_notification_is_discarded_with_who_and_why_as_a_dead_letter():
    doc = discarded(doc_with(waiting()), 7, "ops@contoso", "refunded at the provider", LATER)
    entry = doc.entry(7)
    assert entry is not None
    assert entry.status is EntryStatus.DEAD_LETTERED
    assert (entry.discarded_by, entry.discard_reason, entry.updated_at) == (
        "ops@contoso",
        "refunded at the provider",
        LATER,
    )
    assert doc.waiting() == []  # an order submitted later finds nothing to apply
    # whoever finds its message still deferred dead-letters it as recorded, never completes it
    settle = recorded_settlement(entry)
    assert settle is not None and settle.kind == "deadletter" and settle.reason == DISCARDED
    assert settle.description is not None
    assert "ops@contoso" in settle.description and "refunded at the provider" in settle.description
    # kept through the store's mapping
    assert from_document(DeferredEntry, to_document(entry)) == entry


def test_only_a_payment_waiting_for_its_order_may_be_discarded():
    assert why_not_discardable(waiting()) is None
    for entry, said in [
        (waiting(reason=DeferralReason.DEPENDENCY_UNAVAILABLE, rounds=1), "DependencyUnavailable"),
        (waiting(status=EntryStatus.APPLIED, detail="applied"), "Applied already"),
        (waiting(status=EntryStatus.EXPIRED), "Expired already"),
        (waiting(status=EntryStatus.DEAD_LETTERED, detail="OrderRejected: refused"), "OrderRejected"),
    ]:
        why = why_not_discardable(entry)
        assert why is not None and said in why, (entry, why)
        doc = DeferralDocument.empty("p1", NOW)
        doc = replace(doc, entries=[entry])
        assert discarded(doc, 7, "ops", "refund", LATER) == doc  # unchanged


def test_the_same_discard_is_recognised_and_another_is_not():
    doc = discarded(doc_with(waiting()), 7, "ops@contoso", "refund", LATER)
    entry = doc.entry(7)
    assert entry is not None
    assert discarded_as(entry, "ops@contoso", "refund")
    assert not discarded_as(entry, "other@contoso", "refund")
    assert not discarded_as(entry, "ops@contoso", "another reason")
    # discarded twice: the first stands
    again = discarded(doc, 7, "other@contoso", "mine", LATER + timedelta(minutes=1))
    assert again == doc
    assert not discarded_as(waiting(), "ops@contoso", "refund")


def test_a_discard_is_taken_back_by_its_operator_only_while_it_is_still_the_entrys_outcome():
    before = doc_with(waiting())
    doc = discarded(before, 7, "ops", "refund", LATER)
    back = discard_taken_back(doc, 7, "ops", LATER)
    entry = back.entry(7)
    assert entry is not None and entry.status is EntryStatus.DEFERRED
    assert (entry.detail, entry.discarded_by, entry.discard_reason) == ("", "", "")
    assert [e.sequence_number for e in back.waiting()] == [7]
    assert discard_taken_back(doc, 7, "someone else", LATER) == doc
    # the order's submission applied it meanwhile: Applied stands, nothing to take back
    applied = with_status(doc, 7, EntryStatus.APPLIED, LATER, "applied")
    assert discard_taken_back(applied, 7, "ops", LATER) == applied


def test_a_late_record_of_the_same_message_does_not_reopen_a_discard():
    doc = discarded(doc_with(waiting()), 7, "ops", "refund", LATER)
    assert with_entry(doc, waiting(), LATER) == doc
    # nor does an expiry found later replace it
    assert with_status(doc, 7, EntryStatus.EXPIRED, LATER, "gone") == doc


def test_a_copys_originals_are_resolved_with_it_and_taken_back_with_it():
    original, other = waiting(3), waiting(4, notification_id="n-2")
    copy = waiting(9, message_id="n-1:store-retry:1:3:x")
    doc = discarded(doc_with(original, other, copy), 9, "ops", "refund", LATER, originals=[3, 12])
    entries = {e.sequence_number: e for e in doc.entries}
    assert entries[3].status is EntryStatus.DEAD_LETTERED
    assert entries[3].detail == f"{DISCARDED}: decided on its copy #9, discarded by operator ops"
    assert entries[4].status is EntryStatus.DEFERRED  # not named: another notification
    back = discard_taken_back(doc, 9, "ops", LATER)
    assert {e.sequence_number for e in back.waiting()} == {3, 4, 9}
