"""Order intake: what happens to one message from the ``orders`` queue.

``handle_orders_message`` parses the body and hands the contract to the handler registered for its
``type`` in ``HANDLERS`` (one module per message type). ``submit_order`` is the handler of
``OrderSubmitted``: two idempotent writes keyed by the order id, in this order: the order (create-or-verify in
``orders``), then its state record (create in ``state``). They are not one transaction; a crash
between them leaves an order without a state record, and the redelivery of the same message
finds the identical order and creates the missing record. Nothing is ever overwritten.

The fast path: while the in-flight cap allows, the state record is created already claimed for
attempt 1 (``transitions.new_claimed_record``), so the create is also the claim: a create fails if
the record exists, so only the delivery that created it owns attempt 1 and starts it. Over the cap it
is created ``Pending`` and the starter's sweep claims it later. A delivery that finds the record
(a duplicate, or the loser of a concurrent create) starts nothing. Nor does a create whose response
was lost: its redelivery (or the SDK's retry, answered 409) finds a record it cannot tell from a
concurrent delivery's claim, so the claim is left unstarted and the supervisor retries the order once
``START_GRACE_SECONDS`` have passed, as after any failed start.

Before either write, a new order's deferral document is read (it also lists the payment notifications waiting
for the order; the delivery that writes the state record reads it once more after, for a refusal of another
submission of the order marked meanwhile: ``deferral.recovery.settle_refusals``). At the pending cap
(``MAX_PENDING``) the order is refused (``_reject``): the refusal is written there, naming the message,
before anyone is told, and whatever handles the same message again (a redelivery, a store-retry copy) finds
it and finishes the refusal instead of judging the message afresh."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any

from adapters.cosmos.errors import AlreadyExists, EtagMismatch, StoreUnavailable
from adapters.cosmos.mapping import DocumentError
from adapters.cosmos.order_store import CreateOutcome
from adapters.cosmos.state_store import update_once
from adapters.servicebus.deferred import ReceiveError
from adapters.servicebus.sender import SendError
from adapters.servicebus.settlement import ReceivedMessage, Settlement, body_bytes, named_order
from contracts.messages import CancelOrder, Contract, OrderSubmitted, PaymentNotification, RetryDeferred
from contracts.parsing import InvalidMessage, parse
from deferral.recovery import (
    Recovery,
    hand_over_refusals,
    recover_for_order,
    release_for_rejected_order,
    settle_refusals,
    withdraw_refusal,
)
from dependencies import AppContext
from domain import transitions
from domain.deferral import DeferralDocument
from domain.errors import IllegalTransition
from domain.records import RECEIVED_OWED, HistoryEntry, StateRecord
from domain.states import TERMINAL_STATES, ProcessState
from notifications.alerts import OwedAlert
from notifications.received import owe_received
from notifications.repeats import raise_once_per_problem
from notifications.status import OwedStatus, publish_status_or_owe
from observability.events import app_event, state_transition
from orchestrators.attempt_plan import plan_attempt
from orchestrators.raise_events import RaiseEvent
from orchestrators.starter import Claim, has_capacity
from submission.cancellation import cancel_order
from submission.payments import payment_notification
from submission.result import Handler, IntakeResult
from submission.retry_deferred import retry_deferred
from submission.store_outage import original_sequence, retry_later, rounds_used_up

log = logging.getLogger(__name__)


def _order_submitted(ctx: AppContext, contract: Any, message: ReceivedMessage, owed: list[OwedAlert]) -> IntakeResult:
    return submit_order(ctx, contract, message, owed)


# Message type -> (contract, handler). A type not listed here is dead-lettered as UnknownType.
HANDLERS: dict[str, tuple[type[Contract], Handler]] = {
    "OrderSubmitted": (OrderSubmitted, _order_submitted),
    "PaymentNotification": (PaymentNotification, payment_notification),
    "RetryDeferred": (RetryDeferred, retry_deferred),
    "CancelOrder": (CancelOrder, cancel_order),
}


def handle_orders_message(ctx: AppContext, message: ReceivedMessage) -> IntakeResult:
    accepted = {kind: contract for kind, (contract, _) in HANDLERS.items()}
    try:
        contract = parse(body_bytes(message), accepted)
    except InvalidMessage as bad:
        app_event(
            "DeadLettered",
            f"orders message {message.message_id}: {bad}",
            logging.WARNING,
            messageId=message.message_id,
            # the order a message that does not parse names (an order, its payment, its cancellation): found by it
            orderId=named_order(message),
            reason=bad.reason,
        )
        return IntakeResult(Settlement.deadletter(bad.reason, bad.description))
    _, handler = HANDLERS[contract.type]  # type: ignore[attr-defined]
    # Alerts whose send failed while the message was handled (``raise_alert_owing``): handed to the alert courier
    # by the trigger before it settles the message, whatever the settlement (a failure after one was owed, too:
    # what was done before it, a deferred notification dead-lettered with its alert owed, is not done again).
    owed: list[OwedAlert] = []
    try:
        result = handler(ctx, contract, message, owed)
    except StoreUnavailable as exc:
        # Nothing is half-done that handling the message again cannot finish: again later, not at once
        # (submission/store_outage.py: an outage would use up the deliveries in seconds).
        result = retry_later(ctx, message, contract.type, str(exc))  # type: ignore[attr-defined]
    except DocumentError as exc:
        # A document of the order this version cannot read (a newer version's state, field or value, met during a
        # rolling upgrade or after a rollback): left as it is and the message handled again later, as in a store
        # outage (by the newer version, or once it is back), not redelivered at once until dead-lettered in seconds
        why = f"a document of the order is not one this version reads, a newer version's? ({exc})"
        result = retry_later(ctx, message, contract.type, why, store_down=False)  # type: ignore[attr-defined]
    except ReceiveError as exc:
        # A deferred message it fetches could not be fetched (the app's identity refused for a while: a token the
        # credential could not get, a role propagating; a lost connection): nothing fetched or settled by it, so
        # again later, as a store failure, not redelivered at once until dead-lettered in seconds.
        result = retry_later(ctx, message, contract.type, str(exc), store_down=False)  # type: ignore[attr-defined]
    except SendError as exc:
        # Service Bus itself is failing (a copy could not be sent either): abandon, Service Bus retries.
        log.warning("%s %s: %s; abandoning for redelivery", contract.type, message.message_id, exc)  # type: ignore[attr-defined]
        result = IntakeResult(Settlement.abandon(str(exc)))
    # its type: a message whose owed status Durable did not take is handled again as a copy of that type
    return replace(result, alerts=result.alerts + tuple(owed), kind=contract.type)  # type: ignore[attr-defined]


def submit_order(
    ctx: AppContext, order: OrderSubmitted, message: ReceivedMessage, owed: list[OwedAlert]
) -> IntakeResult:
    """``owed``: the message's alerts owed (``handle_orders_message``), for a deferred notification this submission
    dead-letters and the notifications it flags for the accepted order."""
    now = ctx.clock.now()
    state = ctx.states.get(order.order_id)
    # The order's deferral document, read before deciding (it also lists the notifications waiting for the
    # order): it says whether this very message was refused.
    deferrals = ctx.deferrals.get(order.order_id)
    sent_as = original_sequence(message)
    if deferrals is not None and deferrals.refuses(sent_as):
        return _reject(ctx, order, message, deferrals, now, owed, finishing=True)  # never accepted after its refusal
    if deferrals is not None and deferrals.was_refused(sent_as):
        # Refused, then another submission of the order was refused or accepted since: never accepted,
        # nothing written. While a refusal stands it is told again (the same ids collapse); once a later
        # submission was accepted, that one speaks for the order (a late Rejected would contradict it).
        if deferrals.rejected_at is not None:
            return _reject(ctx, order, message, deferrals, now, owed, finishing=True, write=False)
        # Not told again, nor alerted: an earlier handling's Rejected or OrderRejected still owed (its courier not
        # taken by Durable: this is its copy) is dropped with the refusal, as the status courier drops its Rejected
        app_event(
            "RefusalSuperseded",
            f"order {order.order_id}: message {message.message_id} was refused before a later submission was "
            "accepted: completed, its Rejected and OrderRejected not said again",
            orderId=order.order_id,
            messageId=message.message_id,
        )
        return IntakeResult(Settlement.complete())
    if state is None:
        if _pending_full(ctx) and ctx.orders.get(order.order_id) is None:
            return _reject(ctx, order, message, deferrals, now, owed)
        if deferrals is not None and deferrals.rejected_at is not None:  # an earlier submission was refused
            deferrals = withdraw_refusal(ctx, deferrals)

    outcome = ctx.orders.create_or_verify(order.order_document())
    if outcome is CreateOutcome.CONFLICT:
        return _conflicting(ctx, order, now)

    claim: Claim | None = None
    announced: tuple[OwedStatus, ...] = ()  # Received, if its send failed: for the courier
    created = state is None
    if state is None:
        state, claim = _create_state(ctx, order, sent_as)
        # said at once: a failure below must not leave the record moving on (claimed, started, cancelled)
        # before a redelivery, with the submitter never told it was received
        announced = _announce(ctx, state, now)
        if announced:  # and owed on the record, for whoever acts next if the hand-over never happens
            state = _owe_received(ctx, state)
            if claim is not None and state.received_owed is None:  # the mark given up: the attempt says it first
                claim = replace(claim, say_received=True)
    else:
        log.info("order %s: duplicate submission, nothing written", order.order_id)
    # PaymentNotifications that arrived before this order were deferred: fetch and apply them now. Those
    # dead-lettered while an earlier refusal of it stood are named to an operator (the order is live now).
    recovered = Recovery()  # what recover_for_order applied, once it returned
    # the events of the notifications applied, as each is: on the record, their entries resolved, whatever fails after
    raised: list[RaiseEvent] = []
    try:
        recovered = recover_for_order(ctx, order.order_id, deferrals, owed, raised)
        settle_refusals(ctx, order.order_id, deferrals, owed, created=created)
    except (StoreUnavailable, SendError) as exc:
        if not created and rounds_used_up(message):
            # Its last round: abandoned, Service Bus would dead-letter it MaxDeliveryCountExceeded and page an
            # operator for a submission whose order exists. Completed instead, what is left handed over.
            _hand_over(ctx, order.order_id, message, deferrals, owed, exc)
        elif not created:
            if not raised:
                raise
            return _again_with_events(ctx, message, tuple(raised), exc)
        else:
            # The record is written (and claimed, on the fast path: the attempt is started anyway, since left
            # unstarted it would wait out the start grace for the supervisor). Abandon: the redelivery applies
            # the deferred notifications to the record, as to any notification that arrives after its order,
            # and raises the alert for those dead-lettered under a refusal if it was not sent (it reads the
            # document again after the record exists: a refusal marked since this delivery's read is in it).
            log.warning("order %s: %s; abandoning for the deferred notifications", order.order_id, exc)
            return IntakeResult(Settlement.abandon(str(exc)), claim, owed=announced)
    # A duplicate submission says Received again while the order has not begun (or still owes it), and so
    # does the message that created the record, handled again (``submittedAs``): whatever the order did since,
    # its first delivery may never have said it (its create's response and read-back lost, or its send, the
    # mark and the courier hand-over lost with the host). The record is read again only then: in the delivery
    # that created it, a read failing here would hand the message to a store-retry copy and drop the Received
    # owed above (its mark's write may have failed too).
    if not created:
        if recovered.applied:
            try:
                state = ctx.states.get(order.order_id) or state
            except StoreUnavailable as exc:
                # decided on the record as this delivery read it, as when nothing was applied (an applied payment
                # says nothing to the submitter): raised, the failure handed the message to a store-retry copy (in
                # its last round, abandoned it) and dropped the applied notifications' events (red team)
                log.warning(
                    "order %s: record not read again (%s); Received decided on the first read", order.order_id, exc
                )
        if _not_begun(state) or state.received_owed is not None or _created_by(state, sent_as):
            announced = _announce(ctx, state, now)
            if announced:
                _owe_received(ctx, state)
    return IntakeResult(Settlement.complete(), claim, tuple(raised), owed=announced)


def _again_with_events(
    ctx: AppContext, message: ReceivedMessage, events: tuple[RaiseEvent, ...], exc: Exception
) -> IntakeResult:
    """A duplicate submission applied deferred notifications (``events``: theirs), then a store or send failure met
    it (applying the next one, or settling the order's refusals): handled again later (a store failure) or abandoned
    (a send failure), as ``handle_orders_message`` would, with the applied notifications' ``PaymentNotified`` events
    raised all the same. They are on the record, their entries resolved: the next handling finds them no longer
    waiting and raises none, so the payment step waiting for one waited out its deadline for a payment on the record
    (red team)."""
    if isinstance(exc, StoreUnavailable):
        again = retry_later(ctx, message, "OrderSubmitted", str(exc))
    else:
        log.warning("OrderSubmitted %s: %s; abandoning for redelivery", message.message_id, exc)
        again = IntakeResult(Settlement.abandon(str(exc)))
    return replace(again, events=again.events + events)


def _hand_over(
    ctx: AppContext,
    order_id: str,
    message: ReceivedMessage,
    as_read: DeferralDocument | None,
    owed: list[OwedAlert],
    exc: Exception,
) -> None:
    """A submission in its last store-retry round found the order's state record (the order and its record stand:
    written by an earlier delivery, the data verified the same), and the deferred notifications could not be applied
    or the refusals settled (``recover_for_order``, ``settle_refusals``: a store or send failure). What the message
    still carried is done by others, so it is completed, not abandoned into a dead letter that pages for nothing:

    * the notifications waiting for the order, and the rounds of those waiting for a dependency: the peek sweep
      applies a deferred notification whose order exists (and tries an overdue round), ``PEEK_SWEEP_AGE_MINUTES``
      after it was deferred;
    * the notifications dead-lettered under an earlier refusal of the order: named to an operator here, from the
      document as this delivery read it (``hand_over_refusals``; they stay listed, so a later submission names them
      again): no other path names them.

    Before, it was abandoned after the last round and Service Bus dead-lettered it ``MaxDeliveryCountExceeded``
    (``localrun fuzz`` seed 6050: an order written in round 57 of 61, its notification throttled to the end; the
    order ran, the peek sweep applied the payment, and the dead-letter watch paged an operator for nothing)."""
    named = hand_over_refusals(ctx, as_read, owed)
    app_event(
        "SubmissionHandedOver",
        f"order {order_id}: submission {message.message_id} in its last store-retry round: its record exists, but "
        f"its deferred notifications could not be applied or its refusals settled ({exc}); completed, the peek sweep "
        "applies them"
        + ("; the notifications dead-lettered under a refusal of it named to an operator" if named else ""),
        logging.WARNING,
        orderId=order_id,
        messageId=message.message_id,
        refusedNamed=named,
    )


def _conflicting(ctx: AppContext, order: OrderSubmitted, now: datetime) -> IntakeResult:
    """A submission of an existing order with other data: dead-lettered ``ConflictingOrderData``, with an alert
    per conflicting content (a digest of the order as it would be stored), not per message: a producer resending
    the same conflicting order a thousand times paged a thousand times (each message its own alert id). Another
    content of the order is another alert at once: by the order id alone, a second conflict within duplicate
    detection's 10 minutes was collapsed into the first's alert and told no one. Repeats of one content are held
    while they keep coming (an alert mark, ``notifications/repeats.py``), past duplicate detection's 10 minutes
    too; the dead-letter watch still logs every message. The mark is written only for an alert sent here: one owed
    to the courier that Durable does not take either is sent once more by the trigger as the message is
    dead-lettered, or logged ``AlertUndelivered`` (``submission.courier_retry``)."""
    description = f"order {order.order_id} exists with different data; the stored order is kept unchanged"
    digest = _content_digest(order)
    owed: list[OwedAlert] = []  # a failed send goes to the alert courier, not back to Service Bus
    raise_once_per_problem(
        ctx.alert_marks,
        ctx.sender,
        f"ConflictingOrderData:{order.order_id}:{digest}",
        owed=owed,
        kind="ConflictingOrderData",
        summary=description,
        at=now,
        order_id=order.order_id,
        severity="warning",
        discriminator=digest,
    )
    return IntakeResult(Settlement.deadletter("ConflictingOrderData", description), alerts=tuple(owed))


def _content_digest(order: OrderSubmitted, *also: str) -> str:
    """A digest of the order as it would be stored (and of ``also``): the same for every message carrying the same
    content, whatever its MessageId and sequence number."""
    text = json.dumps([order.order_document(), *also], sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _reject(
    ctx: AppContext,
    order: OrderSubmitted,
    message: ReceivedMessage,
    deferrals: DeferralDocument | None,
    now: datetime,
    owed: list[OwedAlert],
    *,
    finishing: bool = False,
    write: bool = True,
) -> IntakeResult:
    """The pending cap refuses the order. The refusal is written before anyone is told of it:

    1. the order's deferral document is marked rejected, naming this message as its sender sent it
       (``original_sequence``), and the notifications waiting for the order are dead-lettered
       (``release_for_rejected_order``). A store failure (``StoreUnavailable``) before the mark is written
       has promised nothing: the message is handled again later (``store_outage``) and decided afresh,
       accepted if the cap has room by then. Once the mark is written, the order's state record is looked for
       (and again once the waiting notifications are released): found (another submission of the order accepted
       while this one was judged), the mark is withdrawn and the message completed, telling nobody (the accepted
       submission speaks for the order);
    2. ``Rejected`` to the submitter (a failed send goes to the courier, which tells it only while the refusal
       stands: a state record written meanwhile, another submission of the order accepted, ends it untold);
    3. the ``OrderRejected`` alert, once per order and refused content while the refusals go on (an alert mark:
       repeats are held, ``AlertRepeatHeld``; a failed send goes to the alert courier, ``deliver_alert_v1``, which
       the trigger hands it to before it settles the message; one Durable does not take either has the message
       handled again later, a store-retry copy that finishes the refusal again: ``submission.courier_retry``), and
       the message is completed. A refusal superseded before that copy is handled (another submission of the
       order accepted: the copy is completed telling nobody) ends with its alert unsent, as its ``Rejected`` is
       (``RefusalSuperseded``).

    Once the mark is written, whatever handles the same message again (a redelivery after a failure or a
    lost lock, a store-retry copy) finds it (``submit_order``, ``finishing``) and goes through the same
    steps instead of being judged afresh: the same writes, the same alert id and status MessageId (Service
    Bus's duplicate detection collapses the repeats). Another submission of the order is judged afresh,
    and its ``Rejected`` is told under an id of its own: it names the refused message by its sequence number
    as sent (``refusal_variant``), so a second refusal within the 10 minutes of duplicate detection is not
    taken for the first. Its alert is named the same way, but raised only for a problem not paged yet: the same
    content refused again while the refusals go on is held (``AlertRepeatHeld``), another content is alerted.
    ``write=False``: a refused message handled again after another submission of the order was accepted
    (or refused) since: only told again, nothing written (the refusal it had must not return)."""
    sent_as = original_sequence(message)
    if write and release_for_rejected_order(ctx, order.order_id, sent_as, deferrals, owed).withdrawn:
        log.info(
            "order %s: message %s refused, but another submission of the order was accepted meanwhile: completed",
            order.order_id,
            message.message_id,
        )
        return IntakeResult(Settlement.complete())
    why = "its refusal, written by an earlier delivery, finished" if finishing else "pending cap"
    app_event(
        "OrderRejected",
        f"order {order.order_id} rejected: {why}",
        orderId=order.order_id,
        messageId=message.message_id,
        finishing=finishing,
    )
    status_owed = publish_status_or_owe(
        ctx.sender,
        reply_to=order.reply_to,
        order_id=order.order_id,
        status="Rejected",
        attempt=0,
        at=now,
        reason=f"too many pending orders (MAX_PENDING={ctx.settings.max_pending}); submit again later",
        variant=refusal_variant(sent_as),
    )
    # A failed send goes to the alert courier, on durable timers, and the message is completed: abandoned (or
    # copied, whose send failed too) on each failure, Service Bus failing five deliveries in a row dead-lettered
    # it MaxDeliveryCountExceeded, the refusal written and told but never alerted. One alert per order and refused
    # content (and reason), not per message: a producer re-sending the same refused order every minute paged every
    # minute (each message's sequence number was the alert's id: 182 pages in three hours); its repeats are held
    # (an alert mark, ``notifications/repeats.py``), the submitter still told each time above. Marked only when the
    # alert was sent here, as ``_conflicting``'s: one owed to the courier that Durable does not take either is raised
    # again by the message's store-retry copy (submission/courier_retry.py).
    reason = f"MAX_PENDING={ctx.settings.max_pending}"
    digest = _content_digest(order, reason)
    alerts: list[OwedAlert] = []
    raise_once_per_problem(
        ctx.alert_marks,
        ctx.sender,
        f"OrderRejected:{order.order_id}:{digest}",
        owed=alerts,
        kind="OrderRejected",
        summary=f"order {order.order_id} rejected: {ctx.settings.max_pending} orders pending (MAX_PENDING)",
        at=now,
        order_id=order.order_id,
        severity="warning",
        discriminator="" if sent_as is None else sent_as,
        details={} if sent_as is None else {"sequenceNumber": sent_as},
    )
    return IntakeResult(Settlement.complete(), owed=(status_owed,) if status_owed else (), alerts=tuple(alerts))


def refusal_variant(sent_as: int | None) -> str | None:
    """What tells one refusal's ``Rejected`` from another's (``publish_status``'s ``variant``): the refused
    message's sequence number as its sender sent it (``original_sequence``: the same on its redelivery and
    on every copy of it, another on any other message). The ``OrderRejected`` alert's discriminator is the
    same number (the alert is raised once per refused content, its repeats held). None (a message without a
    sequence number: never from Service Bus): the order's one id."""
    return None if sent_as is None else str(sent_as)


def _announce(ctx: AppContext, state: StateRecord, now: datetime) -> tuple[OwedStatus, ...]:
    """The ``Received`` status, sent before the fast path's attempt is started (the trigger starts it
    after the handler returns). A redelivery repeats it; MessageId collapses duplicates. A failed send
    never abandons the accepted order: the status goes to the courier instead, and is marked owed on
    the record (``_owe_received``)."""
    owed = publish_status_or_owe(
        ctx.sender, reply_to=state.reply_to, order_id=state.order_id, status="Received", attempt=0, at=now
    )
    return (owed,) if owed else ()


# A failed write of the ``receivedOwed`` mark is tried again after these (seconds): with the send that failed
# before it, a third failure (a host stopping before the courier hand-over) would leave Received unsaid.
MARK_RETRY_DELAYS = (1.0, 3.0)


def _owe_received(ctx: AppContext, state: StateRecord) -> StateRecord:
    """Marks ``Received`` owed on the record (``receivedOwed``) after its send failed: the courier gets it
    only after the handler returns, and a host that stops before that (or a lost lock, whose redelivery
    finds the order begun) would leave it unsaid; whoever writes the record next says it
    (``notifications.received``). One conditional write, on this failure path only; a concurrent writer's
    412 is read again and retried. A record found ended (``TERMINAL_STATES``: a stale read's redelivery)
    is not marked: nobody would write it again to say it, and the courier has it. If the store fails (the
    mark's write, or the read again after a failed write or a race), the mark is tried again after
    ``MARK_RETRY_DELAYS`` (seconds, within the message's lock, shared by the writes and reads), then given up
    (logged): the courier is then all there is, and a host that stops before the hand-over leaves
    ``Received`` unsaid (docs/design.md, the left case). A mark whose response was lost may have landed: read
    again with its history entry in it, it is done, even with the mark cleared since (whoever wrote next said
    ``Received``); marked again, the submitter heard ``Received`` once more from the writer after that."""
    record = state
    races = 0
    delays = iter(MARK_RETRY_DELAYS)
    maybe_landed: list[HistoryEntry] = []  # the entries of marks whose response was lost
    while races < 3:
        if record.received_owed is not None or record.process_state in TERMINAL_STATES:
            return record
        if any(entry in record.history for entry in maybe_landed):
            return record  # a mark whose response was lost landed, and Received was said since: not marked again
        marked = owe_received(record, ctx.clock.now())
        try:
            return update_once(ctx.states, record, partial(_as_marked, marked))
        except EtagMismatch:
            races += 1
        except StoreUnavailable as exc:
            maybe_landed.append(marked.history[-1])
            delay = next(delays, None)
            if delay is None:
                _mark_given_up(record, f"the mark could not be written: {exc}")
                return record
            ctx.clock.sleep(delay)  # a 503 may have written it (a lost response): the read below tells
        while True:  # the read again takes the retries left too: one 429 on it gave the mark up
            try:
                fresh = ctx.states.get(record.order_id)
                break
            except StoreUnavailable as exc:
                delay = next(delays, None)
                if delay is None:
                    _mark_given_up(record, f"the record could not be read again: {exc}")
                    return record
                ctx.clock.sleep(delay)
        if fresh is None:
            return record
        record = fresh
    _mark_given_up(record, "the mark lost three races in a row")
    return record


def _as_marked(marked: StateRecord, _read: StateRecord) -> StateRecord:
    return marked


def _mark_given_up(record: StateRecord, why: str) -> None:
    """``_owe_received`` gave the mark up (docs/design.md): ``Received`` is with the courier, and the order's first
    attempt says it again before its first step's ``Processing`` (its claim's ``say_received``: submission's own,
    set by ``submit_order``, or the starter's, which sets it on every attempt 1); a cancellation before any step
    began marks it owed in its own write, for the compensation round's claim to say first."""
    app_event(
        "ReceivedMarkGivenUp",
        f"order {record.order_id}: Received owed, but {why}; the courier says it, and the first attempt's "
        "first step says it again before Processing",
        logging.WARNING,
        orderId=record.order_id,
    )


# History events that tell the submitter nothing: its creation, claims, the retries of an attempt with no
# step begun (a claim that never started: the supervisor's, counted or, its start missed, not; the starter's
# release of a claim whose start it never tried), a payment notification applied, the mark of a Received whose
# send failed.
_SAID_NOTHING = frozenset(
    {
        "Received",
        "Claimed",
        "RetryScheduled",
        transitions.START_MISSED,
        transitions.START_NOT_TRIED,
        "PaymentNotified",
        RECEIVED_OWED,
    }
)


def _not_begun(state: StateRecord) -> bool:
    """No attempt has begun a step and nothing has told the submitter anything after ``Received``: the
    order is ``Pending`` or ``Processing`` and its history holds only its creation, claims, retries of
    claims that never started (the supervisor's, and the starter's release of a claim it never tried to start)
    and an applied payment notification. A delivery that finds it so may not
    have been the one whose ``Received`` was sent (the first one's create may have lost its response,
    or the host may have stopped before the trigger handed a failed ``Received`` to the courier), so it
    says it again. The supervisor's retry of a claim that never started counts as not begun: it says
    nothing, and a redelivery delayed by a store outage comes after it."""
    if state.steps or state.process_state not in (ProcessState.PENDING, ProcessState.PROCESSING):
        return False
    return all(entry.event in _SAID_NOTHING for entry in state.history)


def _created_by(state: StateRecord, sent_as: int | None) -> bool:
    """``state`` was created by the message sent as ``sent_as`` (``original_sequence``: a redelivery or a
    store-retry copy of it): a record written before ``submittedAs`` was, or by a message without a
    sequence number, says no."""
    return sent_as is not None and state.submitted_as == sent_as


def _pending_full(ctx: AppContext) -> bool:
    return ctx.counts.get(ProcessState.PENDING) >= ctx.settings.max_pending


def _created_after_all(ctx: AppContext, record: StateRecord, lost: StoreUnavailable) -> StateRecord:
    """A create that raised ``StoreUnavailable`` may have landed with its response lost. The record is
    read back: if it is this very create (the same record, history and timestamps included), the
    delivery goes on as its creator, so the submitter hears ``Received`` now and the claim is started
    (a redelivery could find the record moved on by then: cancelled, or retried by the supervisor, and
    no longer say it). Otherwise ``lost`` stands: the message is abandoned and redelivered."""
    try:
        current = ctx.states.get(record.order_id)
    except StoreUnavailable:
        current = None
    if current is None or replace(current, version=None) != replace(record, version=None):
        raise lost
    app_event(
        "WriteConfirmed",
        f"order {record.order_id}: the response to the state record's create was lost; a re-read shows it landed",
        logging.WARNING,
        orderId=record.order_id,
        writeEvent="Created",
    )
    return current


def _create_state(ctx: AppContext, order: OrderSubmitted, sent_as: int | None) -> tuple[StateRecord, Claim | None]:
    """Creates the state record: claimed for attempt 1 while the in-flight cap allows (the returned
    ``Claim`` is to be started), else ``Pending`` for the starter's sweep; it names the message that
    created it (``submittedAs``: ``sent_as``). A create that finds the record
    (409) returns it with no claim: whoever created it owns it (a concurrent delivery, or this very
    create whose response was lost and retried)."""
    now = ctx.clock.now()
    received = transitions.new_record(order.order_id, order.reply_to, now, submitted_as=sent_as)
    claimed = has_capacity(ctx)
    record = (
        transitions.new_claimed_record(
            order.order_id, order.reply_to, now, ctx.settings.start_grace, submitted_as=sent_as
        )
        if claimed
        else received
    )
    try:
        written = ctx.states.create(record)
    except StoreUnavailable as lost:
        written = _created_after_all(ctx, record, lost)
    except AlreadyExists:
        existing = ctx.states.get(order.order_id)
        if existing is None:  # gone again between the two calls: let a redelivery start over
            raise StoreUnavailable(f"order {order.order_id}: the create found a record the read did not") from None
        log.info(
            "order %s: the state record exists already (%s); nothing started", order.order_id, existing.process_state
        )
        return existing, None
    if not claimed:
        state_transition(None, written)
        ctx.counts.bump(ProcessState.PENDING, +1)
        return written, None
    owner = written.locked_by
    if owner is None:  # new_claimed_record always names the owner
        raise IllegalTransition(f"order {order.order_id}: created claimed without an owner")
    # One write, both moves logged as the create and the claim log them: Received, then Claimed.
    state_transition(None, received)
    state_transition(received, written)
    ctx.counts.bump(ProcessState.PROCESSING, +1)
    # the attempt's plan: the order as just stored (or found identical), the record as just created
    return written, Claim(
        written.order_id, owner, written.attempt, plan_attempt(ctx.settings, written, order.order_document())
    )
