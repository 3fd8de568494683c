"""What the operator sees: the summary, a page of orders, one order. Plain code over the app's
context (blocking I/O: callers run it in a worker thread); the Durable side of an order (its attempts'
runtime status) is ``operations.instances``."""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from adapters.cosmos.mapping import DocumentError, to_document
from adapters.cosmos.state_store import SeekKey, Unmapped
from adapters.servicebus.browse import TailHint, peek_newest
from adapters.servicebus.settlement import body_bytes
from contracts.names import OPERATOR_ALERTS_QUEUE
from contracts.parsing import InvalidMessage
from dependencies import AppContext
from domain.compensation import compensation_instance_id, is_stuck_round, pivot_passed
from domain.deferral import DeferralDocument
from domain.ids import instance_id
from domain.outage import is_waiting_out_outage, undo_in_flight
from domain.records import StateRecord
from domain.review import NotedAnswer, PendingReview, choices_for, noted_answer, pending_review
from domain.states import ProcessState
from domain.timefmt import to_text
from domain.transitions import is_expired
from operations.web import list_token

log = logging.getLogger(__name__)

SUMMARY_PROCESSING_LIMIT = 500  # Processing is capped by MAX_IN_FLIGHT; this bounds the summary's scan
SUMMARY_COMPENSATING_LIMIT = 500  # the Compensating records the summary reads (stuck, waiting rounds), oldest first
SUMMARY_LIST_LIMIT = 20
SUMMARY_NEEDING_LIMIT = 10  # the newest Error and CompensationFailed orders the overview lists
NEEDS_AN_OPERATOR = (ProcessState.ERROR, ProcessState.COMPENSATION_FAILED)
# The summary's recent alerts are read from the newest this many sequence numbers of operator-alerts (one
# peek, after the search for the newest message: adapters/servicebus/browse.py). Every message there is an
# alert, so this is SUMMARY_LIST_LIMIT and room for bodies that are not one and messages removed by hand.
ALERT_PEEK_LIMIT = 100
ATTEMPTS_SHOWN = 6


def _time(value: Any) -> str | None:
    return to_text(value) if value is not None else None


def order_row(record: StateRecord) -> dict[str, Any]:
    """One line of a list: what an operator scans for."""
    review = pending_review(record)
    return {
        "orderId": record.order_id,
        "processState": record.process_state.value,
        "attempt": record.attempt,
        "failureCount": record.failure_count,
        "currentStep": record.current_step,
        "completeBy": _time(record.complete_by),
        "updatedAt": _time(record.updated_at),
        "lastError": record.last_error,
        "waitingForReview": review is not None,
        "decideBy": review.decide_by if review else None,
        # what the paused attempt takes if nobody answers by decideBy (null: not known, or no review)
        "defaultAction": review.default_action if review else None,
    }


def stuck_round_row(record: StateRecord, max_rounds: int) -> dict[str, Any]:
    """A stuck compensation round's line: ``order_row`` (``failureCount``: the rounds failed so far, ``lastError``),
    with the round (a Compensating record's ``attempt``), the failed rounds that fail the compensation
    (``MAX_FAILURES``) and the service of the undo the round was on (``domain.outage.undo_in_flight``)."""
    undo = undo_in_flight(record)
    return {
        **order_row(record),
        "round": record.attempt,
        "maxRounds": max_rounds,
        "undoService": undo.dependency if undo else None,
    }


def waiting_round_row(record: StateRecord) -> dict[str, Any]:
    """A compensation released to wait an outage out: ``order_row`` (``completeBy``: its next round's not-before time,
    ``lastError``: what it waits for), with the last round and since when it waits."""
    return {**order_row(record), "round": record.attempt, "waitingSince": _time(record.outage_wait_since)}


def unreadable_rows(unmapped: list[Unmapped]) -> list[dict[str, Any]]:
    """State documents a query returned that do not map to a record: which, and what is wrong."""
    return [{"orderId": u.doc_id, "error": u.error} for u in unmapped]


