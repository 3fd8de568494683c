"""The deferral document: which messages of one order are deferred on the ``orders`` queue, by
sequence number (a deferred message is never delivered again; its sequence number is the only way
back to it). Pure: no I/O, no clock.

One document per order, in the order's partition of the ``state`` container, with
``id = "deferred:<orderId>"``. It has no ``processState`` field, so the starter's, the supervisor's
and the counts' queries (all ``WHERE c.processState = ...``) never select it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from domain.jsonvalues import READ_AS, text_or_whole_number
from domain.timefmt import to_text

DOCUMENT_KIND = "DeferredMessages"
SCHEMA_VERSION = 1
ENTRY_LIMIT = 100  # resolved entries beyond this are dropped, oldest first
# Messages still deferred for one order, at most. An order has one payment; a handful waiting is a
# provider's retries, more is a flood the document (2 MB at most in Cosmos DB) must not grow with.
WAITING_LIMIT = 20
# Refused OrderSubmitted messages of one order remembered (``refused_before``): far more than are redelivered at once.
REFUSALS_KEPT = 20
# Payment notifications dead-lettered OrderRejected while a refusal of their order stood, listed
# (``refused_notifications``) until a submission of the order is accepted and an alert names them: an order has
# one payment, a few are a provider's retries; past this many (a flood) they are only counted.
REFUSED_NOTIFICATIONS_KEPT = 20
# A RetryDeferred is acted on no earlier than its round's due time, less this. Service Bus delivers a
# scheduled message at or after its scheduled enqueue time by the broker's clock; the time was read from the
# clock of the instance that scheduled it and is checked against the clock of the one that receives it, both
# synchronised hosts (well under a second apart): 5 s absorbs that, and is small beside the retry delay
# (DEFER_RETRY_DELAY_SECONDS, 30 s by default). A genuine retry judged early all the same (a clock more than
# 5 s off) is ignored, and the peek sweep tries its round once it is overdue.
RETRY_CLOCK_TOLERANCE = timedelta(seconds=5)


class TooManyWaiting(Exception):
    """The order's document tracks ``WAITING_LIMIT`` deferred messages already: a new one is refused."""

    reason = "TooManyDeferred"

    def __init__(self, order_id: str) -> None:
        super().__init__(
            f"order {order_id} has {WAITING_LIMIT} messages deferred already (the most one order may have waiting); "
            "this one is not kept"
        )


def document_id(order_id: str) -> str:
    return f"deferred:{order_id}"


class DeferralReason(StrEnum):
    ORDER_NOT_SUBMITTED = "OrderNotSubmitted"  # arrived before its order: waits for OrderSubmitted
    DEPENDENCY_UNAVAILABLE = "DependencyUnavailable"  # waits for its RetryDeferred message


