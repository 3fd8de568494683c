"""Order intake: what happens to one message from the ``orders`` queue.

``handle_orders_message`` parses the body and hands the contract to the handler registered for its ``type`` in
``HANDLERS``. ``submit_order`` handles ``OrderSubmitted`` with two idempotent writes keyed by the order id, in
this order:

1. the order (create-or-verify in ``orders``);
2. its state record (create in ``state``).

They are not one transaction. A crash between them leaves an order without a state record; the redelivery finds
the identical order and creates the missing record. Nothing is ever overwritten.

Fast path: while the in-flight cap allows, the state record is created already claimed for attempt 1
(``transitions.new_claimed_record``). A create fails if the record exists, so only the delivery that created it
owns attempt 1 and starts it. Over the cap the record is created ``Pending`` and the starter's sweep claims it. A
create whose response was lost is read back (``_created_after_all``): if it landed, the delivery goes on as its
creator. A delivery that finds the record starts nothing, even its own create's (a redelivery, or the SDK's retry
answered 409): the supervisor retries that claim after ``START_GRACE_SECONDS``, as after any failed start.

The order's deferral document is read before either write. It lists the payment notifications waiting for the
order, and any refusal; the delivery that creates the record reads it again for a refusal marked meanwhile
(``deferral.recovery.settle_refusals``). At the pending cap (``MAX_PENDING``) the order is refused by ``_reject``:
the refusal is written, naming the message, before anyone is told, so a redelivery or store-retry copy of the same
message finishes that refusal instead of judging afresh."""

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
from adapters.servicebus.settlement import ReceivedMessage, Settlement, body_bytes, message_id_text
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
from submission.stored_before import handle_stored_before, one_line_only, refuse

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
    """Parses one ``orders`` message, runs its handler and maps the failures that mean "again later" to a settlement."""
    accepted = {kind: contract for kind, (contract, _) in HANDLERS.items()}
    handler: Handler
    try:
        contract = parse(body_bytes(message), accepted)
    except InvalidMessage as bad:
        # One whose only fault is an identifier's line break may carry what the app stored before identifiers were
        # one line (a store-retry copy made then, a client's resend): handled as before if so, once the stores say
        # it (submission/stored_before.py); anything else is dead-lettered.
        before = one_line_only(message, bad)
        if before is None:
            return refuse(message, bad)
        contract = before
        handler = partial(handle_stored_before, HANDLERS[before.type][1], finish_refused, bad)  # type: ignore[attr-defined]
    else:
        _, handler = HANDLERS[contract.type]  # type: ignore[attr-defined]
    # Alerts whose send failed while the message was handled (``raise_alert_owing``). The trigger hands them to the
    # alert courier before it settles the message, whatever the settlement: the work that owed them is not redone.
    owed: list[OwedAlert] = []
    try:
        result = handler(ctx, contract, message, owed)
    except StoreUnavailable as exc:
        # Handling the message again finishes anything half-done. Later, not at once: an outage would use up the
        # deliveries in seconds (submission/store_outage.py).
        result = retry_later(ctx, message, contract.type, str(exc))  # type: ignore[attr-defined]
    except DocumentError as exc:
        # A document this version cannot read (a newer version's, during a rolling upgrade or after a rollback):
        # left as it is, and the message handled again later as in a store outage.
        why = f"a document of the order is not one this version reads, a newer version's? ({exc})"
        result = retry_later(ctx, message, contract.type, why, store_down=False)  # type: ignore[attr-defined]
    except ReceiveError as exc:
        # A deferred message could not be fetched (identity refused for a while, lost connection). Nothing was
        # fetched or settled, so again later, as for a store failure.
        result = retry_later(ctx, message, contract.type, str(exc), store_down=False)  # type: ignore[attr-defined]
    except SendError as exc:
        # Service Bus itself is failing (a copy could not be sent either): abandon, Service Bus retries.
        log.warning("%s %s: %s; abandoning for redelivery", contract.type, message_id_text(message), exc)  # type: ignore[attr-defined]
        result = IntakeResult(Settlement.abandon(str(exc)))
    # ``kind``: a message whose owed status Durable did not take is handled again as a copy of this type
    return replace(result, alerts=result.alerts + tuple(owed), kind=contract.type)  # type: ignore[attr-defined]


