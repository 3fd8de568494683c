"""``PaymentNotification``: the payment provider says a prepaid order was paid. It may arrive

* before its order exists: it is deferred, its sequence number recorded under the order id, and
  ``OrderSubmitted`` fetches and applies it later (``deferral.recovery``);
* after the order exists, before the payment step: it is written onto the state record, where the
  payment step finds it;
* while the payment step waits: written onto the state record AND raised to the waiting
  orchestration as the ``PaymentNotified`` event.

A notification that does not match its order (amount, currency, not prepaid, a second payment, a
closed order) is dead-lettered with a reason and an operator alert. If the order database cannot be
read (a dependency, not the state store) the message is deferred and retried by ``RetryDeferred``.
If the state store is down before its deferral is recorded, the message is handled again later
(``submission.store_outage``); once its deferral is recorded, it is deferred all the same, keeping the
sequence number its tracking holds (``deferred_all_the_same``): a copy with a new sequence number would
leave the tracked one pointing at a message that is gone (then reported expired while its copy is
applied). Its look again is sent with it, so it is decided again soon (its order refused, submitted
meanwhile, or still to come), not left to the peek sweep; one an earlier delivery decided already (its
settlement lost) is settled as recorded where it is (``finish_in_hand``), and one whose deciding write may have
landed unanswered is abandoned, and decided again on its redelivery. One whose deferral write may have landed
(``StoreOutcomeUnknown``: its response was lost) reads the document back: landed, it goes on as tracked;
not landed, it is handled again later like any store failure; the read failing too, it is abandoned and
its redelivery records it again (docs/deferral.md).

A notification decided where it is delivered (applied, a repeat, rejected) resolves the entry an earlier
delivery of it may have recorded without deferring it (a crash, a failed send of its retry), and, for a
copy, its original's, before it is settled (``settle_decided``): nothing else would.

A defer on the message's last allowed delivery dead-letters it (a defer counts as a delivery): the trigger looks
for it after each defer and hands one gone over as a store-retry copy (``copy_if_dead_lettered``)."""

from __future__ import annotations

import logging

from adapters.cosmos.errors import StoreOutcomeUnknown, StoreUnavailable
from adapters.servicebus.settlement import ReceivedMessage, Settlement, message_id_text
from contracts.messages import PaymentNotification
from contracts.names import ORDERS_QUEUE
from contracts.store_retry import is_copy
from deferral.apply import finish_in_hand, not_kept, peek_at, record_making_room
from deferral.errors import DependencyUnavailable
from deferral.payment import MESSAGE_TYPE, PaymentOutcome, apply_notification
from deferral.retry import schedule_look_again, schedule_round
from deferral.tracking import settle_decided
from dependencies import AppContext
from domain.deferral import DeferralDocument, DeferralReason, EntryStatus, TooManyWaiting
from notifications.alerts import OwedAlert
from observability.events import app_event
from submission.result import IntakeResult
from submission.store_outage import retry_later, rounds_used_up

log = logging.getLogger(__name__)


def payment_notification(
    ctx: AppContext, note: PaymentNotification, message: ReceivedMessage, owed: list[OwedAlert]
) -> IntakeResult:
    """The handler registered for ``PaymentNotification`` on the ``orders`` queue. A rejected notification's alert
    whose send fails is added to ``owed``, handed to the alert courier before the message is dead-lettered."""
    try:
        outcome = apply_notification(ctx, note, message.sequence_number, owed=owed)
    except DependencyUnavailable as exc:
        return defer_for_retry(ctx, note, message, str(exc))
    if outcome.kind == "order-missing":
        return _defer_until_order(ctx, note, message, owed)
    # an entry an earlier delivery of it recorded (or, for a copy, its original's) takes the outcome
    try:
        settle_decided(ctx, note, message.sequence_number, outcome, copy=is_copy(message.application_properties))
    except StoreUnavailable as exc:
        if not rounds_used_up(message):
            raise  # handled again later (a copy): the entries take the outcome then
        _settled_unrecorded(note, message, outcome, exc)
    return IntakeResult(outcome.settlement(), events=outcome.events)