class EntryStatus(StrEnum):
    DEFERRED = "Deferred"  # still deferred on the queue, waiting
    APPLIED = "Applied"
    DEAD_LETTERED = "DeadLettered"
    EXPIRED = "Expired"  # gone from the queue before it was applied (TTL, delivery count)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeferredEntry:
    sequence_number: int
    # Text; a whole number in a document an older version wrote (a ulong MessageId as it came) reads as its digits
    message_id: str = field(metadata={READ_AS: text_or_whole_number})
    message_type: str
    reason: DeferralReason
    deferred_at: datetime
    recorded_by: str  # "submission" or "sweep" (found by the peek sweep: tracking had been lost)
    rounds: int = 0  # RetryDeferred rounds tried so far
    status: EntryStatus = EntryStatus.DEFERRED
    updated_at: datetime
    detail: str = ""
    # The payment notification's own id (its body's ``notificationId``) and the digest of what it says
    # (``domain.payments.notification_digest``): a copy of the message (``submission.store_outage``: a new
    # sequence number) applied in its place is recognised by both (``carries``).
    notification_id: str = ""
    notification_digest: str = ""
    # When the RetryDeferred of round ``rounds`` is due (a dependency's deferral; None otherwise, or recorded
    # before due times were kept). Recording the same round again keeps it (``with_entry``).
    retry_due_at: datetime | None = None
    # A random value given when the entry is first recorded and never changed: every RetryDeferred the app
    # sends for this message carries it (its body's ``retryToken``, and its MessageId), so a client, who
    # may send to ``orders`` but not read it, can neither forge one nor take its MessageId first. Empty:
    # recorded before tokens were kept (any retry is taken for the app's, as then).
    retry_token: str = ""
    # When an operator was told that this message has waited ``ORDERLESS_PAYMENT_ALERT_MINUTES`` for an order
    # that has not come (the peek sweep's ``PaymentWithoutOrder`` alert; None: not told). Told once.
    orderless_alerted_at: datetime | None = None
    # Who discarded this message, waiting for an order that never came, and why (``discarded``: an operator's
    # ``POST .../deferred/<seq>/discard``, after a refund); empty: not discarded. Its entry is then ``DeadLettered``
    # ``DiscardedByOperator`` and its message dead-lettered so, never applied to an order submitted later.
    discarded_by: str = ""
    discard_reason: str = ""
    # The stored entry's keys this code does not know (a newer version's fields): kept while the entry is
    # changed (``replace``), written back by the store; an entry made anew has none. Never compared.
    unknown_keys: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    def issued(self, token: str | None) -> bool:
        """Whether a ``RetryDeferred`` carrying ``token`` is one this app sent for this entry's message."""
        return self.retry_token in ("", token)

    def retry_due(self, delay: timedelta) -> datetime:
        """When the retry of round ``rounds`` is due: as recorded, or, for an entry recorded before due
        times were kept, ``delay`` (``DEFER_RETRY_DELAY_SECONDS``) after its last change, when that round
        was recorded (no later than the retry was scheduled for)."""
        return self.retry_due_at if self.retry_due_at is not None else self.updated_at + delay

    def carries(self, notification_id: str, digest: str) -> bool:
        """Whether this entry's message is the notification ``notification_id`` with ``digest``: the same id
        and the same digest. Another notification under the same id (another amount, currency or provider
        reference) is not it. An entry recorded before digests were kept (none) is matched by its id alone,
        as it was then."""
        if notification_id == "" or self.notification_id != notification_id:
            return False
        return self.notification_digest in ("", digest)


@dataclass(frozen=True, slots=True, kw_only=True)
class RefusedNotification:
    """A payment notification dead-lettered ``OrderRejected`` while a refusal of its order stood: if the order
    is accepted later, the payment is for a live order but sits in the dead-letter queue."""

    sequence_number: int
    notification_id: str = ""
    dead_lettered_at: datetime
    # The stored entry's keys this code does not know (a newer version's fields): kept while the entry is
    # changed (``replace``), written back by the store; an entry made anew has none. Never compared.
    unknown_keys: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeferralDocument:
    id: str
    order_id: str
    kind: str = DOCUMENT_KIND
    entries: list[DeferredEntry] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION
    updated_at: datetime
    # Set when submission rejected the order (admission control): a notification for it that arrives
    # later is dead-lettered (OrderRejected) instead of waiting for an order that is not coming.
    rejected_at: datetime | None = None
    # When the messages of the waiting entries were last looked for on the queue, the document being full
    # (``deferral.apply.make_room``): at most once per PEEK_SWEEP_AGE_MINUTES (``absent_check_due``).
    absent_checked_at: datetime | None = None
    # Which OrderSubmitted was refused last: its sequence number on ``orders`` as its sender sent it (a
    # store-retry copy carries its original's). A redelivery or copy of that very message finishes the
    # refusal (``refuses``); any other submission of the order, even under the same MessageId, is judged
    # afresh. Accepting one clears ``rejectedAt`` only: a refused message handled again after that is
    # still never accepted (``was_refused``), nor is one refused before it (``refused_before``).
    rejected_sequence_number: int | None = None
    # The OrderSubmitted messages refused before the last one, newest last (at most REFUSALS_KEPT).
    refused_before: list[int] = field(default_factory=list)
    # The payment notifications dead-lettered OrderRejected while a refusal stood and not applied since, oldest
    # first: written with their entry's outcome, before the message is dead-lettered (``refused_notification``).
    # At most REFUSED_NOTIFICATIONS_KEPT; ``refused_notifications_unlisted`` counts the rest. Once a submission
    # of the order is accepted, an alert names them and they are taken off (``notifications_flagged``).
    refused_notifications: list[RefusedNotification] = field(default_factory=list)
    refused_notifications_unlisted: int = 0
    # The stored version this was read at, opaque (None: never stored); the store writes only over
    # that version (adapters/cosmos: the item's ``_etag``). Never part of the document.
    version: str | None = None
    # The stored document's keys this code does not know (a newer version's fields, read after a rollback):
    # the store writes them back unchanged over the version read. Never compared, never mapped.
    unknown_keys: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def empty(cls, order_id: str, now: datetime) -> DeferralDocument:
        return cls(id=document_id(order_id), order_id=order_id, updated_at=now)

    def entry(self, sequence_number: int) -> DeferredEntry | None:
        return next((e for e in self.entries if e.sequence_number == sequence_number), None)

    def waiting(self, reason: DeferralReason | None = None) -> list[DeferredEntry]:
        return [e for e in self.entries if e.status is EntryStatus.DEFERRED and (reason is None or e.reason is reason)]

    def absent_check_due(self, now: datetime, interval: timedelta) -> bool:
        """Whether the waiting entries' messages may be looked for on the queue again: never looked for, or
        ``interval`` ago at least."""
        return self.absent_checked_at is None or now >= self.absent_checked_at + interval

    def refuses(self, sequence_number: int | None) -> bool:
        """Whether this document records the refusal of the OrderSubmitted sent as ``sequence_number``
        (as its sender sent it): that message, delivered again or copied, is to finish its refusal, never
        be accepted. A refusal recorded before messages were named names none."""
        return (
            self.rejected_at is not None
            and sequence_number is not None
            and self.rejected_sequence_number == sequence_number
        )

    def to_flag(self) -> bool:
        """Whether notifications dead-lettered under a refusal are still to be named to an operator."""
        return bool(self.refused_notifications) or self.refused_notifications_unlisted > 0

    def was_refused(self, sequence_number: int | None) -> bool:
        """Whether the OrderSubmitted sent as ``sequence_number`` was refused, whether that refusal still
        stands or a later submission of the order was accepted since: handled again (a redelivery after a
        lost lock, a copy), it is never accepted; its submitter heard ``Rejected``."""
        return sequence_number is not None and (
            self.rejected_sequence_number == sequence_number or sequence_number in self.refused_before
        )