def submit_order(
    ctx: AppContext, order: OrderSubmitted, message: ReceivedMessage, owed: list[OwedAlert]
) -> IntakeResult:
    """Handles ``OrderSubmitted``: writes the order and its state record, or refuses it at the pending cap.

    Also applies the payment notifications deferred before the order came, and says ``Received`` when the
    submitter may not have heard it. ``owed`` collects the alerts whose send failed (``handle_orders_message``)."""
    now = ctx.clock.now()
    state = ctx.states.get(order.order_id)
    # Read before deciding: it says whether this very message was refused, and lists the waiting notifications.
    deferrals = ctx.deferrals.get(order.order_id)
    sent_as = original_sequence(message)
    if deferrals is not None and (refused := finish_refused(ctx, order, message, deferrals, owed)) is not None:
        return refused
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
        # Said at once: after a failure below, the record may move on (started, cancelled) before a redelivery
        # could say it.
        announced = _announce(ctx, state, now)
        if announced:  # the send failed: also owed on the record, in case the courier hand-over never happens
            state = _owe_received(ctx, state)
            if claim is not None and state.received_owed is None:  # the mark given up: the attempt says it first
                claim = replace(claim, say_received=True)
    else:
        log.info("order %s: duplicate submission, nothing written", order.order_id)
    # Payment notifications that came before this order were deferred: apply them now. Those dead-lettered under
    # an earlier refusal are named to an operator (the order is live now).
    recovered = Recovery()
    # Filled as each notification is applied, so the events are raised even if a later one fails.
    raised: list[RaiseEvent] = []
    try:
        recovered = recover_for_order(ctx, order.order_id, deferrals, owed, raised)
        settle_refusals(ctx, order.order_id, deferrals, owed, created=created)
    except (StoreUnavailable, SendError) as exc:
        if not created and rounds_used_up(message):
            # Last round: completed with the rest handed over, rather than dead-lettered for an order that exists.
            _hand_over(ctx, order.order_id, message, deferrals, owed, exc)
        elif not created:
            if not raised:
                raise
            return _again_with_events(ctx, message, tuple(raised), exc)
        else:
            # The record is written, and a fast-path claim is started anyway (else it waits out the start grace).
            # The redelivery applies the deferred notifications as for any that arrive after their order, and
            # alerts for those dead-lettered under a refusal.
            log.warning("order %s: %s; abandoning for the deferred notifications", order.order_id, exc)
            return IntakeResult(Settlement.abandon(str(exc)), claim, owed=announced)
    # A duplicate says Received again while the order has not begun or still owes it, and so does the message
    # that created the record (``submittedAs``), whatever the order did since: its first delivery may never have
    # said it. The record is read again only for a duplicate: in the creating delivery a failed read would drop
    # the Received owed above.
    if not created:
        if recovered.applied:
            try:
                state = ctx.states.get(order.order_id) or state
            except StoreUnavailable as exc:
                # Decide on the first read (an applied payment says nothing to the submitter). Raising would drop
                # the applied notifications' events (tests/deferral/test_redteam_last_round.py).
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
    """Settles a duplicate submission that failed after applying deferred notifications, raising their events.

    Settled as ``handle_orders_message`` would (again later for a store failure, abandoned for a send failure),
    but with the applied notifications' ``PaymentNotified`` events. They are on the record and their entries
    resolved, so the next handling raises none; without them a waiting payment step would time out."""
    if isinstance(exc, StoreUnavailable):
        again = retry_later(ctx, message, "OrderSubmitted", str(exc))
    else:
        log.warning("OrderSubmitted %s: %s; abandoning for redelivery", message_id_text(message), exc)
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
    """Hands over what a last-round submission could not finish, so the message can be completed.

    Called when the order and its state record exist but ``recover_for_order`` or ``settle_refusals`` failed in
    the last store-retry round. A dead letter here would page an operator for nothing, because others finish it:

    * the notifications waiting for the order: the peek sweep applies a deferred notification whose order
      exists, ``PEEK_SWEEP_AGE_MINUTES`` after it was deferred;
    * the notifications dead-lettered under an earlier refusal: named to an operator here
      (``hand_over_refusals``), since no other path names them.

    Pinned by tests/deferral/test_submission_handed_over_at_its_last_round.py."""
    named = hand_over_refusals(ctx, as_read, owed)
    app_event(
        "SubmissionHandedOver",
        f"order {order_id}: submission {message_id_text(message)} in its last store-retry round: its record exists, "
        f"but its deferred notifications could not be applied or its refusals settled ({exc}); completed, the peek "
        "sweep applies them"
        + ("; the notifications dead-lettered under a refusal of it named to an operator" if named else ""),
        logging.WARNING,
        orderId=order_id,
        messageId=message_id_text(message),
        refusedNamed=named,
    )