def _settled_unrecorded(
    note: PaymentNotification, message: ReceivedMessage, outcome: PaymentOutcome, exc: StoreUnavailable
) -> None:
    """The notification is decided (applied, or a repeat of the payment on the record; or rejected, its alert
    raised or owed), and in its last store-retry round the entries that take its outcome could not be written
    (``settle_decided``). Settled as decided all the same: abandoned, Service Bus dead-lettered it
    ``MaxDeliveryCountExceeded`` and paged an operator for a payment that is applied (or, rejected, under a reason
    not its own). An entry left waiting for it is accounted for when its message is looked for and found gone
    (``account_for_absent``: ``Applied``, the payment being on the record): by a ``RetryDeferred`` in flight for
    it, or its order's list filling up (``make_room``); until then it holds a place (docs/deferral.md)."""
    app_event(
        "NotificationSettledUnrecorded",
        f"{MESSAGE_TYPE} {message_id_text(message)} of order {note.order_id}: {outcome.kind} in its last store-retry "
        f"round, its entries not written ({exc}); settled as decided",
        logging.WARNING,
        orderId=note.order_id,
        messageId=message_id_text(message),
        sequenceNumber=message.sequence_number,
        outcome=outcome.kind,
    )


def deferred_all_the_same(message: ReceivedMessage, exc: StoreUnavailable) -> IntakeResult:
    """The state store failed after this message's deferral was recorded: deferred anyway, under the
    sequence number its tracking holds, its look again sent (the caller's). Never a copy: its new sequence
    number would leave the tracked one pointing at nothing."""
    log.warning("%s %s: %s; deferred all the same (it is tracked)", MESSAGE_TYPE, message_id_text(message), exc)
    return IntakeResult(Settlement.defer())


def abandoned_unknown(message: ReceivedMessage, exc: StoreOutcomeUnknown) -> IntakeResult:
    """Its deferral write may have landed and the document cannot be read back: whether it is tracked is
    unknown, and so is the token its look again or retry would need. Abandoned, under the same sequence
    number: its redelivery records it again (a write that landed is found, one that did not is made) and
    goes on as any delivery does. Deferred, nothing would be scheduled to decide it (the peek sweep, ten
    minutes and more); copied, a tracked original would point at a message that is gone."""
    log.warning("%s %s: %s; abandoned, decided again on its redelivery", MESSAGE_TYPE, message_id_text(message), exc)
    return IntakeResult(Settlement.abandon(str(exc)))


def defer_for_retry(ctx: AppContext, note: PaymentNotification, message: ReceivedMessage, why: str) -> IntakeResult:
    """Round 1 of retrying a message whose dependency is down: record, schedule RetryDeferred, defer.
    The retry is sent before the message is deferred: if the send fails the message is abandoned."""
    order_id = note.order_id
    if message.sequence_number is None:
        return IntakeResult(Settlement.abandon(why))
    try:
        recorded = _record(ctx, note, message, DeferralReason.DEPENDENCY_UNAVAILABLE, rounds=1)
    except TooManyWaiting as exc:
        return _not_kept(ctx, order_id, message, exc)
    if isinstance(recorded, StoreOutcomeUnknown):  # still unknown: no retry can be scheduled for it
        return abandoned_unknown(message, recorded)
    entry = recorded.entry(message.sequence_number)
    settled = finish_in_hand(ctx, order_id, entry) if entry is not None else None
    if settled is not None:
        # decided by an earlier delivery, whose settlement was lost: no round is scheduled for a resolved entry,
        # so deferred it waited for the peek sweep (ten minutes and more; out of the dead-letter queue a
        # NotificationsForAcceptedOrder alert pointed to): settled as recorded now, as after a store failure
        log.warning("%s %s: %s; decided before, settled as recorded", MESSAGE_TYPE, message_id_text(message), why)
        return IntakeResult(settled)
    schedule_round(ctx, recorded, message.sequence_number)
    log.warning("%s %s deferred for a retry: %s", MESSAGE_TYPE, message_id_text(message), why)
    return IntakeResult(Settlement.defer())


