"""An ``orders`` message that meets a Cosmos DB outage is handled again later, not abandoned at once.

Abandoning hands the message straight back: Service Bus redelivers it at once, so an outage of a
minute used up the queue's 5 deliveries (``maxDeliveryCount``) in seconds and dead-lettered every
order that arrived during it (in the runner, a 60-second outage: 75 orders of 200). Instead the
handler sends the same body to ``orders`` again, scheduled after a backoff (``STORE_RETRY_DELAYS``: 10 s,
30 s, then once a minute, about an hour in all), and completes the original. That is safe because a
handler writes nothing, or only idempotent writes keyed by the order id, before the store call that
failed: handling the copy
later is handling the message again, as a redelivery would.

The copy's MessageId is the original's with its round, the sequence number of the message it was made
from and a digest of what the copy carries (``copy_id``), so a copy sent twice (the handler ran again for
the same message) collapses in duplicate detection, no MessageId a client chose collides with it, and no
sender can take it first without the whole message. Its round travels in an application property
(``contracts.store_retry``); one a client set is read as a number or ignored (a client can only shorten its
own message's retries).
So does the sequence number of the message as its sender sent it (``original_sequence``): an
OrderSubmitted the pending cap refused is known again by it, on every copy and redelivery (the refusal
is written first and finished by whichever delivery comes next: ``submission.intake``).
If the copy cannot be sent (Service Bus is failing too) or the rounds are used up, the message is
abandoned as before: Service Bus redelivers it and, past its maximum delivery count, dead-letters it
``MaxDeliveryCountExceeded`` (an alert rule watches dead letters). Not one whose work another path does after its
last round (``rounds_used_up``): a ``RetryDeferred`` that met a store failure is completed, the peek sweep trying
its message (``LEFT_TO_THE_SWEEP``); an ``OrderSubmitted`` whose record exists and a ``PaymentNotification`` already
decided are settled by their handlers (docs/deferral.md, "After the last round")."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from adapters.clock import Clock
from adapters.servicebus.sender import MessageSender, OutgoingMessage, PropertyValue, SendError
from adapters.servicebus.settlement import ReceivedMessage, Settlement, body_bytes, message_id_text
from contracts.names import ORDERS_QUEUE
from contracts.parsing import named_order_id
from contracts.store_retry import ORIGINAL_PROPERTY, ROUND_PROPERTY, is_copy, property_value, retry_round
from dependencies import AppContext
from domain.ids import bounded
from domain.timefmt import to_text
from observability.events import app_event
from submission.result import IntakeResult

log = logging.getLogger(__name__)

# Between the rounds of one message: short first (most outages are blips), then once a minute, about an
# hour in all. Never longer than a minute: related messages met the outage on their own schedules, and
# a prepaid order waits for its payment notification only a few minutes (its payment step's deadlines),
# so each must be handled again soon after the store is back. Found by the fault red team on 3737d51:
# with delays growing to 15 minutes, a 5-minute outage failed prepaid orders whose notification's copy
# was due 10 minutes after the store came back.
STORE_RETRY_DELAYS: tuple[timedelta, ...] = tuple(timedelta(seconds=s) for s in (10, 30, *(60,) * 59))


def original_sequence(message: ReceivedMessage) -> int | None:
    """The sequence number of ``message`` as its sender sent it: its own, or, on this app's copy (round 1
    or more), its original's, which every copy carries (``ORIGINAL_PROPERTY``). A copy whose property is
    missing or not a whole number (made before copies carried it) has its own, and so has a message whose
    property names no number its original could have: a copy is sent after its original was received, so
    the original's number is below the copy's own (and, as every number of a queue that is not partitioned,
    within the 2**53 a Cosmos DB document keeps exactly: the refusal written under it is found again). A
    client may set both properties on its own message: then it names an earlier message's number, which
    only matters to an order that refused that very message (``submission.intake``: the refusal is
    finished again) or that message created (``submittedAs``: its submitter hears ``Received`` again)."""
    own = message.sequence_number
    if own is not None and is_copy(message.application_properties):
        value = property_value(message.application_properties, ORIGINAL_PROPERTY)
        if value is not None and not isinstance(value, bool):
            try:
                original = int(value)
            except (TypeError, ValueError, OverflowError):
                return own
            if 0 <= original < own:
                return original
    return own


# What a copy adds to its original's MessageId: the round, the sequence number of the message it was made
# from and, since this version, the digest of what the copy carries (``copy_id``). Copies made before the
# digest (``:store-retry:<round>:<sequence number>``, some perhaps still scheduled on the queue when this
# version deployed) are read as well: the digest is optional here.
_DIGEST_CHARS = 16


def _suffix(round_pattern: str) -> str:
    """The pattern of one copy's suffix of round ``round_pattern``: its sequence number, and its digest
    after that, optional."""
    return rf":store-retry:{round_pattern}(?::[0-9]+(?::[0-9a-f]{{{_DIGEST_CHARS}}})?)?"


_SUFFIX = re.compile(rf"(?:{_suffix('[0-9]+')})+$")


def original_id(message_id: str) -> str:
    """The MessageId a copy was made from: ``message_id`` without its ``:store-retry:...`` suffixes (with
    or without their digest)."""
    return _SUFFIX.sub("", message_id)


def copy_properties(message: ReceivedMessage, round_number: int) -> dict[str, PropertyValue]:
    """The application properties of the copy of ``message`` for round ``round_number``: the round, and the
    sequence number of the message as its sender sent it (``original_sequence``)."""
    properties: dict[str, PropertyValue] = {ROUND_PROPERTY: round_number}
    original = original_sequence(message)
    if original is not None:
        # As text: a sequence number has 64 bits, the SDK sends an integer property as 32 (past 2**31 - 1
        # messages on the queue, every copy would fail to send: adapters.servicebus.sender).
        properties[ORIGINAL_PROPERTY] = str(original)
    return properties


def copy_digest(body: bytes, properties: Mapping[str, PropertyValue]) -> str:
    """The first 16 hex characters of the SHA-256 of what a copy carries that its handler reads: its
    body and its application properties (``copy_properties``). The same for the same message handled
    again. 64 bits: a sender who does not know the body must guess it, and one message sent to ``orders``
    per guess, within the 10 minutes of duplicate detection, reaches some millions of the 2**64; honest
    copies never need it to differ (the sequence number beside it already does)."""
    carried = json.dumps(dict(properties), sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(carried + b"\n" + body).hexdigest()[:_DIGEST_CHARS]


def copy_id(message: ReceivedMessage, round_number: int) -> str:
    """``<original MessageId>:store-retry:<round>:<sequence number of this message>:<digest>`` (bounded to
    Service Bus's 128 characters), the digest ``copy_digest`` of the copy's body and properties. The
    sequence number is the broker's and the body and properties are the message's, the same on every
    delivery of this message: the same message handled twice sends the same copy, which duplicate
    detection collapses; no id a client chose collides with it (a client's ``X:store-retry:1`` is never
    taken for a copy, nor is its copy ever ``X:store-retry:1`` itself); and a sender who knows the
    original's MessageId and guesses its sequence number cannot send the copy's id first without the whole
    body (it would be dropped as a duplicate of that, its original completed: the message lost). Only this
    app's own copies, the round property matching the suffix, are traced back to their original, with or
    without a digest (copies made before it), so a copy of a copy keeps the original's MessageId."""
    message_id = message_id_text(message)
    base = _copied_from(message_id, retry_round(message.application_properties)) if message_id else None
    if base is None:
        base = message_id or f"seq-{message.sequence_number}"
    sequence = "" if message.sequence_number is None else f":{message.sequence_number}"
    digest = copy_digest(body_bytes(message), copy_properties(message, round_number))
    return bounded(f"{base}:store-retry:{round_number}{sequence}:{digest}")


def _copied_from(message_id: str, round_number: int) -> str | None:
    """The original's MessageId if ``message_id`` is that of this app's copy of round ``round_number``."""
    if round_number < 1:
        return None
    own = re.fullmatch(rf"(.+){_suffix(str(round_number))}", message_id, flags=re.DOTALL)
    return own.group(1) if own else None


def rounds_used_up(message: ReceivedMessage, delays: Sequence[timedelta] = STORE_RETRY_DELAYS) -> bool:
    """Whether ``message`` is the copy of the last round of ``delays`` (``STORE_RETRY_DELAYS``: a failure
    ``retry_later`` would copy now abandons it, and after the queue's max delivery count Service Bus dead-letters it;
    the reply relay's rounds: ``order_agents.reply_relay``)."""
    return retry_round(message.application_properties) >= len(delays)


@dataclass(frozen=True)
class ScheduledCopy:
    """A copy ``send_copy`` sent: its MessageId, its round (of ``rounds``) and when it is due."""

    message_id: str
    round: int
    rounds: int
    due: datetime


def due_base(clock: Clock, message: ReceivedMessage) -> datetime:
    """What a copy's delay is added to: the host's clock, or the broker's time ``message`` was enqueued (a copy's: when
    it came due) if that is later. Service Bus runs a schedule on its own clock, and a host whose clock is behind it
    by more than a delay scheduled the copy in the past: given back at once, and its next round too, every round spent
    in milliseconds (red team: the reply relay's six rounds, meant to carry a reply through a backend blip of a few
    seconds, gone in a blip with the app's clock 45 s behind). The enqueued time is at or before the broker's now, so
    a round is due at least its delay after the last came due, whatever the host's clock says; a host's clock ahead
    still stretches each delay by its lead (the broker's now is not known here). The reply relay's rounds of a reply
    that carries its step's deadline count from the enqueued time alone, cut at the deadline
    (``order_agents.reply_relay.round_before_deadline``)."""
    now = clock.now()
    enqueued = message.enqueued_time_utc
    if enqueued is None:
        return now
    if enqueued.tzinfo is None:
        enqueued = enqueued.replace(tzinfo=UTC)
    return max(now, enqueued)


def send_copy(
    sender: MessageSender, clock: Clock, queue: str, message: ReceivedMessage, subject: str, delays: Sequence[timedelta]
) -> ScheduledCopy | None:
    """Sends ``message`` to ``queue`` again as the copy of its next round, due after that round's delay (``delays``),
    its round and original in its properties and its MessageId ``copy_id``. None: its rounds are used up, nothing
    sent. Raises ``SendError`` when the copy could not be sent (the caller abandons the message as before)."""
    round_number = retry_round(message.application_properties) + 1
    if round_number > len(delays):
        return None
    due = due_base(clock, message) + delays[round_number - 1]
    return send_copy_at(sender, queue, message, subject, round_number, len(delays), due)


def send_copy_at(
    sender: MessageSender,
    queue: str,
    message: ReceivedMessage,
    subject: str,
    round_number: int,
    rounds: int,
    due: datetime,
) -> ScheduledCopy:
    """Sends ``message`` to ``queue`` again as the copy of round ``round_number`` (of ``rounds``), due at ``due``, as
    ``send_copy`` does (its MessageId ``copy_id``, its round and original in its properties). Raises ``SendError``
    when the copy could not be sent."""
    copy = OutgoingMessage(
        body=body_bytes(message),
        message_id=copy_id(message, round_number),
        subject=subject,
        application_properties=copy_properties(message, round_number),
        scheduled_enqueue_time=due,
    )
    sender.send(queue, copy)
    return ScheduledCopy(copy.message_id, round_number, rounds, due)


# What a message of these types still had to do after its last round of store failures is done by the peek sweep
# once the store is back: a ``RetryDeferred`` only points at a deferred message, and the sweep tries every deferred
# message on the queue whose round is overdue, applies one whose order exists, settles one whose entry is resolved
# (deferral/sweep.py). One whose message is gone was settled elsewhere (a store-retry copy of it decided, or
# dead-lettered: its own dead letter pages). Not after other failures (``retry_later``'s ``store_down``).
LEFT_TO_THE_SWEEP = frozenset({"RetryDeferred"})


def _left_to_the_sweep(message: ReceivedMessage, kind: str, why: str) -> IntakeResult:
    """Completes ``message`` of a kind in ``LEFT_TO_THE_SWEEP`` after its last round, instead of abandoning it into
    a ``MaxDeliveryCountExceeded`` dead letter that pages an operator for a message nobody needs."""
    app_event(
        "IntakeLeftToSweep",
        f"{kind} {message_id_text(message)}: {why}; store retries used up, completed: the peek sweep tries its message",
        logging.WARNING,
        messageId=message_id_text(message),
        orderId=named_order_id(body_bytes(message)),
        kind=kind,
    )
    return IntakeResult(Settlement.complete())


def retry_later(
    ctx: AppContext, message: ReceivedMessage, kind: str, why: str, *, store_down: bool = True
) -> IntakeResult:
    """Sends ``message`` to ``orders`` again, due after its round's delay, and completes it; abandons it when
    the rounds are used up (completes it, a kind in ``LEFT_TO_THE_SWEEP`` that met a store failure) or the copy
    cannot be sent. ``store_down=False``: not a store failure (a cancellation whose order is not there yet, a
    document this version cannot read, a deferred message it could not fetch), for the log, and never left to the
    sweep: the sweep meets the same unreadable document or refused receiver, skips the message with a warning in
    its log, and the dead letter is the only page (red team: a ``RetryDeferred`` whose order's deferral document a
    newer version wrote was completed, its payment left deferred with nobody told)."""
    try:
        copy = send_copy(ctx.sender, ctx.clock, ORDERS_QUEUE, message, kind, STORE_RETRY_DELAYS)
    except SendError as exc:
        log.warning("%s %s: %s; its retry could not be sent (%s), abandoning", kind, message_id_text(message), why, exc)
        return IntakeResult(Settlement.abandon(why))
    if copy is None:
        if kind in LEFT_TO_THE_SWEEP and store_down:
            return _left_to_the_sweep(message, kind, why)
        log.warning("%s %s: %s; store retries used up, abandoning", kind, message_id_text(message), why)
        return IntakeResult(Settlement.abandon(why))
    cause = f"the store is unavailable ({why})" if store_down else why
    app_event(
        "IntakeRetryScheduled",
        f"{kind} {message_id_text(message)}: {cause}; handled again at {to_text(copy.due)} "
        f"(round {copy.round} of {copy.rounds})",
        logging.WARNING,
        messageId=message_id_text(message),
        orderId=named_order_id(body_bytes(message)),
        retryMessageId=copy.message_id,
        round=copy.round,
        due=to_text(copy.due),
    )
    return IntakeResult(Settlement.complete())
