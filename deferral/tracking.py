"""Recording deferred sequence numbers and what became of them, in the order's deferral document."""

from __future__ import annotations

from adapters.cosmos.deferral_store import update_deferrals
from adapters.servicebus.settlement import ReceivedMessage, message_id_text
from contracts.messages import PaymentNotification
from deferral.payment import PaymentOutcome
from dependencies import AppContext
from domain.deferral import (
    DeferralDocument,
    DeferralReason,
    DeferredEntry,
    EntryStatus,
    gone,
    listed_as_copy,
    refused_notification,
    with_entry,
    with_status,
)
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
    message_id = message_id_text(message)
    if sequence_number is None:
        raise ValueError(f"message {message_id} has no sequence number")
    now = ctx.clock.now()
    entry = DeferredEntry(
        sequence_number=sequence_number,
        message_id=message_id or "",
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
        f"{message_type} {message_id} of order {order_id} deferred as #{sequence_number} ({reason.value})",
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


def resolve_decided(
    ctx: AppContext, note: PaymentNotification, sequence_number: int, outcome: PaymentOutcome, *, copy: bool
) -> EntryStatus | None:
    """``resolve`` of the entry of message ``sequence_number``, carrying ``note``, fetched by its sequence number
    and decided (``outcome``: applied, a repeat, or rejected): ``Applied``, or ``DeadLettered`` with the reason.
    For a store-retry ``copy``, in that same write, the entries its originals left (the same notification under
    other numbers, ``settle_decided``'s matching) take its outcome too, unless an earlier outcome of its own
    stands (``Applied``, where this one is a rejection). Written apart (a read and a write after this one), a
    store failure between the two left the copy resolved, no longer among the messages its order's submission
    recovers, and its originals waiting for a message that was gone, reported ``DeferredMessageExpired`` (a copy
    rejected, e.g. ``PaymentAmountMismatch``) once found gone. Returns the entry's status now."""
    now = ctx.clock.now()
    rejected = outcome.kind == "rejected"
    status = EntryStatus.DEAD_LETTERED if rejected else EntryStatus.APPLIED
    detail = f"{outcome.reason}: {outcome.description}" if rejected else outcome.kind

    def change(doc: DeferralDocument) -> DeferralDocument:
        doc = with_status(doc, sequence_number, status, now, detail)
        entry = doc.entry(sequence_number)
        if not copy or (entry is not None and entry.status is not status):
            return doc
        for seq, why in _to_settle(doc, note, sequence_number, outcome, copy=True):
            if seq != sequence_number:
                doc = with_status(doc, seq, status, now, why)
        return doc

    doc = update_deferrals(ctx.deferrals, note.order_id, change, now)
    entry = doc.entry(sequence_number)
    return entry.status if entry is not None else None


def resolve_gone(ctx: AppContext, order_id: str, sequence_number: int, detail: str) -> tuple[EntryStatus | None, bool]:
    """``resolve`` as ``Expired`` for a waiting entry whose message is no longer on the queue (``gone``: listed
    among the notifications dead-lettered under a refusal if one of its order stands). Returns the entry's status
    now (not ``Expired`` when an earlier outcome stands) and whether the order's refusal stands."""
    now = ctx.clock.now()
    doc = update_deferrals(ctx.deferrals, order_id, lambda d: gone(d, sequence_number, now, detail), now)
    entry = doc.entry(sequence_number)
    return (entry.status if entry is not None else None), doc.rejected_at is not None


def resolve_refused(
    ctx: AppContext, order_id: str, sequence_number: int, detail: str, *, copy_of: PaymentNotification | None = None
) -> bool:
    """``resolve`` as ``DeadLettered`` for a notification whose order a refusal stands for, listing it on the
    document in the same write (``refused_notification``), before it is dead-lettered: if a later submission
    of the order is accepted, the alert that names it is raised from that list (``submission.intake``).
    ``copy_of``: the notification, when the message is a store-retry copy; then, in that same write, the entries
    its originals left (the same notification under other numbers, ``settle_decided``) take the refusal too, and
    one listed already (found gone while the refusal stood) is taken off: the copy, listed, is named in its stead.
    Written apart (a read and a write after this one), a store failure between the two left the copy resolved
    and its originals waiting, reported ``DeferredMessageExpired`` for the refused order once found gone (a
    refusal's release no longer looks at a resolved entry, and the copy's look again may be spent already).
    Returns whether it is to be dead-lettered: False when the write found the refusal withdrawn (a submission
    of the order accepted since the notification was decided) and its entry not dead-lettered already: then
    nothing was written, and the notification is to wait for its order."""
    now = ctx.clock.now()
    refused = PaymentOutcome("rejected", reason=detail.partition(": ")[0], description=detail.partition(": ")[2])

    def change(doc: DeferralDocument) -> DeferralDocument:
        doc = refused_notification(doc, sequence_number, now, detail)
        if copy_of is None or doc.rejected_at is None:
            return doc
        for seq, why in _to_settle(doc, copy_of, sequence_number, refused, copy=True):
            doc = with_status(doc, seq, EntryStatus.DEAD_LETTERED, now, why)
            doc = listed_as_copy(doc, seq, sequence_number)  # named once, as the message in the dead-letter queue
        return doc

    doc = update_deferrals(ctx.deferrals, order_id, change, now)
    entry = doc.entry(sequence_number)
    return doc.rejected_at is not None or (entry is not None and entry.status is EntryStatus.DEAD_LETTERED)


def settle_decided(
    ctx: AppContext,
    note: PaymentNotification,
    sequence_number: int | None,
    outcome: PaymentOutcome,
    *,
    copy: bool,
    doc: DeferralDocument | None = None,
) -> None:
    """``note``, carried by message ``sequence_number``, was decided where it was delivered (applied, a
    repeat, or rejected) and is about to be settled so: the entries that would otherwise wait for a
    message that is no longer coming take its outcome, in one read of the order's document (and one
    write, only if an entry changes).

    * Its own sequence number's: an earlier delivery of this very message recorded it as deferred and
      was never deferred (the host stopped between the two, or its ``RetryDeferred`` or look again
      could not be sent), so nothing else would ever resolve it (no message to fetch, no retry in
      flight, nothing for the peek sweep to find). A Python trigger sees no delivery count, and a
      failed invocation is redelivered at once, so every delivery may be such a redelivery: the
      document is read whatever the message says. An entry an earlier delivery resolved ``DeadLettered``
      takes an outcome that completes the message (applied, or a repeat of the payment on the record):
      that dead-lettering never reached Service Bus (the message is here), so the entry says what became
      of it, and a notification listed as dead-lettered under a refusal of its order
      (``refusedNotifications``) is taken off (``with_status``): no alert asks to resubmit it.
    * For a ``copy`` (``submission.store_outage``: handled again later under a new sequence number),
      its original's: an entry still waiting for the same notification under another number (recorded,
      then its defer lost with its lock, then redelivered into a store failure and copied) takes the
      copy's outcome instead of being reported expired once found gone (or is corrected, if it was
      found gone already). Only the same notification: another one under the same id
      (``DeferredEntry.carries``) is decided on its own; an entry stored before digests were kept takes
      only an "applied" so, never a rejection (it may be the real payment, waiting for its retry).

    ``doc``: the order's document as the caller just read or wrote it (not read again to find out
    whether there is anything to settle)."""
    now = ctx.clock.now()
    status = EntryStatus.DEAD_LETTERED if outcome.kind == "rejected" else EntryStatus.APPLIED

    def change(doc: DeferralDocument) -> DeferralDocument:
        for seq, detail in _to_settle(doc, note, sequence_number, outcome, copy=copy):
            doc = with_status(doc, seq, status, now, detail)
        return doc

    known = doc if doc is not None else ctx.deferrals.get(note.order_id)
    if known is not None and _to_settle(known, note, sequence_number, outcome, copy=copy):
        update_deferrals(ctx.deferrals, note.order_id, change, now)


def _to_settle(
    doc: DeferralDocument,
    note: PaymentNotification,
    sequence_number: int | None,
    outcome: PaymentOutcome,
    *,
    copy: bool,
) -> list[tuple[int, str]]:
    """The entries of ``doc`` that ``settle_decided`` resolves, with the detail each is resolved with."""
    digest = notification_digest(note)
    rejected = outcome.kind == "rejected"
    found: list[tuple[int, str]] = []
    for entry in doc.entries:
        if entry.sequence_number == sequence_number:
            if _open(entry) or (not rejected and entry.status is EntryStatus.DEAD_LETTERED):
                detail = f"{outcome.reason}: {outcome.description}" if rejected else outcome.kind
                found.append((entry.sequence_number, detail))
        elif not _open(entry) or not _before(entry, sequence_number):
            continue
        elif copy and entry.carries(note.notification_id, digest) and (entry.notification_digest or not rejected):
            # an entry recorded before digests (none) is matched by id alone: it takes a copy's
            # "applied" (the payment is on the record), never a rejection, which may be another
            # notification's under the same id (a message can claim to be a copy)
            detail = (
                f"{outcome.reason}: decided on its copy #{sequence_number}"
                if rejected
                else f"applied as #{sequence_number}"
            )
            found.append((entry.sequence_number, detail))
    return found


def _before(entry: DeferredEntry, sequence_number: int | None) -> bool:
    """Whether ``entry`` may be an original of the copy sent as ``sequence_number``: a copy is sent after its
    original was received, so an original has a lower number (sequence numbers on a queue only grow). An entry
    with a higher one is a later copy of this message (made by a delivery of it whose completion was lost, so
    this one came back): still deferred on the queue, it is fetched and decided on its own; settled here, it
    was no longer waiting, and nothing fetched it again (its order's refusal released only waiting entries: a
    copy left deferred for good, harsh-refusals 300 orders seed 1)."""
    return sequence_number is None or entry.sequence_number < sequence_number


def _open(entry: DeferredEntry) -> bool:
    """Whether a decision on delivery may settle ``entry``: still waiting, or found gone (``Expired``: for a
    copy's original, the order came between the copy being made and being decided, the one window left,
    docs/deferral.md)."""
    return entry.status in (EntryStatus.DEFERRED, EntryStatus.EXPIRED)