def _defer_until_order(
    ctx: AppContext, note: PaymentNotification, message: ReceivedMessage, owed: list[OwedAlert]
) -> IntakeResult:
    """The order does not exist yet: record the sequence number, then look once more (the order may
    have been submitted meanwhile, and its submission may have looked for deferred messages before
    this one was recorded); still missing -> defer."""
    if message.sequence_number is None:
        return IntakeResult(Settlement.abandon("no sequence number to defer by"))
    try:
        doc = _record(ctx, note, message, DeferralReason.ORDER_NOT_SUBMITTED)
    except TooManyWaiting as exc:
        return _not_kept(ctx, note.order_id, message, exc)
    if isinstance(doc, StoreOutcomeUnknown):  # still unknown: no look again can be scheduled for it
        return abandoned_unknown(message, doc)
    try:
        return _looked_at_again(ctx, note, message, message.sequence_number, doc, owed)
    except StoreUnavailable as exc:
        entry = doc.entry(message.sequence_number)
        recorded = finish_in_hand(ctx, note.order_id, entry) if entry is not None else None
        if recorded is not None:
            # decided by an earlier delivery, whose settlement was lost: settled as recorded now, needing neither
            # the store nor a send. Abandoned (as before), each redelivery into a store failure spent a delivery,
            # until Service Bus dead-lettered it MaxDeliveryCountExceeded, its alert unsent.
            log.warning("%s %s: %s; decided before, settled as recorded", MESSAGE_TYPE, message_id_text(message), exc)
            return IntakeResult(recorded)
        if entry is None or entry.status is not EntryStatus.DEFERRED:
            # found gone before (Expired) and delivered after all: decided again on its redelivery
            log.warning("%s %s: %s; decided before, abandoned", MESSAGE_TYPE, message_id_text(message), exc)
            return IntakeResult(Settlement.abandon(str(exc)))
        if isinstance(exc, StoreOutcomeUnknown):
            # the write that decided it (its refusal's dead-lettering, its application's resolution) may have
            # landed, resolving its entry: a look again would then find nothing to do and leave it deferred
            # (until the peek sweep settles it as recorded, ten minutes and more). Decided again on its
            # redelivery instead: a write that landed is found, one that did not is made.
            log.warning(
                "%s %s: %s; its decision may be written, abandoned", MESSAGE_TYPE, message_id_text(message), exc
            )
            return IntakeResult(Settlement.abandon(str(exc)))
        # recorded: its look again decides it (its order refused, submitted meanwhile, or still to come)
        schedule_look_again(ctx, doc, message.sequence_number)
        return deferred_all_the_same(message, exc)


def _record(
    ctx: AppContext, note: PaymentNotification, message: ReceivedMessage, reason: DeferralReason, *, rounds: int = 0
) -> DeferralDocument | StoreOutcomeUnknown:
    """``record_making_room`` (``record_deferred``, the order's waiting messages looked for on the queue if
    its document is full); a write whose outcome is unknown is settled by reading the document back: it
    landed (the document), it did not (``StoreUnavailable``: the message is handled again later, a copy,
    its number tracked by nobody), or the read fails too (the ``StoreOutcomeUnknown``: the message is
    abandoned, and its redelivery records it again, whether it landed or not)."""
    try:
        return record_making_room(ctx, note.order_id, message, reason, rounds=rounds, note=note)
    except StoreOutcomeUnknown as unknown:
        try:
            doc = ctx.deferrals.get(note.order_id)
        except StoreUnavailable:
            return unknown
        if doc is None or message.sequence_number is None or doc.entry(message.sequence_number) is None:
            raise StoreUnavailable(f"{unknown}; read back, it did not land") from unknown
        return doc


