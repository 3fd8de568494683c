"""Scheduling a ``RetryDeferred``: the app's message to itself to try a deferred message again."""

from __future__ import annotations

from datetime import datetime, timedelta

from adapters.servicebus.sender import OutgoingMessage
from contracts.messages import RetryDeferred
from contracts.names import ORDERS_QUEUE
from dependencies import AppContext
from domain.deferral import DeferralDocument, DeferredEntry, EntryStatus


def retry_message_id(sequence_number: int, round_number: int, tag: str = "", token: str = "") -> str:
    """Deterministic for one entry: a re-sent retry of the same round collapses in duplicate detection.
    With the entry's token, which a client cannot guess, so no client can send its MessageId first and
    have Service Bus drop the app's retry as a duplicate of it."""
    return f"retry-deferred:{sequence_number}:{round_number}{tag}" + (f":{token}" if token else "")


# The tag of the one RetryDeferred (round 1) a notification deferred for a missing order gets.
ORDER_LOOK_AGAIN = ":order"


# The tag of the RetryDeferred that accounts for a message found gone while its entry was young.
ABSENCE_CHECK = ":absent"


def schedule_absence_check(ctx: AppContext, order_id: str, entry: DeferredEntry) -> None:
    """Sends the ``RetryDeferred`` that accounts for the message of ``entry`` (waiting for its order), found
    gone from the queue while its entry is younger than ``PEEK_SWEEP_AGE_MINUTES``: due once the entry is that
    old. By then a store-retry copy of the message, if one was made, has been decided and has settled the
    entry (the retry finds it resolved); if none was, the retry reports it expired (``account_for_absent``).
    The peek sweep walks the messages on the queue and would never find an entry whose message is gone."""
    due = entry.updated_at + ctx.settings.peek_sweep_age + ABSENCE_CHECK_MARGIN
    _send(ctx, order_id, entry, 1, due, ABSENCE_CHECK)


ABSENCE_CHECK_MARGIN = timedelta(seconds=30)


def schedule_round(ctx: AppContext, doc: DeferralDocument, sequence_number: int) -> None:
    """Sends the ``RetryDeferred`` of the round ``doc`` (as just written) records for the message
    ``sequence_number``, deferred for a dependency, scheduled for that round's due time: the same round
    scheduled again is the same message, for the same time. Nothing if the entry is resolved already
    (another processor decided the message)."""
    entry = doc.entry(sequence_number)
    if entry is None or entry.status is not EntryStatus.DEFERRED:
        return
    _send(ctx, doc.order_id, entry, entry.rounds, entry.retry_due(ctx.settings.defer_retry_delay))


def schedule_look_again(ctx: AppContext, doc: DeferralDocument, sequence_number: int) -> None:
    """Sends the one look again (round 1, ``ORDER_LOOK_AGAIN``) of the message ``sequence_number``, deferred
    because its order did not exist, due after ``DEFER_RETRY_DELAY_SECONDS``: it covers an order submitted
    concurrently, whose submission looked for deferred messages before this one was deferred."""
    entry = doc.entry(sequence_number)
    if entry is None or entry.status is not EntryStatus.DEFERRED:
        return
    _send(ctx, doc.order_id, entry, 1, ctx.clock.now() + ctx.settings.defer_retry_delay, ORDER_LOOK_AGAIN)


def _send(
    ctx: AppContext, order_id: str, entry: DeferredEntry, round_number: int, due: datetime, tag: str = ""
) -> None:
    sequence_number = entry.sequence_number
    retry = RetryDeferred(
        type="RetryDeferred",
        schema_version=1,
        sequence_number=sequence_number,
        order_id=order_id,
        message_id=entry.message_id or "-",
        round=round_number,
        retry_token=entry.retry_token or None,
    )
    ctx.sender.send(
        ORDERS_QUEUE,
        OutgoingMessage(
            body=retry.to_json(),
            message_id=retry_message_id(sequence_number, round_number, tag, entry.retry_token),
            subject="RetryDeferred",
            correlation_id=order_id,
            scheduled_enqueue_time=due,
        ),
    )
