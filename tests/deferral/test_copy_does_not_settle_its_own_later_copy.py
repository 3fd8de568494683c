"""A store-retry copy decided settles the entries its originals left (the same notification under a lower
sequence number: a copy is sent after its original was received), never the entry of a later copy made from it
(a higher number): that message is still deferred on the queue, and an entry no longer waiting is one nothing
fetches again. Harsh refusal profile, 300 orders, seed 1: notification #535 copied as #1159, whose redelivery was
copied again as #1530 (its completion lost) and then dead-lettered ``OrderRejected`` when its order was refused;
the refusal took #1530's entry with it ("decided on its copy #1159"), so the refusal's release, which fetches
only waiting entries, left #1530 deferred on ``orders`` for good. Through the Cosmos protocol server."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.cosmos.deferral_store import update_deferrals
from contracts.messages import PaymentNotification
from deferral.payment import PaymentOutcome
from deferral.tracking import resolve_decided, resolve_refused
from domain.deferral import DeferralReason, DeferredEntry, EntryStatus, rejected, with_entry
from domain.payments import notification_digest
from tests.deferral.support import notification

pytestmark = pytest.mark.cosmos

ORIGINAL, COPY, LATER_COPY = 535, 1159, 1530


def _tracked(ctx: Any, note: PaymentNotification, *, refused: bool) -> None:
    now = ctx.clock.now()

    def change(doc: Any) -> Any:
        for seq in (ORIGINAL, COPY, LATER_COPY):
            entry = DeferredEntry(
                sequence_number=seq,
                message_id=f"{note.notification_id}-{seq}",
                message_type="PaymentNotification",
                reason=DeferralReason.ORDER_NOT_SUBMITTED,
                deferred_at=now,
                recorded_by="submission",
                updated_at=now,
                notification_id=note.notification_id,
                notification_digest=notification_digest(note),
            )
            doc = with_entry(doc, entry, now)
        return rejected(doc, now, 7) if refused else doc

    update_deferrals(ctx.deferrals, note.order_id, change, now)


def _statuses(ctx: Any) -> dict[int, EntryStatus]:
    return {e.sequence_number: e.status for e in ctx.deferrals.get("p1").entries}


def test_a_refused_copy_settles_its_original_but_leaves_its_later_copy_waiting(ctx: Any) -> None:
    note = PaymentNotification.model_validate(notification())
    _tracked(ctx, note, refused=True)
    assert resolve_refused(ctx, "p1", COPY, "OrderRejected: its order was rejected", copy_of=note)
    assert _statuses(ctx) == {
        ORIGINAL: EntryStatus.DEAD_LETTERED,
        COPY: EntryStatus.DEAD_LETTERED,
        LATER_COPY: EntryStatus.DEFERRED,
    }
    doc = ctx.deferrals.get("p1")
    assert [e.sequence_number for e in doc.waiting(DeferralReason.ORDER_NOT_SUBMITTED)] == [LATER_COPY]


def test_a_copy_decided_when_fetched_settles_its_original_but_leaves_its_later_copy_waiting(ctx: Any) -> None:
    note = PaymentNotification.model_validate(notification())
    _tracked(ctx, note, refused=False)
    mismatch = PaymentOutcome("rejected", reason="PaymentAmountMismatch", description="not the order's total")
    assert resolve_decided(ctx, note, COPY, mismatch, copy=True) is EntryStatus.DEAD_LETTERED
    assert _statuses(ctx) == {
        ORIGINAL: EntryStatus.DEAD_LETTERED,
        COPY: EntryStatus.DEAD_LETTERED,
        LATER_COPY: EntryStatus.DEFERRED,
    }