def with_entry(doc: DeferralDocument, entry: DeferredEntry, now: datetime) -> DeferralDocument:
    """Adds ``entry``, or, if its sequence number is already tracked, keeps the existing one but
    takes the new reason and round count (a message deferred again for another reason) and the new
    round's due time; the same reason and round recorded again keep the due time recorded first (the
    retry was scheduled for it). Its token stays the one it was first recorded with. A new entry past
    ``WAITING_LIMIT`` still-deferred ones raises ``TooManyWaiting``."""
    existing = doc.entry(entry.sequence_number)
    if existing is None and len(doc.waiting()) >= WAITING_LIMIT:
        raise TooManyWaiting(doc.order_id)
    if existing is not None:
        if existing.status is not EntryStatus.DEFERRED:
            return doc  # already resolved: a late re-record must not reopen it
        same_round = existing.reason is entry.reason and existing.rounds == entry.rounds
        kept_due = existing.retry_due_at if same_round else None
        # An entry stored before due times were kept is due a delay after its ``updatedAt`` (``retry_due``):
        # the same round recorded again leaves that time alone, or its retry in flight would come "early".
        legacy_same_round = same_round and existing.retry_due_at is None
        merged = replace(
            existing,
            reason=entry.reason,
            rounds=entry.rounds,
            retry_due_at=kept_due if kept_due is not None or legacy_same_round else entry.retry_due_at,
            updated_at=existing.updated_at if legacy_same_round else now,
            notification_id=existing.notification_id or entry.notification_id,
            notification_digest=existing.notification_digest or entry.notification_digest,
        )
        entries = [merged if e.sequence_number == entry.sequence_number else e for e in doc.entries]
    else:
        entries = [*doc.entries, entry]
    return replace(doc, entries=_bounded(entries), updated_at=now)


def with_status(
    doc: DeferralDocument, sequence_number: int, status: EntryStatus, now: datetime, detail: str = ""
) -> DeferralDocument:
    """Resolves (or re-opens, with ``DEFERRED``) the entry of ``sequence_number``; unknown: unchanged.
    Two processors may decide one message at once (docs/deferral.md): ``Expired`` never replaces another
    outcome, and ``Applied``, the truth about a payment, is never replaced."""
    existing = doc.entry(sequence_number)
    if existing is None:
        return doc
    resolved = existing.status is not EntryStatus.DEFERRED
    if (resolved and status is EntryStatus.EXPIRED) or (
        existing.status is EntryStatus.APPLIED and status is not EntryStatus.APPLIED
    ):
        return doc
    changed = replace(existing, status=status, updated_at=now, detail=detail[:500])
    entries = [changed if e.sequence_number == sequence_number else e for e in doc.entries]
    # applied after all (a redelivery of it, its dead-letter settlement lost, found the order): not in the
    # dead-letter queue, nothing to flag
    refused = (
        [r for r in doc.refused_notifications if r.sequence_number != sequence_number]
        if status is EntryStatus.APPLIED
        else doc.refused_notifications
    )
    return replace(doc, entries=entries, refused_notifications=refused, updated_at=now)


