"""Recording deferred sequence numbers and what became of them, in the order's deferral document."""

from __future__ import annotations

from adapters.cosmos.deferral_store import update_deferrals
from adapters.servicebus.settlement import ReceivedMessage
from contracts.messages import PaymentNotification
from dependencies import AppContext
from domain.deferral import DeferralDocument, DeferralReason, DeferredEntry, EntryStatus, with_entry, with_status
from domain.payments import notification_digest
from observability.events import app_event


def record_deferred(
    ctx: AppContext,
    order_id: str,
    message: ReceivedMessage,
    message_type: str,
    reason: DeferralReason,
    *,
    note: PaymentNotification,
    rounds: int = 0,
    recorded_by: str = "submission",
) -> DeferralDocument:
    """Tracks ``message`` (about to be deferred, or found deferred) under its order. Idempotent by
    sequence number. Written BEFORE the message is deferred: a crash in between leaves a record
    of a message that is redelivered (and recorded again), never a deferred message nobody knows.
    ``note``: the notification the message carries (its id and digest are kept, to recognise a copy).
    A dependency's deferral records when its round's ``RetryDeferred`` is due, ``DEFER_RETRY_DELAY_SECONDS``
    from now (the same round recorded again keeps the first due time): schedule it for the entry's
    ``retry_due_at`` as returned."""
    sequence_number = message.sequence_number
    if sequence_number is None:
        raise ValueError(f"message {message.message_id} has no sequence number")
    now = ctx.clock.now()
    entry = DeferredEntry(
        sequence_number=sequence_number,
        message_id=message.message_id or "",
        message_type=message_type,
        reason=reason,
        deferred_at=now,
        recorded_by=recorded_by,
        rounds=rounds,
        updated_at=now,
        retry_due_at=now + ctx.settings.defer_retry_delay if reason is DeferralReason.DEPENDENCY_UNAVAILABLE else None,
        retry_token=f"{ctx.unguessable.getrandbits(128):032x}",  # kept only if the entry is new (with_entry)
        notification_id=note.notification_id,
        notification_digest=notification_digest(note),
    )
    doc = update_deferrals(ctx.deferrals, order_id, lambda d: with_entry(d, entry, now), now)
    app_event(
        "MessageDeferred",
        f"{message_type} {message.message_id} of order {order_id} deferred as #{sequence_number} ({reason.value})",
        orderId=order_id,
        sequenceNumber=sequence_number,
        reason=reason.value,
        rounds=rounds,
        recordedBy=recorded_by,
    )
    return doc


def resolve(
    ctx: AppContext, order_id: str, sequence_number: int, status: EntryStatus, detail: str = ""
) -> EntryStatus | None:
    """Notes what became of a tracked message (unknown sequence numbers: nothing written). Returns the
    entry's status now, which is not ``status`` when an earlier outcome stands (``with_status``)."""
    now = ctx.clock.now()
    doc = update_deferrals(ctx.deferrals, order_id, lambda d: with_status(d, sequence_number, status, now, detail), now)
    entry = doc.entry(sequence_number)
    return entry.status if entry is not None else None


def settle_copied_original(
    ctx: AppContext, note: PaymentNotification, sequence_number: int | None, rejected: bool, reason: str = ""
) -> None:
    """A copy of a notification (``submission.store_outage``: handled again later under a new sequence
    number) was decided: an entry still waiting for the same notification under another number, its
    original's (recorded, then its defer lost with its lock, then redelivered into a store failure and
    copied), takes the copy's outcome instead of being reported expired once found gone (or is
    corrected, if it was found gone already). Only the same notification: another one under the same id
    (``DeferredEntry.carries``) is decided on its own."""
    now = ctx.clock.now()
    digest = notification_digest(note)

    def change(doc: DeferralDocument) -> DeferralDocument:
        for entry in _open(doc):
            if entry.carries(note.notification_id, digest) and entry.sequence_number != sequence_number:
                status = EntryStatus.DEAD_LETTERED if rejected else EntryStatus.APPLIED
                detail = (
                    f"{reason}: decided on its copy #{sequence_number}"
                    if rejected
                    else f"applied as #{sequence_number}"
                )
                doc = with_status(doc, entry.sequence_number, status, now, detail)
        return doc

    doc = ctx.deferrals.get(note.order_id)
    if doc is not None and any(e.carries(note.notification_id, digest) for e in _open(doc)):
        update_deferrals(ctx.deferrals, note.order_id, change, now)


def _open(doc: DeferralDocument) -> list[DeferredEntry]:
    """Entries a copy's outcome may settle: still waiting, or found gone (``Expired``: the order came
    between the copy being made and being decided, the one window left, docs/deferral.md)."""
    return [e for e in doc.entries if e.status in (EntryStatus.DEFERRED, EntryStatus.EXPIRED)]