def summary(ctx: AppContext, alert_tail: TailHint | None = None) -> dict[str, Any]:
    """The overview the console polls. ``alert_tail``: where the newest alert was last found (kept by the
    caller between requests: it saves the search most of its peeks)."""
    counts = {state.value: ctx.states.count(state) for state in ProcessState}
    scanned = ctx.ops.oldest_deadlines(ProcessState.PROCESSING, SUMMARY_PROCESSING_LIMIT)  # oldest completeBy first
    processing = scanned.records
    now = ctx.clock.now()
    grace = ctx.settings.supervisor_grace
    reviews = [order_row(r) for r in processing if pending_review(r) is not None]
    # past due as the supervisor's scan finds them (a held attempt only its grace past its completeBy, ``is_expired``);
    # it may still leave some of them to an instance the Durable backend has not run yet (supervisor/backend_wait.py)
    expired = [order_row(r) for r in processing if is_expired(r, now, grace)]
    # compensation rounds stuck as the supervisor's scan finds them (``is_stuck_round``: still held past the round's
    # deadline and the grace); a round released to wait a backoff or an outage out holds nothing and is not listed
    rounds = ctx.ops.oldest_deadlines(ProcessState.COMPENSATING, SUMMARY_COMPENSATING_LIMIT)
    stuck = [stuck_round_row(r, ctx.settings.max_failures) for r in rounds.records if is_stuck_round(r, now, grace)]
    # released to wait an outage out: no round holds them, the supervisor claims the next at completeBy
    waiting = [waiting_round_row(r) for r in rounds.records if is_waiting_out_outage(r)]
    oldest = processing[0] if processing else None
    # the newest orders an operator must act on, and every document read here that does not map
    needing = {state: ctx.ops.page(state, SUMMARY_NEEDING_LIMIT, None) for state in NEEDS_AN_OPERATOR}
    unmapped = [*scanned.unmapped, *rounds.unmapped, *(u for page in needing.values() for u in page.unmapped)]
    return {
        "now": to_text(now),
        "counts": counts,
        "oldestProcessing": None
        if oldest is None
        else {"orderId": oldest.order_id, "completeBy": _time(oldest.complete_by)},
        "waitingForReview": reviews[:SUMMARY_LIST_LIMIT],
        "waitingForReviewCount": len(reviews),
        # more Processing records than the summary reads (MAX_IN_FLIGHT over SUMMARY_PROCESSING_LIMIT): the
        # review and expired counts cover the oldest completeBy only (the ops/orders list pages all of them)
        "processingCapped": len(processing) + len(scanned.unmapped) >= SUMMARY_PROCESSING_LIMIT,
        "expired": expired[:SUMMARY_LIST_LIMIT],
        "expiredCount": len(expired),
        # the oldest stuck rounds first; capped as Processing is (the count then covers the oldest deadlines only)
        "stuckCompensations": stuck[:SUMMARY_LIST_LIMIT],
        "stuckCompensationsCount": len(stuck),
        "compensatingCapped": len(rounds.records) + len(rounds.unmapped) >= SUMMARY_COMPENSATING_LIMIT,
        "compensationsWaitingOutage": waiting[:SUMMARY_LIST_LIMIT],
        "compensationsWaitingOutageCount": len(waiting),
        "needOperator": {state.value: [order_row(r) for r in page.records] for state, page in needing.items()},
        **_recent_alerts_or_why_not(ctx, alert_tail),
        # documents the summary read (Processing, and the lists above) that do not map: left out of them
        "unreadable": unreadable_rows(unmapped[:SUMMARY_LIST_LIMIT]),
        "unreadableCount": len(unmapped),
    }


def _recent_alerts_or_why_not(ctx: AppContext, tail: TailHint | None) -> dict[str, Any]:
    """``recentAlerts``; when ``operator-alerts`` cannot be read (Service Bus unavailable, throttled, a
    role missing), an empty list and ``recentAlertsError`` saying why: the rest of the summary, read from
    Cosmos DB, is still worth showing."""
    try:
        return {"recentAlerts": recent_alerts(ctx, SUMMARY_LIST_LIMIT, tail)}
    except Exception as exc:  # any failure of the queue's client: the summary goes on without it
        log.warning("ops summary: %s not read: %s: %s", OPERATOR_ALERTS_QUEUE, type(exc).__name__, exc)
        return {
            "recentAlerts": [],
            "recentAlertsError": f"{OPERATOR_ALERTS_QUEUE} could not be read ({type(exc).__name__})",
        }