def refused_notification(doc: DeferralDocument, sequence_number: int, now: datetime, detail: str) -> DeferralDocument:
    """``with_status`` ``DEAD_LETTERED`` for a notification whose order a refusal stands for (``OrderRejected``),
    and, in the same write, the notification listed (``refused_notifications``; counted past
    REFUSED_NOTIFICATIONS_KEPT) if this moves its entry there: the same notification decided again (its
    redelivery) is not listed twice, and an outcome that stands (``Applied``) lists nothing. A refusal withdrawn
    since the notification was decided on an earlier read (``rejected_at`` cleared: a submission of the order is
    being accepted, and may have found nothing to flag already): nothing changes, the notification is to wait
    for its order (``deferral.apply.rejected_order``), not be dead-lettered under a refusal that no longer
    stands, listed where no alert would name it."""
    if doc.rejected_at is None:
        return doc
    before = doc.entry(sequence_number)
    changed = with_status(doc, sequence_number, EntryStatus.DEAD_LETTERED, now, detail)
    after = changed.entry(sequence_number)
    newly = (
        before is not None
        and before.status is not EntryStatus.DEAD_LETTERED
        and after is not None
        and after.status is EntryStatus.DEAD_LETTERED
    )
    if not newly or after is None:
        return changed
    return _listed(changed, after, now)


def _listed(doc: DeferralDocument, entry: DeferredEntry, now: datetime) -> DeferralDocument:
    """``entry``'s notification listed among those dead-lettered under a refusal (counted past
    REFUSED_NOTIFICATIONS_KEPT), unless it is listed already."""
    if any(r.sequence_number == entry.sequence_number for r in doc.refused_notifications):
        return doc
    if len(doc.refused_notifications) >= REFUSED_NOTIFICATIONS_KEPT:
        return replace(doc, refused_notifications_unlisted=doc.refused_notifications_unlisted + 1)
    listed = RefusedNotification(
        sequence_number=entry.sequence_number, notification_id=entry.notification_id, dead_lettered_at=now
    )
    return replace(doc, refused_notifications=[*doc.refused_notifications, listed])


def listed_as_copy(doc: DeferralDocument, original: int, copy: int) -> DeferralDocument:
    """The notification listed under ``original`` (found gone while a refusal stood: ``gone``) was dead-lettered
    under a refusal as its store-retry copy ``copy``, listed too: it is named once, as ``copy``, the message in
    the dead-letter queue (the original was completed when it was copied). Unchanged unless both are listed."""
    numbers = {r.sequence_number for r in doc.refused_notifications}
    if original not in numbers or copy not in numbers:
        return doc
    return replace(doc, refused_notifications=[r for r in doc.refused_notifications if r.sequence_number != original])


def gone(doc: DeferralDocument, sequence_number: int, now: datetime, detail: str) -> DeferralDocument:
    """``with_status`` ``EXPIRED`` for a waiting entry whose message is no longer on the queue; while a refusal of
    its order stands, the notification is listed, in the same write, among those dead-lettered under the refusal
    (``refused_notifications``): its message is in the dead-letter queue (expired, or
    ``MaxDeliveryCountExceeded``), or on its way there as a store-retry copy, dead-lettered ``OrderRejected`` when
    it comes. ``Expired`` still, so that copy, decided, settles the entry (``deferral.tracking.settle_decided``):
    dead-lettered with it, or applied if the order is accepted by then (and taken off the list)."""
    before = doc.entry(sequence_number)
    changed = with_status(doc, sequence_number, EntryStatus.EXPIRED, now, detail)
    after = changed.entry(sequence_number)
    if (
        doc.rejected_at is None
        or before is None
        or before.status is not EntryStatus.DEFERRED
        or after is None
        or after.status is not EntryStatus.EXPIRED
    ):
        return changed
    return _listed(changed, after, now)


def notifications_flagged(
    doc: DeferralDocument, flagged: list[RefusedNotification], unlisted: int, now: datetime
) -> DeferralDocument:
    """The notifications ``flagged`` (and ``unlisted`` more, counted only) were named to an operator: taken off.
    Any listed since (the order refused again meanwhile) stay."""
    gone = {r.sequence_number for r in flagged}
    kept = [r for r in doc.refused_notifications if r.sequence_number not in gone]
    left = max(0, doc.refused_notifications_unlisted - unlisted)
    if kept == doc.refused_notifications and left == doc.refused_notifications_unlisted:
        return doc
    return replace(doc, refused_notifications=kept, refused_notifications_unlisted=left, updated_at=now)


