"""``RetryDeferred``: the app's scheduled message to itself, due ``DEFER_RETRY_DELAY_SECONDS`` after
a message was deferred because a dependency was unavailable. It fetches that message by sequence
number and tries again; after ``DEFER_MAX_ROUNDS`` rounds the message is dead-lettered with a reason.
A message that is no longer on the queue (expired, dead-lettered) is recorded and alerted once.

The app schedules a retry only for a message it recorded as deferred (the deferral document of its
order has the sequence number). ``RetryDeferred`` arrives on the public ``orders`` queue, so one for a
sequence number no deferral document tracks is not the app's: it is dead-lettered
``UntrackedDeferral``, having fetched and written nothing. One whose ``retryToken`` is not its entry's
(``DeferredEntry.issued``) was not sent by the app either: completed unread, with a warning event. Every
fetch counts as one of the message's deliveries, and every round acted on while the dependency is down
moves the message to its next round, so a ``RetryDeferred`` that is stale, repeated, early or forged must
not wear the message out: one for a
dependency's round other than the round scheduled (``entry.rounds``) or the one before it, one that comes
before its round is due (``entry.retry_due_at``, less ``RETRY_CLOCK_TOLERANCE``), or one for a message
waiting for an order that does not exist yet (its submission, or the peek sweep, fetches it), is completed
without fetching, and logged (``RetryDeferredIgnored``). One that finds its message on the queue but not
deferred (a delivery of it holds it) is handled again later (``_again_later``): that delivery, deferring it
again, sends the same retry, which duplicate detection drops. One that finds its entry resolved settles its
message as recorded if it is still deferred (``_finish_decided``)."""

from __future__ import annotations

import logging

from adapters.cosmos.errors import StoreError
from adapters.servicebus.deferred import DeferredReceiver
from adapters.servicebus.sender import SendError
from adapters.servicebus.settlement import ReceivedMessage, Settlement, message_id_text
from contracts.messages import RetryDeferred
from contracts.names import ORDERS_QUEUE
from deferral.apply import account_for_absent, finish_as_recorded, is_deferred, peek_at, process_deferred
from dependencies import AppContext
from domain.deferral import DeferralReason, DeferredEntry, EntryStatus, retry_not_for_now
from notifications.alerts import OwedAlert
from observability.events import app_event
from submission.result import IntakeResult
from submission.store_outage import retry_later

log = logging.getLogger(__name__)

UNTRACKED_DEFERRAL = "UntrackedDeferral"


def retry_deferred(
    ctx: AppContext, retry: RetryDeferred, message: ReceivedMessage, owed: list[OwedAlert]
) -> IntakeResult:
    """The handler of ``RetryDeferred``. ``owed``: the alert of a notification it rejects, whose send failed (the
    notification dead-lettered all the same: ``process_deferred``), handed to the alert courier before this
    message is settled."""
    seq = retry.sequence_number
    doc = ctx.deferrals.get(retry.order_id)
    entry = doc.entry(seq) if doc is not None else None
    if entry is None:
        where = "no deferral document" if doc is None else "a deferral document without that sequence number"
        description = (
            f"RetryDeferred for message #{seq} of order {retry.order_id}: the order has {where}; "
            "this app retries only messages it recorded as deferred (or one resolved long ago, no longer listed)"
        )
        app_event(
            "DeadLettered",
            f"orders message {message_id_text(message)}: {UNTRACKED_DEFERRAL}: {description}",
            logging.WARNING,
            messageId=message_id_text(message),
            orderId=retry.order_id,
            sequenceNumber=seq,
            reason=UNTRACKED_DEFERRAL,
        )
        return IntakeResult(Settlement.deadletter(UNTRACKED_DEFERRAL, description))
    if not entry.issued(retry.retry_token):
        return _ignored(message, retry, "its retryToken is not the one the app gave this message's retries: forged")
    if entry.status is not EntryStatus.DEFERRED:
        log.info("RetryDeferred #%s round %s: already %s", seq, retry.round, entry.status.value)
        _finish_decided(ctx, retry.order_id, entry)
        return IntakeResult(Settlement.complete())  # a late or duplicate retry: nothing left to do
    if entry.reason is DeferralReason.DEPENDENCY_UNAVAILABLE:
        not_now = retry_not_for_now(entry, retry.round, ctx.clock.now(), ctx.settings.defer_retry_delay)
        if not_now is not None:
            return _ignored(message, retry, not_now, logging.INFO)
    rejected = doc is not None and doc.rejected_at is not None
    waits = entry.reason is not DeferralReason.DEPENDENCY_UNAVAILABLE and not rejected
    with ctx.deferred.open(ORDERS_QUEUE) as receiver:
        if waits and ctx.states.get(retry.order_id) is None:
            if _held(receiver, seq):
                return _again_later(ctx, message, retry)
            return _ignored(message, retry, WAITS_FOR_ITS_ORDER, logging.INFO)
        done = process_deferred(ctx, receiver, seq, round_number=retry.round, order_id=retry.order_id, owed=owed)
        if done is None:
            if _held(receiver, seq) or entry.updated_at > ctx.clock.now() - ctx.settings.peek_sweep_age:
                return _again_later(ctx, message, retry)
            outcome = account_for_absent(ctx, receiver, retry.order_id, seq)
            log.info("RetryDeferred #%s round %s: the message is %s", seq, retry.round, outcome)
            return IntakeResult(Settlement.complete())
    if done.result == "applied":
        app_event(
            "DeferredRecovered",
            f"order {retry.order_id}: deferred #{seq} applied in retry round {retry.round}",
            orderId=retry.order_id,
            sequenceNumber=seq,
            via="retry",
            round=retry.round,
        )
    return IntakeResult(Settlement.complete(), events=done.events)