def recent_alerts(ctx: AppContext, limit: int, tail: TailHint | None = None) -> list[dict[str, Any]]:
    """The newest ``limit`` alerts on ``operator-alerts``, newest first, among its newest
    ``ALERT_PEEK_LIMIT`` messages (peeked: a consumer of the queue is not disturbed). Nothing receives
    from the queue and an alert stays 14 days, so it is read from its newest end, however many it holds. A
    message that is no JSON object (not JSON, nested past the parser's recursion limit, an AMQP value or
    sequence section) is skipped: it hides no alert."""
    with ctx.deferred.open(OPERATOR_ALERTS_QUEUE) as receiver:
        messages = peek_newest(receiver, ALERT_PEEK_LIMIT, tail)
    alerts: list[dict[str, Any]] = []
    for message in reversed(messages):
        try:
            alert = json.loads(body_bytes(message))
        except (ValueError, RecursionError, InvalidMessage):  # no JSON text: not one (another AMQP client's, deep)
            continue
        if isinstance(alert, dict):
            alerts.append(
                {k: alert.get(k) for k in ("alertId", "kind", "severity", "orderId", "summary", "at") if k in alert}
            )
        if len(alerts) >= limit:
            break
    return alerts


def order_page(ctx: AppContext, state: ProcessState | None, page_size: int, after: SeekKey | None) -> dict[str, Any]:
    """A page of the list of ``state`` (None: every order), newest first; ``after``: where the page before
    ended (``operations.web.store_token``); the next page's is handed out naming its list (``list_token``)."""
    page = ctx.ops.page(state, page_size, after)
    return {
        "orders": [order_row(r) for r in page.records],
        "continuation": list_token(state, page.after),
        "unreadable": unreadable_rows(page.unmapped),
    }


def instance_ids(record: StateRecord) -> list[tuple[str, str]]:
    """The orchestration instances of the newest attempts and compensation rounds, newest first, as
    (kind, instance id). Forward attempts and compensation rounds share the ``attempt`` counter; the
    record's history says which one each number was (a claim names its instance)."""
    rounds = {
        entry.detail
        for entry in record.history
        if entry.event == "CompensationClaimed" and entry.detail.startswith(f"{record.order_id}:compensate:")
    }
    found: list[tuple[str, str]] = []
    for number in range(record.attempt, max(0, record.attempt - ATTEMPTS_SHOWN), -1):
        compensation = compensation_instance_id(record.order_id, number)
        if compensation in rounds or compensation == record.locked_by:
            found.append(("compensation", compensation))
        else:
            found.append(("attempt", instance_id(record.order_id, number)))
    return found


# The moves that claim an attempt or a compensation round for an instance, naming it.
CLAIMS = frozenset({"Claimed", "CompensationClaimed"})


def claimed_by(record: StateRecord, instance: str) -> datetime | None:
    """When ``instance`` was claimed on ``record`` (its instance is created then), or at the latest: the oldest move
    the record still keeps, when its claim was trimmed from the history; None for a record with no history."""
    claims = [entry.at for entry in record.history if entry.event in CLAIMS and entry.detail == instance]
    if claims:
        return claims[-1]
    return record.history[0].at if record.history else None


def never_ran(record: StateRecord, instance: str) -> bool:
    """Whether ``record`` shows that ``instance`` never ran: its last claim is kept and no move of the instance's own
    follows it (its start failed, or its order could not be read: claimed and not started, ``orchestrators.starter``).
    Every attempt and round writes its record as it goes (``begin_step``, ``begin_undo``, a release, its end), under
    its own name; a claim trimmed from the history tells nothing."""
    claims = [i for i, entry in enumerate(record.history) if entry.event in CLAIMS and entry.detail == instance]
    return bool(claims) and all(entry.by != instance for entry in record.history[claims[-1] + 1 :])


def _instance_view(record: StateRecord, kind: str, instance: str) -> dict[str, Any]:
    claimed = claimed_by(record, instance)
    return {
        "kind": kind,
        "instanceId": instance,
        "claimedBy": None if claimed is None else to_text(claimed),
        "neverRan": never_ran(record, instance),
    }