def retry_not_for_now(entry: DeferredEntry, round_number: int, now: datetime, delay: timedelta) -> str | None:
    """Why a ``RetryDeferred`` of ``round_number`` for ``entry``, deferred for a dependency, must not be
    acted on (it is completed without fetching), or None. Acting on a round decides the message again and,
    the dependency still down, moves it to the next round: a retry that is not the round scheduled, or that
    comes before that round is due, would spend the message's ``DEFER_MAX_ROUNDS`` in moments instead of
    over ``DEFER_MAX_ROUNDS`` x ``delay`` of outage. The round before the one scheduled is acted on at any
    time: it is that round's own retry come back (a redelivery, a store-retry copy) after recording the next
    round, whose send may have failed; deciding it again records the same round (its due time kept) and
    sends the same retry, so it moves nothing on."""
    if round_number == entry.rounds - 1:
        return None
    if round_number != entry.rounds:
        return f"round {round_number} is not the round scheduled ({entry.rounds}): a stale, repeated or forged retry"
    due = entry.retry_due(delay)
    if now < due - RETRY_CLOCK_TOLERANCE:
        return f"round {round_number} is not due until {to_text(due)}: an early (forged) retry"
    return None


def rejected(doc: DeferralDocument, now: datetime, sequence_number: int | None) -> DeferralDocument:
    """The order refused by admission control, the OrderSubmitted sent as ``sequence_number`` named. The
    same refusal recorded again (its redelivery or copy finishing it) changes nothing: ``rejectedAt``
    stays the first."""
    if doc.refuses(sequence_number):
        return doc
    before = doc.refused_before
    if doc.rejected_sequence_number is not None and doc.rejected_sequence_number != sequence_number:
        before = [*before, doc.rejected_sequence_number][-REFUSALS_KEPT:]
    return replace(
        doc, rejected_at=now, rejected_sequence_number=sequence_number, refused_before=before, updated_at=now
    )


def orderless_alerted(doc: DeferralDocument, sequence_number: int, now: datetime) -> DeferralDocument:
    """Notes on the entry of ``sequence_number``, still waiting for its order, that an operator was told of it
    (``PaymentWithoutOrder``); a resolved or unknown entry, or one told already: unchanged. The entry's own
    ``updated_at`` stays: it dates the entry's last decision (``young``, a legacy round's due time)."""
    existing = doc.entry(sequence_number)
    if existing is None or existing.status is not EntryStatus.DEFERRED or existing.orderless_alerted_at is not None:
        return doc
    changed = replace(existing, orderless_alerted_at=now)
    entries = [changed if e.sequence_number == sequence_number else e for e in doc.entries]
    return replace(doc, entries=entries, updated_at=now)


# The dead-letter reason (and the entry's ``detail`` code) of a notification an operator discarded.
DISCARDED = "DiscardedByOperator"


def discard_detail(operator: str, reason: str) -> str:
    """The entry's ``detail`` of a discard, ``<reason code>: <description>`` as every ``DeadLettered`` entry's, so
    that whoever settles its message as recorded (``deferral.apply.recorded_settlement``: the peek sweep, a
    ``RetryDeferred``) dead-letters it ``DiscardedByOperator`` with the operator and the reason in the description."""
    return f"{DISCARDED}: discarded by operator {operator}: {reason}"


def why_not_discardable(entry: DeferredEntry) -> str | None:
    """Why an operator may not discard ``entry``'s message (None: it may). Only a payment notification waiting for
    an order that has not come (``OrderNotSubmitted``): one waiting for a dependency's retry has its order, and a
    resolved one was decided already (a discard repeated is ``discarded_as``'s, not this)."""
    seq = entry.sequence_number
    if entry.status is not EntryStatus.DEFERRED:
        how = f" ({entry.detail})" if entry.detail else ""
        return f"deferred message #{seq} is {entry.status.value} already{how}: nothing to discard"
    if entry.message_type != "PaymentNotification" or entry.reason is not DeferralReason.ORDER_NOT_SUBMITTED:
        return (
            f"deferred message #{seq} is a {entry.message_type} waiting for {entry.reason.value}, not a payment "
            "notification waiting for its order: it is applied when it is due"
        )
    return None


