"""Submission's half of deferral: when ``OrderSubmitted`` arrives, the messages deferred because
that order did not exist yet are read by sequence number, applied, and then fetched and completed on one
receiver (``deferral.apply.process_deferred``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime

from adapters.cosmos.deferral_store import update_deferrals
from adapters.cosmos.errors import StoreError
from adapters.servicebus.deferred import DeferredMessageStore
from adapters.servicebus.sender import SendError
from contracts.names import ORDERS_QUEUE
from deferral.apply import Processed, account_for_absent, process_deferred
from deferral.retry import schedule_absence_check, schedule_round
from dependencies import AppContext
from domain.deferral import (
    DeferralDocument,
    DeferralReason,
    DeferredEntry,
    accepted,
    notifications_flagged,
    rejected,
)
from notifications.alerts import OwedAlert, raise_alert_or_owe
from observability.events import app_event
from orchestrators.raise_events import RaiseEvent

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recovery:
    applied: int = 0
    dead_lettered: int = 0
    expired: int = 0
    events: tuple[RaiseEvent, ...] = ()
    # the refusal was withdrawn as soon as it was marked: another submission of the order was accepted meanwhile
    withdrawn: bool = False


def _fetch_and_process(
    ctx: AppContext,
    deferred: DeferredMessageStore,
    order_id: str,
    waiting: list[DeferredEntry],
    owed: list[OwedAlert],
) -> Iterator[tuple[DeferredEntry, Processed | str]]:
    """Processes the waiting entries' messages by sequence number on one receiver (``deferral.apply``);
    yields every entry with its outcome, or, for a message not on the queue deferred, with what
    ``account_for_absent`` made of its entry. A rejected notification's alert whose send fails is added to
    ``owed`` (the submission's, handed to the alert courier before the ``OrderSubmitted`` is settled)."""
    with deferred.open(ORDERS_QUEUE) as receiver:
        absent: list[DeferredEntry] = []
        for entry in waiting:
            done = process_deferred(ctx, receiver, entry.sequence_number, round_number=0, order_id=order_id, owed=owed)
            if done is None:
                absent.append(entry)
            else:
                yield entry, done
        # the absent last: one may be a message handled again as a copy (a new number) applied just now
        young_since = ctx.clock.now() - ctx.settings.peek_sweep_age
        for entry in absent:
            young = entry.updated_at > young_since
            yield entry, account_for_absent(ctx, receiver, order_id, entry.sequence_number, young=young)


def release_for_rejected_order(
    ctx: AppContext,
    order_id: str,
    sequence_number: int | None,
    as_read: DeferralDocument | None,
    owed: list[OwedAlert],
) -> Recovery:
    """Admission control rejected ``order_id``, the OrderSubmitted sent as ``sequence_number``: its
    deferral document is marked rejected, naming that message (a notification that arrives later is
    dead-lettered at once; a redelivery or copy of the message finishes the refusal instead of being
    judged again), and the notifications already waiting for it are fetched and dead-lettered
    (``OrderRejected``, with an alert) instead of waiting for an order that is not coming until their time
    to live. Written before anyone is told of the refusal (``submission.intake._reject``): a store or send
    failure propagates (the message is handled again: decided afresh if the mark was not written, the
    refusal finished if it was); a receiver failure is left to the peek sweep. ``as_read``: the document
    as the caller has just read it (None: there is none).

    Once the mark is written, the order's state record is looked for: another submission of the order accepted
    while this one was judged (its record written since the caller read none) speaks for the order. The mark is
    withdrawn again, the notifications listed as dead-lettered under a refusal are flagged from the document as
    then written (``flag_refused_notifications``), and nothing is released (``Recovery.withdrawn``: the caller
    tells nobody). It is looked for again once waiting notifications were released (that takes a while), with
    the same outcome if found. A record written after the last look finds the mark when its submission reads the
    document again (``settle_refusals``). ``owed``: the submission's list of alerts owed (``recover_for_order``)."""
    now = ctx.clock.now()
    doc = update_deferrals(ctx.deferrals, order_id, lambda d: rejected(d, now, sequence_number), now, as_read=as_read)
    if _accepted_meanwhile(ctx, order_id, doc, owed):
        return Recovery(withdrawn=True)
    waiting = doc.waiting(DeferralReason.ORDER_NOT_SUBMITTED)
    if not waiting:
        return Recovery()
    dead = expired = 0
    try:
        for entry, done in _fetch_and_process(ctx, ctx.deferred, order_id, waiting, owed):
            if isinstance(done, str):
                expired += done == "expired"
                if done == "young":  # gone while young: perhaps a copy of it on its way
                    schedule_absence_check(ctx, order_id, entry)
            else:
                dead += done.result == "dead-lettered"
    except (StoreError, SendError):
        raise
    except Exception as exc:
        log.warning("order %s: waiting notifications not released now (%s); the peek sweep will", order_id, exc)
    # Releasing them took a receiver and a read and a write per notification: another submission of the order may
    # have been accepted meanwhile and told its submitter Received (red team: a Rejected told after it).
    if _accepted_meanwhile(ctx, order_id, doc, owed):
        return Recovery(withdrawn=True)
    return Recovery(dead_lettered=dead, expired=expired)


def _accepted_meanwhile(ctx: AppContext, order_id: str, doc: DeferralDocument, owed: list[OwedAlert]) -> bool:
    """Whether the order has its state record: another submission of it was accepted while this one was refused
    (``doc``: the deferral document as the refusal wrote it). Then the refusal is withdrawn and the notifications
    listed as dead-lettered under it are flagged (``flag_refused_notifications``)."""
    if ctx.states.get(order_id) is None:
        return False
    # Their alert, if owed, is raised by nothing that handles this message again: the refusal withdrawn, it is
    # completed naming nothing (``submission.intake``). So the trigger sends it once more if Durable does not take
    # it, or pages (``notifications.alerts.send_or_page``), never leaving it to the message handled again.
    mine: list[OwedAlert] = []
    try:
        flag_refused_notifications(ctx, withdraw_refusal(ctx, doc), mine)
    finally:
        owed.extend(replace(item, raised_again=False) for item in mine)
    return True


def withdraw_refusal(ctx: AppContext, doc: DeferralDocument) -> DeferralDocument:
    """A submission of ``doc``'s order (as just read) is being accepted after an earlier one was refused: the refusal
    is cleared before its state record is created, so a notification arriving meanwhile waits for the
    order (and is recovered, or looked at again) instead of being dead-lettered ``OrderRejected``. A store
    failure propagates (nothing is written yet: the submission is handled again later)."""
    now = ctx.clock.now()
    return update_deferrals(ctx.deferrals, doc.order_id, lambda d: accepted(d, now), now, as_read=doc)


REFUSED_NOTIFICATIONS_ALERT = "NotificationsForAcceptedOrder"


def flag_refused_notifications(ctx: AppContext, doc: DeferralDocument | None, owed: list[OwedAlert]) -> None:
    """The order of ``doc`` (its deferral document as the caller read or wrote it) has its state record: a
    submission of it was accepted. Payment notifications dead-lettered ``OrderRejected`` while an earlier
    refusal stood (``refused_notifications``, listed before they were dead-lettered) are for a live order
    now: an alert names them (sequence numbers and notification ids) for an operator to resubmit from the
    ``orders`` dead-letter queue, then they are taken off the document. An alert whose send fails is added to
    ``owed`` (the submission's, handed to the alert courier before the message is settled; one Durable does not
    take has the message handled again later, and that handling names them again) and they stay listed: the
    document is the only other record of them, so they come off it only once this alert went out here (a later
    submission of the order names them again, under the same id while the list is the same: a repeat, never a
    loss). Raised, the failed send abandoned the ``OrderSubmitted``, and five
    in a row dead-lettered it ``MaxDeliveryCountExceeded``, still unsent. A store failure on the write propagates:
    the message is handled again, finds them still listed and sends the alert again under the same id, which
    names the notifications; a crash between the send and the write is the same. Nothing listed (every order
    that was never refused): nothing done."""
    if doc is None or not doc.to_flag():
        return
    listed = list(doc.refused_notifications)
    unlisted = doc.refused_notifications_unlisted
    now = ctx.clock.now()
    alert = _name_refused_notifications(ctx, doc, now)
    if alert is not None:  # not sent: the courier sends it, and they stay listed until an alert naming them went out
        owed.append(alert)
        return
    update_deferrals(
        ctx.deferrals, doc.order_id, lambda d: notifications_flagged(d, listed, unlisted, now), now, as_read=doc
    )


def _name_refused_notifications(ctx: AppContext, doc: DeferralDocument, now: datetime) -> OwedAlert | None:
    """Raises the ``NotificationsForAcceptedOrder`` alert naming the notifications ``doc`` lists as dead-lettered
    under a refusal; the alert owed (for the courier) if its send failed, else None."""
    listed = list(doc.refused_notifications)
    unlisted = doc.refused_notifications_unlisted
    numbers = [r.sequence_number for r in listed]
    more = f" and {unlisted} more (not listed)" if unlisted else ""
    return raise_alert_or_owe(
        ctx.sender,
        kind=REFUSED_NOTIFICATIONS_ALERT,
        summary=(
            f"order {doc.order_id} was accepted after a refusal; payment notifications "
            f"{', '.join(f'#{n}' for n in numbers)}{more} were dead-lettered OrderRejected while it stood: "
            "resubmit them from the orders dead-letter queue"
        ),
        at=now,
        order_id=doc.order_id,
        discriminator="-".join(str(n) for n in numbers) + (f"+{unlisted}" if unlisted else ""),
        details={
            "notifications": [
                {"sequenceNumber": r.sequence_number, "notificationId": r.notification_id} for r in listed
            ],
            "unlisted": unlisted,
        },
    )


def hand_over_refusals(ctx: AppContext, as_read: DeferralDocument | None, owed: list[OwedAlert]) -> bool:
    """A submission that found its order's state record could not settle the order's refusals (``settle_refusals``:
    a store or send failure through its last store-retry round) and is completed all the same
    (``submission.intake``). The one duty of it nothing else does, naming the notifications dead-lettered under a
    refusal (``as_read``: the order's deferral document as that submission read it, after the record existed), is
    done here, without a write: the alert is raised (its failed send added to ``owed``, for the courier) and they
    stay listed, so a later submission of the order names them again (the same id while the list is the same: a
    repeat, never a loss). A refusal still standing on the document is left: with the record there, a notification
    finds the order and is applied to it, and whatever handles the refused message again withdraws it
    (``release_for_rejected_order``). Returns whether an alert was raised."""
    if as_read is None or not as_read.to_flag():
        return False
    alert = _name_refused_notifications(ctx, as_read, ctx.clock.now())
    if alert is not None:
        owed.append(alert)
    return True


def settle_refusals(
    ctx: AppContext, order_id: str, as_read: DeferralDocument | None, owed: list[OwedAlert], *, created: bool
) -> None:
    """The order's state record exists: a submission of it was accepted (``created``: its record written by this
    delivery), or found it. ``as_read``: the order's deferral document as the submission read it. A refusal that
    stands on the document is withdrawn (the record speaks for the order), then the notifications listed as
    dead-lettered under a refusal are flagged from the document as written (``flag_refused_notifications``).

    Another submission of the order, refused while this one was accepted, may have marked the document after this
    one read it, before the record was written (``release_for_rejected_order`` looks for the record only after its
    mark), and notifications may have been dead-lettered and listed under that mark. So a submission that wrote the
    record reads the document again, whatever it read before: an order never refused (``as_read`` None or naming
    no refusal) may have been refused for the first time after that read (one point read per new order; before,
    only an order refused before was read again, and a first refusal marked meanwhile stood on the live order, its
    notifications named by no alert). One that found the record read the document after it existed: what it read
    is what stands. Store and send failures propagate, as ``flag_refused_notifications``'s do (its alert's own
    failed send is owed, added to ``owed``)."""
    if created:
        doc = ctx.deferrals.get(order_id)
    elif as_read is None or (as_read.rejected_sequence_number is None and not as_read.to_flag()):
        return
    else:
        doc = as_read
    if doc is not None and doc.rejected_at is not None:
        doc = withdraw_refusal(ctx, doc)
    flag_refused_notifications(ctx, doc, owed)


def resend_rounds(ctx: AppContext, doc: DeferralDocument) -> None:
    """Sends again the ``RetryDeferred`` of the round each message of ``doc`` waiting for a dependency is at,
    for that round's due time: the same MessageId, so duplicate detection collapses it if it went out.
    Recording a round comes before sending its retry: when an ``OrderSubmitted``'s recovery met the
    dependency down, recorded the next round and then failed to send its retry, the message was abandoned,
    and its redelivery (the record written, the notification no longer waiting for its order) had nothing
    else to send it: the entry said a retry was coming that never was. A send failure propagates."""
    for entry in doc.waiting(DeferralReason.DEPENDENCY_UNAVAILABLE):
        schedule_round(ctx, doc, entry.sequence_number)


def recover_for_order(
    ctx: AppContext,
    order_id: str,
    doc: DeferralDocument | None,
    owed: list[OwedAlert],
    raised: list[RaiseEvent] | None = None,
) -> Recovery:
    """Applies the messages ``doc`` (the order's deferral document as the caller read it) lists as
    waiting for the order; nothing to do unless it lists some. A message deferred after that read is
    looked at again by its own ``RetryDeferred`` (docs/deferral.md). A receiver failure is logged and left
    to the peek sweep: it never blocks the order itself. A store or send failure propagates (the
    OrderSubmitted is abandoned and redelivered once its record exists, or sent again for later before:
    ``submission.intake``).

    A message waiting for a dependency's retry round is not applied here (its ``RetryDeferred`` owns it), but
    its round's retry is sent again (``resend_rounds``): one processed by an earlier delivery of this
    submission, whose retry could not be sent, would otherwise wait for the peek sweep.

    ``owed``: the submission's list of alerts owed, handed to the alert courier before the ``OrderSubmitted`` is
    settled: a deferred notification rejected here is dead-lettered at once, so its alert whose send failed is
    added there (filled in as each message is settled: whatever fails after, the caller hands over what is in
    it), never raised (``apply_notification``). ``raised``: filled in the same way with the events of the
    notifications applied (``Recovery.events`` once it returns): a failure after one was applied, raised out of here,
    leaves them to the caller to raise (the notification is on the record, its entry resolved: nothing raises
    them again)."""
    if doc is not None:
        resend_rounds(ctx, doc)
    waiting = doc.waiting(DeferralReason.ORDER_NOT_SUBMITTED) if doc is not None else []
    if not waiting:
        return Recovery()
    applied = dead = expired = 0
    events: list[RaiseEvent] = raised if raised is not None else []
    try:
        for entry, done in _fetch_and_process(ctx, ctx.deferred, order_id, waiting, owed):
            if isinstance(done, str):
                expired += done == "expired"
                if done == "young":  # gone while young: perhaps a copy of it on its way
                    schedule_absence_check(ctx, order_id, entry)
                continue
            applied += done.result == "applied"
            dead += done.result == "dead-lettered"
            events.extend(done.events)
            if done.result == "applied":
                app_event(
                    "DeferredRecovered",
                    f"order {order_id}: deferred #{entry.sequence_number} applied on submission",
                    orderId=order_id,
                    sequenceNumber=entry.sequence_number,
                    via="sequence",
                )
    except (StoreError, SendError):
        raise
    except Exception as exc:
        log.warning(
            "order %s: deferred messages not recovered now (%s); the peek sweep will", order_id, exc, exc_info=True
        )
    return Recovery(applied, dead, expired, tuple(events))