def _conflicting(ctx: AppContext, order: OrderSubmitted, now: datetime) -> IntakeResult:
    """Dead-letters a submission of an existing order with other data (``ConflictingOrderData``) and alerts once.

    The alert is keyed by the conflicting content (``_content_digest``), not the message: repeats of one content
    are held while they keep coming (an alert mark, ``notifications/repeats.py``), and another content alerts at
    once. The dead-letter watch still logs every message. The mark is written only for an alert sent here; one
    owed to the courier is sent again by the trigger as the message is dead-lettered, or logged
    ``AlertUndelivered`` (``submission.courier_retry``)."""
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


def finish_refused(
    ctx: AppContext, order: OrderSubmitted, message: ReceivedMessage, deferrals: DeferralDocument, owed: list[OwedAlert]
) -> IntakeResult | None:
    """How ``message`` is settled when ``deferrals`` records that it was refused (a redelivery, a store-retry copy
    finishing its refusal): never accepted; None when it records no refusal of it (``original_sequence``)."""
    now = ctx.clock.now()
    sent_as = original_sequence(message)
    if deferrals.refuses(sent_as):
        return _reject(ctx, order, message, deferrals, now, owed, finishing=True)  # never accepted after its refusal
    if not deferrals.was_refused(sent_as):
        return None
    # Refused, and another submission of the order was judged since: never accepted, nothing written. While a
    # refusal stands it is told again (the same ids collapse); once a later submission was accepted, that one
    # speaks for the order and a late Rejected would contradict it.
    if deferrals.rejected_at is not None:
        return _reject(ctx, order, message, deferrals, now, owed, finishing=True, write=False)
    # Not told again nor alerted: a Rejected or OrderRejected still owed by an earlier handling (this may be
    # its store-retry copy) is dropped with the refusal, as the status courier drops its Rejected.
    app_event(
        "RefusalSuperseded",
        f"order {order.order_id}: message {message_id_text(message)} was refused before a later submission was "
        "accepted: completed, its Rejected and OrderRejected not said again",
        orderId=order.order_id,
        messageId=message_id_text(message),
    )
    return IntakeResult(Settlement.complete())


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
    """Refuses the order at the pending cap, writing the refusal before anyone is told.

    1. The deferral document is marked rejected, naming this message (``original_sequence``), and the
       notifications waiting for the order are dead-lettered (``release_for_rejected_order``). A
       ``StoreUnavailable`` before the mark is written has promised nothing: the message is handled again later
       and judged afresh. If the state record turns up once the mark is written (another submission accepted
       meanwhile), the mark is withdrawn and the message completed, telling nobody.
    2. ``Rejected`` goes to the submitter. A failed send goes to the courier, which tells it only while the
       refusal stands.
    3. The ``OrderRejected`` alert is raised once per order and refused content; repeats are held
       (``AlertRepeatHeld``). A failed send goes to the alert courier (``deliver_alert_v1``); if Durable does not
       take that either, a store-retry copy finishes the refusal again (``submission.courier_retry``). A refusal
       superseded before then ends with its alert unsent, as its ``Rejected`` (``RefusalSuperseded``).

    Once the mark is written, a redelivery or copy of the same message finds it (``finishing``) and repeats these
    steps with the same ids, which duplicate detection collapses. Another submission is judged afresh and told
    under its own id (``refusal_variant``). ``write=False``: another submission was judged since, so the message
    is only told again; the old refusal must not be written back."""
    sent_as = original_sequence(message)
    if write and release_for_rejected_order(ctx, order.order_id, sent_as, deferrals, owed).withdrawn:
        log.info(
            "order %s: message %s refused, but another submission of the order was accepted meanwhile: completed",
            order.order_id,
            message_id_text(message),
        )
        return IntakeResult(Settlement.complete())
    why = "its refusal, written by an earlier delivery, finished" if finishing else "pending cap"
    app_event(
        "OrderRejected",
        f"order {order.order_id} rejected: {why}",
        orderId=order.order_id,
        messageId=message_id_text(message),
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
    # One alert per order and refused content (and reason), not per message; repeats are held by an alert mark
    # (``notifications/repeats.py``) while the submitter is still told each time. A failed send goes to the alert
    # courier and the message is completed anyway (abandoning could dead-letter it unalerted). Marked only when
    # sent here, as in ``_conflicting``.
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
    """The ``variant`` that tells one refusal's ``Rejected`` from another's: the refused message's original sequence.

    ``original_sequence`` is the same on a redelivery and every copy, and differs between messages. The
    ``OrderRejected`` alert uses it as its discriminator too. None (no sequence number, never from Service Bus)
    falls back to the order's one id."""
    return None if sent_as is None else str(sent_as)


def _announce(ctx: AppContext, state: StateRecord, now: datetime) -> tuple[OwedStatus, ...]:
    """Sends ``Received``, returning it as owed if the send failed.

    Sent before the fast path's attempt starts (the trigger starts it after the handler returns). Repeats collapse
    on MessageId. A failed send never abandons the accepted order: the caller hands it to the courier and marks
    it owed on the record (``_owe_received``)."""
    owed = publish_status_or_owe(
        ctx.sender, reply_to=state.reply_to, order_id=state.order_id, status="Received", attempt=0, at=now
    )
    return (owed,) if owed else ()


# Seconds to wait before retrying the ``receivedOwed`` mark (its write or the read after it) on a store failure.
MARK_RETRY_DELAYS = (1.0, 3.0)


def _owe_received(ctx: AppContext, state: StateRecord) -> StateRecord:
    """Marks ``Received`` owed on the record (``receivedOwed``) after its send failed.

    The courier only gets the status after the handler returns; if the host stops first, whoever writes the record
    next says it (``notifications.received``). Rules:

    - One conditional write, on this failure path only. A 412 is read again and retried, up to three races.
    - An ended record (``TERMINAL_STATES``) is not marked: nobody would write it again, and the courier has it.
    - Store failures (write or re-read) are retried after ``MARK_RETRY_DELAYS``, then the mark is given up
      (``_mark_given_up``; docs/design.md).
    - A write whose response was lost may have landed: if its history entry is on the re-read record, the mark
      is done, even if cleared since (the next writer said ``Received``)."""
    record = state
    races = 0
    delays = iter(MARK_RETRY_DELAYS)
    maybe_landed: list[HistoryEntry] = []  # the entries of marks whose response was lost
    while races < 3:
        if record.received_owed is not None or record.process_state in TERMINAL_STATES:
            return record
        if any(entry in record.history for entry in maybe_landed):
            return record  # a lost-response mark landed (and may have been cleared since): not marked again
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
            ctx.clock.sleep(delay)  # the write may have landed with its response lost: the read below tells
        while True:  # the re-read shares the retries left
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
    """Logs ``ReceivedMarkGivenUp``: ``Received`` is left to the courier and the first attempt.

    The first attempt says it again before its first ``Processing`` (the claim's ``say_received``, set by
    ``submit_order`` or by the starter on every attempt 1). A cancellation before any step began marks it owed
    in its own write, for the compensation round to say first."""
    app_event(
        "ReceivedMarkGivenUp",
        f"order {record.order_id}: Received owed, but {why}; the courier says it, and the first attempt's "
        "first step says it again before Processing",
        logging.WARNING,
        orderId=record.order_id,
    )


# History events that tell the submitter nothing: creation, claims, retries of a claim that never started
# (the supervisor's, or the starter's release of a start it never tried), an applied payment, the Received mark.
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
    """True while no step has begun and the submitter was told nothing after ``Received``.

    The order is ``Pending`` or ``Processing`` and its history holds only ``_SAID_NOTHING`` events. A delivery
    that finds it so says ``Received`` again: the first delivery's may never have gone out (a lost create
    response, or a host that stopped before the courier hand-over)."""
    if state.steps or state.process_state not in (ProcessState.PENDING, ProcessState.PROCESSING):
        return False
    return all(entry.event in _SAID_NOTHING for entry in state.history)


def _created_by(state: StateRecord, sent_as: int | None) -> bool:
    """True if ``state`` was created by the message sent as ``sent_as`` (a redelivery or copy of it).

    A record written before ``submittedAs`` existed, or by a message without a sequence number, says no."""
    return sent_as is not None and state.submitted_as == sent_as


def _pending_full(ctx: AppContext) -> bool:
    return ctx.counts.get(ProcessState.PENDING) >= ctx.settings.max_pending


def _created_after_all(ctx: AppContext, record: StateRecord, lost: StoreUnavailable) -> StateRecord:
    """Returns the record if a create that raised ``StoreUnavailable`` landed after all; else re-raises ``lost``.

    The record is read back. If it is this very create (history and timestamps included), the delivery goes on
    as its creator: ``Received`` is said now and the claim started, before the record can move on. Otherwise the
    message is abandoned and redelivered."""
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
    """Creates the state record, claimed for attempt 1 if the in-flight cap allows, else ``Pending``.

    Returns the record and the ``Claim`` to start, if any. The record names the creating message
    (``submittedAs``). A create that finds the record (409) returns it with no claim: whoever created it owns
    it, a concurrent delivery or this very create retried after a lost response."""
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
    # the plan reads the order as just stored (or found identical) and the record as just created
    return written, Claim(
        written.order_id, owner, written.attempt, plan_attempt(ctx.settings, written, order.order_document())
    )