def _review_view(review: PendingReview | None, noted: NotedAnswer | None, prepaid: bool) -> dict[str, Any] | None:
    """The review an operator can answer: the one the order waits for, or the one whose answer is noted
    as the record's last word (``noted``: who answered what; the same answer can be posted again).
    ``choices``: the answers it takes (``domain.review.choices_for``: no ``alternative`` where no fallback
    can take the step over, e.g. a ``prepaid`` order's payment). ``defaultAction``: what the attempt takes
    if no answer is noted by ``decideBy`` (null: not known, a record written before it was kept)."""
    asked = review if review is not None else noted.review if noted is not None else None
    if asked is None:
        return None
    return {
        "reviewId": asked.review_id,
        "step": asked.step,
        "decideBy": asked.decide_by,
        "defaultAction": asked.default_action,
        "choices": list(choices_for(asked.step, prepaid)),
        "noted": None if noted is None else {"operator": noted.operator, "action": noted.action},
    }


def _prepaid_or_unknown(order: dict[str, Any] | None) -> bool:
    """Whether the review of the order's record offers what a prepaid order's does (no ``alternative``): its
    ``prepaid``, or, with no order read beside the record, yes. The order is written before its record, so that
    is a replica without the order's create yet (Session consistency, another instance's write): the answers
    every order takes, not one the order may not."""
    return bool(order.get("prepaid")) if order is not None else True


def _refusal_view(deferral: DeferralDocument) -> dict[str, Any] | None:
    """What admission control refused of the order (its deferral document): ``rejectedAt`` while the last
    refusal stands (cleared when a submission is accepted), which ``OrderSubmitted`` messages were
    refused, and the payment notifications dead-lettered ``OrderRejected`` meanwhile that the document still
    lists: not yet named in a ``NotificationsForAcceptedOrder`` alert, or named by one a submission handed over
    after its last store-retry round raised without a write (``deferral.recovery.hand_over_refusals``: they stay
    listed so a later submission names them again). None when the order was never refused."""
    if (
        deferral.rejected_sequence_number is None
        and deferral.rejected_at is None
        and not deferral.refused_notifications
    ):
        return None
    return {
        "rejectedAt": _time(deferral.rejected_at),
        "rejectedSequenceNumber": deferral.rejected_sequence_number,
        "refusedBefore": list(deferral.refused_before),
        "refusedNotifications": [to_document(n) for n in deferral.refused_notifications],
        "refusedNotificationsUnlisted": deferral.refused_notifications_unlisted,
    }


def order_detail(ctx: AppContext, order_id: str) -> dict[str, Any] | None:
    """The order, its state record (history, steps, compensation log with each undo's outcome),
    review, deferred payment notifications and admission control's refusal (``refusal``); None when
    nothing of it exists. An order refused by admission control has only its deferral document, as has
    one whose payment notification arrived first: their page shows it. A state document that does not
    map is shown as ``stateError`` (what is wrong with it), the rest as usual."""
    order = ctx.orders.get(order_id)
    state_error: str | None = None
    try:
        record = ctx.states.get(order_id)
    except DocumentError as exc:
        record, state_error = None, str(exc)
    deferral_error: str | None = None
    try:
        deferral = ctx.deferrals.get(order_id)
    except DocumentError as exc:  # its deferred notifications' document (same container) does not map
        deferral, deferral_error = None, str(exc)
    if order is None and record is None and state_error is None and deferral is None and deferral_error is None:
        return None
    review = pending_review(record) if record is not None else None
    # a noted answer whose delivery was uncertain: the same answer may be posted again (the console offers it)
    noted = noted_answer(record) if record is not None and review is None else None
    return {
        "orderId": order_id,
        "now": to_text(ctx.clock.now()),  # the app's clock: the page's deadlines are read against it
        "order": order,
        "state": None if record is None else {**to_document(record), "waitingForReview": review is not None},
        "stateError": state_error,
        "review": _review_view(review, noted, _prepaid_or_unknown(order)),
        # the shipment is under way or done: cancel and compensate are refused (nothing may be undone)
        "pastPivot": None if record is None else pivot_passed(record),
        "transitions": [] if record is None else [to_document(h) for h in record.history],
        "steps": {} if record is None else {k: to_document(v) for k, v in record.steps.items()},
        "compensation": [] if record is None else [to_document(e) for e in record.compensation],
        "payment": None if record is None or record.payment is None else to_document(record.payment),
        "deferredNotifications": [] if deferral is None else [to_document(e) for e in deferral.entries],
        "refusal": None if deferral is None else _refusal_view(deferral),
        "deferralError": deferral_error,
        "instances": [] if record is None else [_instance_view(record, k, i) for k, i in instance_ids(record)],
    }