def _ignored(message: ReceivedMessage, retry: RetryDeferred, why: str, level: int = logging.WARNING) -> IntakeResult:
    """Completes ``retry`` unread (nothing fetched or written), with a ``RetryDeferredIgnored`` event."""
    app_event(
        "RetryDeferredIgnored",
        f"RetryDeferred {message_id_text(message)} for #{retry.sequence_number} of order {retry.order_id}, "
        f"round {retry.round}: not acted on, {why}",
        level,
        messageId=message_id_text(message),
        orderId=retry.order_id,
        sequenceNumber=retry.sequence_number,
        round=retry.round,
        why=why,
    )
    return IntakeResult(Settlement.complete())


def _finish_decided(ctx: AppContext, order_id: str, entry: DeferredEntry) -> None:
    """The entry is resolved: this retry is late or a duplicate, or it decided the message itself and then
    met a store failure (the outcome's write landed, its response lost: handled again later, this is its
    copy). Then the message is still deferred and its alert perhaps unsent: both are finished as recorded
    (``finish_as_recorded``), not left to the peek sweep (no alert, ten minutes and more later). A receiver
    failure is logged: the peek sweep settles it as recorded."""
    try:
        with ctx.deferred.open(ORDERS_QUEUE) as receiver:
            if finish_as_recorded(ctx, receiver, order_id, entry):
                log.info("deferred #%s: settled as recorded (%s)", entry.sequence_number, entry.status.value)
    except (StoreError, SendError):
        raise
    except Exception as exc:
        log.warning("deferred #%s: not settled as recorded (%s); left to the peek sweep", entry.sequence_number, exc)


WAITS_FOR_ITS_ORDER = "its order does not exist yet (its submission or the peek sweep fetches it)"


def _held(receiver: DeferredReceiver, seq: int) -> bool:
    """Whether message ``seq`` is on the queue and not deferred: a delivery of it holds it (or is about to)."""
    peeked = peek_at(receiver, seq)
    return peeked is not None and not is_deferred(peeked)


def _again_later(ctx: AppContext, message: ReceivedMessage, retry: RetryDeferred) -> IntakeResult:
    """The message is not deferred on the queue, and not known gone:

    * on the queue: a delivery of it holds it (the one that sent this retry stalled past its lock, or the
      host restarted under it), and will decide it or defer it again. Deferring it again, that delivery
      sends this same retry, which duplicate detection drops (the same MessageId, sent less than 10 minutes
      before): completed now, this retry would leave the message deferred with none coming;
    * not on the queue, its entry changed less than ``PEEK_SWEEP_AGE_MINUTES`` ago: that delivery may have
      met a store failure and made a store-retry copy of it (a new sequence number, the original completed),
      which settles this entry when it is decided; accounted for now, the entry would be reported expired
      (an alert), then corrected. ``make_room`` waits as long before it looks for a message so.

    So it is handled again later, as a message that met a store failure is (a copy,
    ``submission.store_outage``: 10 s, 30 s, then a minute apart), until it finds the message deferred
    (and acts, or is ignored as above), its entry resolved, or the message still gone once the entry is
    that old (then it is accounted for: ``account_for_absent``)."""
    why = f"its message #{retry.sequence_number} is not deferred yet (held by a delivery, or a copy of it due)"
    return retry_later(ctx, message, "RetryDeferred", why, store_down=False)
