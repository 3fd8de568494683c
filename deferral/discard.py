"""An operator discards a payment notification deferred for an order that never came (the ``PaymentWithoutOrder``
alert's, after a refund): ``POST /api/ops/orders/{orderId}/deferred/{sequenceNumber}/discard``
(``operations.actions.discard_deferred``). The message is dead-lettered ``DiscardedByOperator``, never completed:
nothing is lost, it stays in the ``orders`` dead-letter queue with who and why in its description.

The order of the moves is the app's rule for every outcome (``deferral.apply``): written first, settled second.

1. The entry is read, the order looked for (its state record: the submission writes it before it reads the
   deferral document), and the message peeked at (no lock, no delivery counted): a message
   gone, expired or held by a delivery is not discarded, and nothing is written (a message gone is accounted for
   as anywhere else, ``account_for_absent``, unless its store-retry copy waits: that one is named to discard).
2. The entry is resolved ``DeadLettered`` ``DiscardedByOperator`` (``domain.deferral.discarded``), a conditional
   write. From then on nothing applies it: a submission of the order applies only waiting entries, the peek
   sweep neither tells (``PaymentWithoutOrder``) nor expires a resolved one, and finds its message, if still
   deferred, to settle it as recorded (dead-lettered ``DiscardedByOperator``, ``recorded_settlement``).
3. The order is looked for again: a submission that wrote its state record before step 2 may have read the
   entry waiting and be applying it. Found, the discard is taken back (``discard_taken_back``; an ``Applied``
   written meanwhile stands) and refused: the payment is for a live order, and waits for it (applied by the
   submission, or by the peek sweep if the submission found it discarded and left it). Unless its message left
   the queue in between: a processor that found the entry resolved (the peek sweep) dead-lettered it as recorded,
   so the discard stands, and the answer says so (resubmit it from the dead-letter queue if it is that order's);
   or the submission applied it and completed its message (``Applied`` over the discard): refused, saying so. Taken
   back, the message is looked for once more: gone (a peek sweep that read the discard dead-lettered it as recorded),
   the discard is written again and stands, rather than an entry waiting for a message in the dead-letter queue.
4. The message is fetched by sequence number and dead-lettered. A crash or a receiver failure here leaves the
   entry resolved and the message deferred: the peek sweep dead-letters it as recorded, or the same discard
   posted again does. Dead-lettering first and recording second would leave, after a crash between them, a
   waiting entry whose message is gone: reported ``DeferredMessageExpired`` to the operator who discarded it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from adapters.cosmos.deferral_store import update_deferrals
from adapters.servicebus.deferred import DeferredReceiver
from contracts.names import ORDERS_QUEUE
from contracts.store_retry import is_copy
from deferral.apply import (
    account_for_absent,
    has_expired,
    is_deferred,
    is_entrys_message,
    peek_at,
    recorded_settlement,
)
from dependencies import AppContext
from domain.deferral import (
    DeferralDocument,
    DeferredEntry,
    EntryStatus,
    discard_taken_back,
    discarded,
    discarded_as,
    why_not_discardable,
)
from domain.timefmt import to_text
from observability.events import app_event

Outcome = Literal[
    "discarded",  # written, and dead-lettered now
    "recorded",  # written; its message not fetched here (held, or gone meanwhile): settled as recorded later
    "repeated",  # this same discard posted again, or written meanwhile by its twin (two tabs): nothing new written
    "unknown",  # no such entry
    "refused",  # not discardable (``why``)
    "order-exists",  # its order exists: applied to it, not discarded
]


@dataclass(frozen=True)
class Discard:
    outcome: Outcome
    why: str = ""
    entry: DeferredEntry | None = None
    dead_lettered: bool = False


def discard_deferred(ctx: AppContext, order_id: str, seq: int, operator: str, reason: str) -> Discard:
    """``operator`` discards the notification deferred as ``seq`` for ``order_id`` because of ``reason``. A store
    failure (``StoreUnavailable``) and a receiver's (``ReceiveError``) propagate: the caller answers 503, and the
    same discard posted again goes on from what was written (``repeated``)."""
    doc = ctx.deferrals.get(order_id)
    entry = doc.entry(seq) if doc is not None else None
    if entry is None:
        return Discard("unknown", f"no deferred message #{seq} is tracked for order {order_id}")
    with ctx.deferred.open(ORDERS_QUEUE) as receiver:
        if discarded_as(entry, operator, reason):  # posted again: its dead-lettering may be what was lost
            return Discard("repeated", entry=entry, dead_lettered=_dead_letter(receiver, entry))
        why = why_not_discardable(entry)
        if why is not None:
            return Discard("refused", why, entry)
        exists = _order_exists(ctx, order_id)
        if exists:
            return Discard("order-exists", exists, entry)
        peeked = peek_at(receiver, seq)
        copies = _copies(doc, entry) if peeked is None and doc is not None else []
        if copies:  # the original of a waiting store-retry copy: the copy is the message to discard
            return Discard("refused", _COPY_WAITS.format(seq=seq, copy=copies[0]), entry)
        if peeked is not None and not is_entrys_message(order_id, entry, peeked):
            return Discard("refused", _ANOTHER_MESSAGE.format(seq=seq, order=order_id), entry)
        absent = _not_here(ctx, receiver, order_id, entry, peeked)
        if absent is not None:
            return Discard("refused", absent, entry)
        copy = peeked is not None and is_copy(peeked.application_properties)
        now = ctx.clock.now()
        wrote: list[bool] = []  # per try of ``change``: whether it changed the document (the last try's is saved)

        def change(d: DeferralDocument) -> DeferralDocument:
            after = discarded(d, seq, operator, reason, now, _originals(d, entry) if copy else ())
            wrote.append(after is not d)
            return after

        written = update_deferrals(ctx.deferrals, order_id, change, now)
        mine = written.entry(seq)
        if mine is None or not discarded_as(mine, operator, reason):  # decided meanwhile by someone else
            return Discard(
                "refused", (why_not_discardable(mine) if mine else None) or f"#{seq} is no longer tracked", mine
            )
        if not wrote[-1]:  # this same discard written meanwhile by another request (a double click, two tabs)
            return Discard("repeated", entry=mine, dead_lettered=_dead_letter(receiver, mine))
        exists = _order_exists(ctx, order_id)
        if exists and peek_at(receiver, seq) is not None:
            back = update_deferrals(ctx.deferrals, order_id, lambda d: discard_taken_back(d, seq, operator, now), now)
            waits = back.entry(seq)
            if waits is None or waits.status is not EntryStatus.DEFERRED or peek_at(receiver, seq) is not None:
                return Discard("order-exists", f"{exists} (submitted while you discarded: taken back)", waits)
            # gone as it was taken back: a peek sweep that read it discarded dead-lettered it as recorded. Left
            # waiting, the entry would wait for a message in the dead-letter queue: the discard is written again
            again = update_deferrals(ctx.deferrals, order_id, change, now).entry(seq)
            if again is None or not discarded_as(again, operator, reason):
                return Discard("order-exists", f"{exists} (submitted while you discarded: taken back)", again)
            _logged(order_id, again)
            return Discard("recorded", f"{exists}, submitted while you discarded: {_STANDS}", again)
        if exists:  # gone from the queue meanwhile: dead-lettered as recorded (the peek sweep), or applied
            now_doc = ctx.deferrals.get(order_id)
            settled = now_doc.entry(seq) if now_doc is not None else None
            if settled is None or not discarded_as(settled, operator, reason):  # its submission applied it
                return Discard("order-exists", f"{exists} (submitted while you discarded: {_APPLIED})", settled)
            _logged(order_id, settled)
            return Discard("recorded", f"{exists}, submitted while you discarded: {_STANDS}", settled)
        _logged(order_id, mine)
        dead = _dead_letter(receiver, mine)
        return Discard("discarded" if dead else "recorded", entry=mine, dead_lettered=dead)


_APPLIED = "its submission applied the payment and completed its message: nothing was discarded"
_STANDS = (
    "its message was dead-lettered as discarded meanwhile and the discard stands; if the payment is for that order, "
    "look at the order's payment (a submission may have applied it just before) and, if it has none, resubmit the "
    "message from the orders dead-letter queue"
)


def _logged(order_id: str, entry: DeferredEntry) -> None:
    app_event(
        "DeferredDiscarded",
        f"order {order_id}: deferred payment notification #{entry.sequence_number} discarded by "
        f"{entry.discarded_by}: {entry.discard_reason}",
        orderId=order_id,
        sequenceNumber=entry.sequence_number,
        operator=entry.discarded_by,
        reason=entry.discard_reason,
        notificationId=entry.notification_id,
    )


def _order_exists(ctx: AppContext, order_id: str) -> str:
    """Why the payment is its order's now (the order's state record exists: the peek sweep applies it), or empty.
    Its order document alone does not count: a submission whose state record met an hour of store failures is
    dead-lettered with its order document written, and its payment is the ``PaymentWithoutOrder`` alert's (found in
    a simulation of 45 % throttling: every discard of such a payment was refused). A submission in flight writes its
    state record before it reads the deferral document: the second look, after the discard is written, sees it."""
    if ctx.states.get(order_id) is not None:
        return f"order {order_id} exists now: the payment is applied to it"
    return ""


def _originals(doc: DeferralDocument, copy: DeferredEntry) -> list[int]:
    """The entries still waiting for the notification of the store-retry copy ``copy`` under lower numbers: its
    originals (``deferral.tracking._before``), which the discard resolves with it. An entry recorded before digests
    were kept is matched by id alone and is not taken (it may be another notification under the same id)."""
    return [
        e.sequence_number
        for e in doc.waiting()
        if e.sequence_number < copy.sequence_number
        and e.notification_digest
        and e.carries(copy.notification_id, copy.notification_digest)
    ]


# The message now at an entry's number is another one (``is_entrys_message``): nothing written, nothing settled.
_ANOTHER_MESSAGE = (
    "the message now at #{seq} on the orders queue is not the payment notification recorded for order {order} under "
    "that number (the queue's numbers started again, or the document was edited): nothing discarded; look for the "
    "notification in the queue and the dead-letter queue"
)
_COPY_WAITS = (
    "deferred message #{seq} is not on the orders queue, and the same notification waits as #{copy} (its store-retry "
    "copy, which decides it): discard #{copy} instead (a copy's discard resolves its original with it)"
)


def _copies(doc: DeferralDocument, original: DeferredEntry) -> list[int]:
    """The entries still waiting for the notification of ``original`` under higher numbers: its store-retry copies
    (``_originals`` the other way round). Its message gone, the original waits for a copy's decision: accounted for
    as gone instead, it was resolved ``Expired`` and paged ``DeferredMessageExpired`` while its copy still waited."""
    return [
        e.sequence_number
        for e in doc.waiting()
        if e.sequence_number > original.sequence_number
        and original.notification_digest
        and e.carries(original.notification_id, original.notification_digest)
    ]


def _not_here(
    ctx: AppContext, receiver: DeferredReceiver, order_id: str, entry: DeferredEntry, peeked: Any
) -> str | None:
    """Why the message of waiting ``entry`` (``peeked``: as a peek at its number shows it) cannot be discarded now
    (None: it is on the queue, deferred, alive). Gone, it is accounted for as anywhere else (``account_for_absent``:
    applied as the state record shows, or ``Expired`` with its alert, or left while its entry is young: a
    store-retry copy of it may be on the way)."""
    seq = entry.sequence_number
    if peeked is None:
        young = entry.updated_at > ctx.clock.now() - ctx.settings.peek_sweep_age
        found = account_for_absent(ctx, receiver, order_id, seq, young=young)
        return f"deferred message #{seq} is not on the orders queue ({found}): nothing to discard; " + (
            "a store-retry copy of it may still come: look again later" if found == "young" else "reload the order"
        )
    if not is_deferred(peeked):
        return f"deferred message #{seq} is being handled by a delivery right now: reload the order and try again"
    if has_expired(peeked, ctx.clock.now()):
        return (
            f"deferred message #{seq} expired at {to_text(peeked.expires_at_utc)}: the peek sweep's next run moves "
            "it to the dead-letter queue and reports it expired"
        )
    return None


def _dead_letter(receiver: DeferredReceiver, entry: DeferredEntry) -> bool:
    """Fetches ``entry``'s message (its discard written) and dead-letters it as recorded. False: not fetched (held
    by another processor, or no longer deferred: dead-lettered already, or gone); its entry is resolved, so
    whoever finds it deferred dead-letters it so (the peek sweep, ``settle_as_recorded``)."""
    settle = recorded_settlement(entry)
    if settle is None or entry.status is not EntryStatus.DEAD_LETTERED:
        return False
    fetched = receiver.receive_deferred([entry.sequence_number])
    if not fetched:
        return False
    receiver.dead_letter(fetched[0], settle.reason or "", settle.description or "")
    return True