def discarded_as(entry: DeferredEntry, operator: str, reason: str) -> bool:
    """Whether ``entry`` is this very discard, by ``operator`` for ``reason``: posted again (its answer lost)."""
    return (
        entry.status is EntryStatus.DEAD_LETTERED and entry.discarded_by == operator and entry.discard_reason == reason
    )


def discarded(
    doc: DeferralDocument,
    sequence_number: int,
    operator: str,
    reason: str,
    now: datetime,
    originals: Sequence[int] = (),
) -> DeferralDocument:
    """An operator discards the waiting payment notification ``sequence_number`` (``why_not_discardable`` None):
    its entry resolved ``DeadLettered`` ``DiscardedByOperator``, who and why kept (``discarded_by``,
    ``discard_reason``). Written before its message is fetched and dead-lettered, as every outcome is: an order
    submitted later no longer finds it waiting, the peek sweep no longer tells or expires it, and a message whose
    dead-lettering is lost is dead-lettered as recorded by whoever finds it still deferred. ``originals``: for a
    store-retry copy, the entries of the same notification under lower numbers still waiting (their messages were
    completed when copied, or dead-lettered by a defer on their last delivery), resolved in the same write as
    decided on the copy, as a copy's decision resolves them (``deferral.tracking.settle_decided``): left waiting,
    they were reported ``DeferredMessageExpired`` once looked for. An entry that is not discardable now (decided
    meanwhile, unknown): nothing changes."""
    existing = doc.entry(sequence_number)
    if existing is None or why_not_discardable(existing) is not None:
        return doc
    changes = {sequence_number: discard_detail(operator, reason)}
    for seq in originals:
        original = doc.entry(seq)
        if original is not None and seq < sequence_number and original.status is EntryStatus.DEFERRED:
            changes[seq] = f"{DISCARDED}: decided on its copy #{sequence_number}, discarded by operator {operator}"
    entries = [
        replace(
            e,
            status=EntryStatus.DEAD_LETTERED,
            updated_at=now,
            detail=changes[e.sequence_number][:500],
            discarded_by=operator,
            discard_reason=reason,
        )
        if e.sequence_number in changes
        else e
        for e in doc.entries
    ]
    return replace(doc, entries=entries, updated_at=now)


def discard_taken_back(doc: DeferralDocument, sequence_number: int, operator: str, now: datetime) -> DeferralDocument:
    """``operator``'s discard of ``sequence_number``, written, is taken back before its message was dead-lettered
    (its order turned out to exist: its submission may have read the entry waiting just before the discard, and
    applies it): the entry waits again, as before the discard, and so do the copy's originals resolved with it.
    Anything else (another outcome written since, such as ``Applied`` by that submission; another operator's
    discard): unchanged."""
    existing = doc.entry(sequence_number)
    if existing is None or existing.status is not EntryStatus.DEAD_LETTERED or existing.discarded_by != operator:
        return doc
    on_copy = f"{DISCARDED}: decided on its copy #{sequence_number},"
    back = {
        e.sequence_number
        for e in doc.entries
        if e.status is EntryStatus.DEAD_LETTERED
        and e.discarded_by == operator
        and (e.sequence_number == sequence_number or e.detail.startswith(on_copy))
    }
    entries = [
        replace(e, status=EntryStatus.DEFERRED, updated_at=now, detail="", discarded_by="", discard_reason="")
        if e.sequence_number in back
        else e
        for e in doc.entries
    ]
    return replace(doc, entries=entries, updated_at=now)


def absent_checked(doc: DeferralDocument, now: datetime) -> DeferralDocument:
    return replace(doc, absent_checked_at=now, updated_at=now)


def accepted(doc: DeferralDocument, now: datetime) -> DeferralDocument:
    """A submission of the order was accepted: an earlier refusal no longer stands (a notification for
    the order waits for it and is applied to it, instead of being dead-lettered ``OrderRejected``). Which
    messages were refused is kept (``was_refused``): one handled again is still not accepted."""
    if doc.rejected_at is None:
        return doc
    return replace(doc, rejected_at=None, updated_at=now)


def _bounded(entries: list[DeferredEntry]) -> list[DeferredEntry]:
    if len(entries) <= ENTRY_LIMIT:
        return entries
    surplus = len(entries) - ENTRY_LIMIT
    kept: list[DeferredEntry] = []
    for e in entries:
        if surplus > 0 and e.status is not EntryStatus.DEFERRED:
            surplus -= 1
            continue
        kept.append(e)
    return kept