def _not_kept(ctx: AppContext, order_id: str, message: ReceivedMessage, exc: TooManyWaiting) -> IntakeResult:
    """Its order has ``WAITING_LIMIT`` messages deferred already: dead-lettered, the document kept bounded."""
    not_kept(ctx, message.sequence_number, order_id, exc)
    return IntakeResult(Settlement.deadletter(exc.reason, str(exc)))


def _looked_at_again(
    ctx: AppContext,
    note: PaymentNotification,
    message: ReceivedMessage,
    sequence_number: int,
    doc: DeferralDocument,
    owed: list[OwedAlert],
) -> IntakeResult:
    try:
        outcome = apply_notification(ctx, note, sequence_number, owed=owed)
    except DependencyUnavailable as exc:
        return defer_for_retry(ctx, note, message, str(exc))
    if outcome.kind == "order-missing":
        if doc.rejected_at is not None:
            from deferral.apply import rejected_order

            copy = is_copy(message.application_properties)
            dead = rejected_order(ctx, note, sequence_number, copy=copy)
            if dead is not None:
                return IntakeResult(Settlement.deadletter(*dead))
            # the refusal was withdrawn before the write: its order is being accepted, wait for it
        entry = doc.entry(sequence_number)
        settled = finish_in_hand(ctx, note.order_id, entry) if entry is not None else None
        if settled is not None:
            # decided by an earlier delivery (its settlement lost), its order's refusal withdrawn since by a
            # submission not yet written: no look again is sent for a resolved entry, so deferred it waited for the
            # peek sweep (ten minutes and more), out of the dead-letter queue the acceptance's alert points to
            return IntakeResult(settled)
        # One look again shortly: an order submitted concurrently may have looked for deferred
        # messages before this one was deferred (then only the peek sweep, minutes later, would find it).
        schedule_look_again(ctx, doc, sequence_number)
        return IntakeResult(Settlement.defer())
    settle_decided(ctx, note, sequence_number, outcome, copy=is_copy(message.application_properties), doc=doc)
    return IntakeResult(outcome.settlement(), events=outcome.events)


def copy_if_dead_lettered(ctx: AppContext, message: ReceivedMessage) -> None:
    """Called once ``message`` (a ``PaymentNotification``) is deferred: a defer counts as a delivery, as an abandon
    does (the AMQP ``modified`` outcome with ``delivery-failed``), so one on its last allowed delivery (its earlier
    deliveries abandoned: failed invocations, a lost lock) dead-letters it ``MaxDeliveryCountExceeded`` instead
    (Azure/azure-service-bus#375). A Python trigger sees no delivery count, so the message is looked for by its
    sequence number (a peek: no lock, no delivery counted) and, not on the queue, handed over as a store-retry copy
    (``retry_later``: a new message, deliveries afresh), which is decided as any copy (its original's entry takes
    its outcome). Before, its entry waited for a message in the dead-letter queue: reported expired
    (``DeferredMessageExpired``) once ``PEEK_SWEEP_AGE_MINUTES`` old, the payment left for an operator to resubmit
    while its prepaid order waited for it. Gone because another processor fetched and settled it meanwhile, the
    copy is a repeat, completed. Nothing here raises: the message is settled already."""
    seq = message.sequence_number
    if seq is None:
        return
    try:
        with ctx.deferred.open(ORDERS_QUEUE) as receiver:
            if peek_at(receiver, seq) is not None:
                return
        why = "not on the queue after its defer (dead-lettered MaxDeliveryCountExceeded on its last delivery?)"
        log.warning("%s %s (#%s): %s; handed over as a copy", MESSAGE_TYPE, message_id_text(message), seq, why)
        retry_later(ctx, message, MESSAGE_TYPE, why, store_down=False)
    except Exception as exc:
        log.warning("%s %s (#%s): not looked for after its defer: %s", MESSAGE_TYPE, message_id_text(message), seq, exc)
