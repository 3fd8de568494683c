"""The peek sweep: a safety net for deferred messages nobody will fetch.

Deferred messages are never delivered again; the only way back is the sequence number. The sweep
peeks the ``orders`` queue (no locks taken) for deferred messages enqueued at least
``PEEK_SWEEP_AGE_MINUTES`` ago and, for each:

* a sequence number no deferral document knows (tracking was lost: a crash between deferring and
  recording, a lost document): it is recorded, then handled like a tracked one;
* its order exists now (its submission missed it, e.g. the notification was deferred just after the
  submission looked): it is fetched by sequence number and applied;
* its order does not exist yet: left waiting (it is not fetched: every fetch counts as a delivery); once
  it has waited ``ORDERLESS_PAYMENT_ALERT_MINUTES`` an operator is told, once (``PaymentWithoutOrder``: a
  payment for an order that never came, or whose submission is in the dead-letter queue), and it waits on;
* it waits for a ``RetryDeferred``: left to it, unless its last round is long overdue (the retry was
  lost), then it is tried as the next round;
* already resolved but still deferred (its settlement was lost): fetched and settled as recorded
  (``Applied`` completed, ``DeadLettered`` dead-lettered with its recorded reason), never decided again;
* untracked, when its order has ``WAITING_LIMIT`` messages deferred already: fetched and dead-lettered
  ``TooManyDeferred`` (the order's document stays bounded), unless looking for the order's waiting
  messages on the queue frees a place (``deferral.apply.make_room``: an entry whose message is gone);
* past its time to live: fetched, which moves it to the dead-letter queue, then recorded as expired
  and alerted once (peek does not show it again: no loop).

A state store failure skips the message (the next round of the queue comes back to it);
``STORE_FAILURES_IN_A_ROW`` of them stop the run, and the next run goes on after them.
Bounded by ``PEEK_SWEEP_MAX_MESSAGES`` peeked per run. A run continues from the sequence number the
previous run of this process stopped at (``SweepCursor``) and starts over from the beginning once
it reaches the end of the queue: messages waiting for their order can no longer hide every newer
message from the sweep. The cursor lives in process memory; a restart starts from the beginning.
A message whose order was rejected by admission control is dead-lettered, not left waiting."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from adapters.cosmos.deferral_store import update_deferrals
from adapters.cosmos.errors import StoreUnavailable
from adapters.servicebus.deferred import DeferredReceiver
from adapters.servicebus.settlement import body_bytes
from contracts.messages import PaymentNotification
from contracts.names import ORDERS_QUEUE
from contracts.parsing import InvalidMessage, named_order_id, parse
from deferral.apply import (
    DEFERRABLE,
    account_for_absent,
    dead_letter_not_kept,
    has_expired,
    is_deferred,
    process_deferred,
    record_making_room,
    settle_as_recorded,
)
from dependencies import AppContext
from domain.deferral import DeferralReason, DeferredEntry, EntryStatus, TooManyWaiting, orderless_alerted
from domain.payments import fields_of, money
from domain.timefmt import to_text
from notifications.alerts import raise_alert
from observability.events import app_event
from orchestrators.raise_events import RaiseEvent

log = logging.getLogger(__name__)

PEEK_PAGE = 100
# The alert of a payment notification that has waited ORDERLESS_PAYMENT_ALERT_MINUTES for its order.
ORDERLESS_ALERT = "PaymentWithoutOrder"
# A store failure on one message (a throttled request) skips it; this many in a row is an outage: the run
# stops, and the next one goes on after them (starting from them, one order's hot partition failing
# them every time would stop every run there).
STORE_FAILURES_IN_A_ROW = 3


@dataclass
class SweepReport:
    peeked: int = 0
    deferred_seen: int = 0  # deferred and old enough to look at
    recorded: int = 0  # found untracked and recorded
    recovered: int = 0  # applied by this sweep
    waiting: int = 0  # order still missing, or a RetryDeferred owns it
    dead_lettered: int = 0
    expired: int = 0
    alerted: int = 0  # waiting for an order that has not come: an operator told (PaymentWithoutOrder)
    failed: int = 0
    events: list[RaiseEvent] = field(default_factory=list)


@dataclass
class SweepCursor:
    """Where the next run starts peeking (per worker process)."""

    next_sequence: int = 0


def peek_sweep(ctx: AppContext, cursor: SweepCursor | None = None) -> SweepReport:
    report = SweepReport()
    cursor = cursor if cursor is not None else SweepCursor()
    now = ctx.clock.now()
    cutoff = now - ctx.settings.peek_sweep_age
    budget = ctx.settings.peek_sweep_max_messages
    unavailable: list[int] = []  # sequence numbers whose handling just met StoreUnavailable, in a row
    with ctx.deferred.open(ORDERS_QUEUE) as receiver:
        start = next_seq = cursor.next_sequence
        wrapped = start == 0
        while budget > 0:
            batch = receiver.peek(min(PEEK_PAGE, budget), next_seq)
            if wrapped and start > 0:  # after going round: stop where this run began
                batch = [m for m in batch if int(m.sequence_number) < start]
            if not batch:
                if wrapped:
                    next_seq = 0  # the whole queue was looked at: the next run starts from the beginning
                    break
                next_seq, wrapped = 0, True  # the end of the queue: go on from the beginning
                continue
            budget -= len(batch)
            report.peeked += len(batch)
            for message in batch:
                next_seq = max(next_seq, int(message.sequence_number) + 1)
                if not is_deferred(message) or message.enqueued_time_utc > cutoff:
                    continue
                report.deferred_seen += 1
                try:
                    _examine(ctx, receiver, message, now, report)
                    unavailable = []
                except StoreUnavailable as exc:
                    report.failed += 1
                    unavailable.append(int(message.sequence_number))
                    if len(unavailable) >= STORE_FAILURES_IN_A_ROW:  # the store is down: stop here
                        log.warning("peek sweep stopped: state store unavailable: %s", exc)
                        cursor.next_sequence = next_seq  # past them: the next round of the queue comes back
                        return _logged(report)
                    log.info(
                        "peek sweep: deferred #%s skipped, state store unavailable: %s", message.sequence_number, exc
                    )
                except Exception as exc:
                    report.failed += 1
                    log.warning("peek sweep: deferred #%s not handled: %s", message.sequence_number, exc, exc_info=True)
    cursor.next_sequence = next_seq
    return _logged(report)


def _examine(ctx: AppContext, receiver: DeferredReceiver, peeked: Any, now: datetime, report: SweepReport) -> None:
    seq = int(peeked.sequence_number)
    try:
        note = parse(body_bytes(peeked), DEFERRABLE)
    except InvalidMessage:  # dead-letters it with the reason, and resolves its entry if it names its order
        _fetch_and_process(ctx, receiver, seq, None, 0, report, named_order_id(body_bytes(peeked)))
        return
    order_id = note.order_id
    doc = ctx.deferrals.get(order_id)
    entry = doc.entry(seq) if doc is not None else None
    if entry is None:
        reason = DeferralReason.ORDER_NOT_SUBMITTED
        try:
            recorded = record_making_room(
                ctx, order_id, peeked, reason, recorded_by="sweep", note=note, receiver=receiver
            )
        except TooManyWaiting as exc:  # its order's document is full: fetched and dead-lettered, not kept
            for fetched in receiver.receive_deferred([seq]):
                dead_letter_not_kept(ctx, receiver, fetched, order_id, exc)
                report.dead_lettered += 1
            return
        entry = recorded.entry(seq)
        report.recorded += 1
        if entry is None:
            raise RuntimeError(f"deferred #{seq} of order {order_id} is missing from the document just written")
    if has_expired(peeked, now):
        _fetch_and_process(ctx, receiver, seq, entry, 0, report, order_id)  # absent: recorded as expired
        return
    if entry.status is EntryStatus.DEFERRED:
        if entry.reason is DeferralReason.DEPENDENCY_UNAVAILABLE and not _retry_overdue(ctx, entry, now):
            report.waiting += 1
            return
        rejected = doc is not None and doc.rejected_at is not None
        if entry.reason is DeferralReason.ORDER_NOT_SUBMITTED and not rejected and ctx.states.get(order_id) is None:
            report.waiting += 1
            since = peeked.enqueued_time_utc
            if entry.orderless_alerted_at is None and since <= now - ctx.settings.orderless_payment_alert:
                _alert_orderless(ctx, note, seq, since, now)
                report.alerted += 1
            return
    if settle_as_recorded(receiver, entry):  # resolved, its settlement lost: settled as recorded
        report.dead_lettered += entry.status is EntryStatus.DEAD_LETTERED
        return
    rounds = entry.rounds if entry.reason is DeferralReason.DEPENDENCY_UNAVAILABLE else 0
    _fetch_and_process(ctx, receiver, seq, entry, rounds, report, order_id)


def _alert_orderless(ctx: AppContext, note: PaymentNotification, seq: int, since: datetime, now: datetime) -> None:
    """Tells an operator that the notification deferred as ``seq`` has waited since ``since`` for an order that
    has not come, then notes it on its entry (told once). A failed send raises: nothing is noted, and the next
    run tells again. A note that fails after the send: the next run sends it again under the same id, which
    duplicate detection collapses within its 10 minutes."""
    order_id = note.order_id
    raise_alert(
        ctx.sender,
        kind=ORDERLESS_ALERT,
        summary=(
            f"order {order_id}: a payment of {money(note.amount_cents, note.currency)} waits for an order never "
            "submitted: find the order (dead-lettered?) or refund"
        ),
        at=now,
        order_id=order_id,
        discriminator=seq,
        details={"sequenceNumber": seq, "waitingSince": to_text(since), **fields_of(note)},
    )
    update_deferrals(ctx.deferrals, order_id, lambda d: orderless_alerted(d, seq, now), now)


def _retry_overdue(ctx: AppContext, entry: DeferredEntry, now: datetime) -> bool:
    """The round's ``RetryDeferred`` should have come ``PEEK_SWEEP_AGE_MINUTES`` ago: lost (its send, or
    the message itself), or ignored as early (a clock further off than ``RETRY_CLOCK_TOLERANCE``)."""
    return entry.retry_due(ctx.settings.defer_retry_delay) + ctx.settings.peek_sweep_age <= now


def _fetch_and_process(
    ctx: AppContext,
    receiver: DeferredReceiver,
    seq: int,
    entry: DeferredEntry | None,
    rounds: int,
    report: SweepReport,
    order_id: str | None = None,
) -> None:
    # no message in hand (a timer that runs again): a rejected notification's alert whose send fails raises, the
    # message left deferred undecided (``process_deferred``), and a later run decides it again
    done = process_deferred(ctx, receiver, seq, round_number=rounds, order_id=order_id, owed=None)
    if done is None:
        tracked = entry is not None and order_id is not None and entry.status is EntryStatus.DEFERRED
        if tracked and order_id is not None and account_for_absent(ctx, receiver, order_id, seq) == "expired":
            report.expired += 1
        return
    if done.result == "applied":
        report.recovered += 1
        report.events.extend(done.events)
        app_event(
            "DeferredRecovered",
            f"order {done.order_id}: deferred #{seq} applied by the peek sweep",
            orderId=done.order_id,
            sequenceNumber=seq,
            via="sweep",
        )
    elif done.result == "dead-lettered":
        report.dead_lettered += 1
    else:
        report.waiting += 1


def _logged(report: SweepReport) -> SweepReport:
    app_event(
        "PeekSweep",
        f"peek sweep: {report.peeked} peeked, {report.deferred_seen} deferred, {report.recorded} recorded, "
        f"{report.recovered} recovered, {report.expired} expired, {report.alerted} told as waiting without their order",
        peeked=report.peeked,
        deferredSeen=report.deferred_seen,
        recorded=report.recorded,
        recovered=report.recovered,
        waiting=report.waiting,
        deadLettered=report.dead_lettered,
        expired=report.expired,
        alerted=report.alerted,
        failed=report.failed,
    )
    return report
