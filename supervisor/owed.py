"""The operator alert and submitter status a failure write owes, delivered until acknowledged.

A write that moves a record to ``Error`` or ``CompensationFailed`` leaves no later scan looking at it, so its
notifications must not be lost with a failed send or a lost response:

- ``write_or_reread`` (``adapters.cosmos.state_store.update_once_or_reread``): on ``StoreUnavailable`` the record
  is read again; if the write's history entry is there, the write happened and the run goes on with it.
- ``owe_notifications``: the failure write also sets ``completeBy`` to its own time, so the alert and status are
  owed from then on. ``deliver_owed`` sends them (with deterministic ids, so repeats collapse), after any
  ``Received`` still owed (``receivedOwed``: notifications/received.py), then acknowledges with one conditional
  write that clears ``completeBy`` and ``receivedOwed``.
- ``deliver_due``: each supervisor run sweeps the failure records still owing and delivers again, only in the
  first duplicate window of each hour since ``completeBy`` (``resend_due``). Sent-but-unacknowledged
  notifications repeat once an hour, not whenever duplicate detection forgets them.

Side notes on the record stop a repeat from saying something twice past duplicate detection:

- ``OwedAlertSent``: the alert went out but the status is still owed (a reply queue that refuses it stays owed
  within ``orchestrators.status.REFUSED_RETRY_WINDOW``, then is acknowledged as if sent: the queue's own alert
  stands for it). Later sweeps send the status alone.
- ``OwedStatusSent`` (``note_status_sent``): the orchestration's own status retry (``orchestrators.status``)
  got through. Later sweeps send the alert alone, if owed, and acknowledge
  (tests/notifications/test_redteam42_failed_heard_twice.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from adapters.cosmos.errors import EtagMismatch, StoreUnavailable
from adapters.cosmos.state_store import expired_key, update_once, update_once_or_reread
from adapters.servicebus.sender import SendError
from contracts.messages import StatusName, StatusUpdate
from dependencies import AppContext
from domain.compensation import FAILED_NEXT_STEP, OUTCOME_UNKNOWN_WARNING, not_undone, undo_outcome_unknown
from domain.errors import IllegalTransition
from domain.ids import alert_id
from domain.payment_wait import PAYMENT_NOT_RECEIVED
from domain.records import OWED_ALERT_SENT, OWED_STATUS_SENT, HistoryEntry, StateRecord
from domain.states import ProcessState
from domain.text import carriable
from domain.timefmt import to_text
from domain.transitions import SUPERVISOR
from notifications.alerts import (
    DUPLICATE_WINDOW,
    Severity,
    build_alert,
    hourly_slice,
    raise_alert,
    raise_alert_after_write,
)
from notifications.received import owe_before_failure
from notifications.repeats import already_paged, note_over, note_paged, raise_once_per_problem
from notifications.status import Delivery, publish_status
from observability.events import app_event
from orchestrators.status import refusal_retried
from supervisor.budget import RunBudget
from supervisor.scan import ScanCursor
from supervisor.unmapped import alert_unmapped

log = logging.getLogger("supervisor")


def write_or_reread(ctx: AppContext, record: StateRecord, change: Callable[[StateRecord], StateRecord]) -> StateRecord:
    """One conditional write of ``change``; after a lost response, the re-read record if the write landed."""
    return update_once_or_reread(ctx.states, record, change)


FAILURE_STATES = (ProcessState.ERROR, ProcessState.COMPENSATION_FAILED)
OUTAGE_WAIT_EXCEEDED = "MAX_OUTAGE_WAIT_MINUTES"  # in the lastError of an order escalated by the bound
DELIVERED = "NotificationsDelivered"
# Owed this long and still failing (a sweep every SUPERVISOR_SCHEDULE): an alert says so, once an hour.
STUCK_ALERT_AFTER = timedelta(minutes=15)
# The event of the write that made the failure true -> (alert kind, severity, status to the submitter)
OWED_BY_EVENT: dict[str, tuple[str, Severity, StatusName]] = {
    "Escalated": ("RetriesExhausted", "error", "Failed"),  # supervisor: retries used up
    "Failed": ("OrderFailed", "error", "Failed"),  # scheduler: a non-transient failure
    "CompensationFailed": ("CompensationFailed", "critical", "CompensationFailed"),
}


def owe_notifications(record: StateRecord) -> StateRecord:
    """Returns ``record`` as the write should store it: a failure owes its notifications from now (``completeBy``)."""
    if record.process_state in FAILURE_STATES:
        # an order never begun may never have heard Received: said first (notifications.received)
        return owe_before_failure(replace(record, complete_by=record.updated_at), record.updated_at)
    return record


def owes_notifications(record: StateRecord) -> bool:
    return record.process_state in FAILURE_STATES and record.complete_by is not None


def _owed_by(record: StateRecord) -> tuple[HistoryEntry, tuple[str, Severity, StatusName]] | None:
    for entry in reversed(record.history):
        if entry.event in OWED_BY_EVENT:
            return entry, OWED_BY_EVENT[entry.event]
    return None


def _summary(record: StateRecord, kind: str) -> str:
    if kind == "RetriesExhausted" and OUTAGE_WAIT_EXCEEDED in (record.last_error or ""):
        # per order on purpose: this order waited out an outage longer than the bound allows
        return f"order {record.order_id} waited for a dependency beyond MAX_OUTAGE_WAIT_MINUTES and needs an operator"
    if kind == "RetriesExhausted" and (record.last_error or "").startswith(PAYMENT_NOT_RECEIVED):
        # the wait for a prepaid order's payment notification is over: what the operator checks, and does
        return (
            f"order {record.order_id}: {record.last_error}; if so, resubmit the order once its notification "
            "is applied, else compensate it"
        )
    if kind == "RetriesExhausted":
        return f"order {record.order_id} failed {record.failure_count} attempts and needs an operator"
    if kind == "CompensationFailed":
        return f"order {record.order_id}: compensation failed; {record.last_error or 'undo failed'}"
    return f"order {record.order_id} failed: {record.last_error or 'non-transient failure'}"


def send_owed(ctx: AppContext, record: StateRecord, done: set[str] | None = None) -> bool:
    """Sends the alert, then any owed ``Received``, then the failure status; True when nothing is left owed.

    Order matters: the alert goes first, so a submitter's queue that fails never holds it back; a refused
    ``Received`` holds the failure status back, so the submitter never hears the failure first.

    True also when the status has nowhere to go: no reply queue, or a queue still refusing it after
    ``REFUSED_RETRY_WINDOW`` (``publish_status`` alerts the refusal itself). A refusal within the window returns
    False. A failed send raises; an alert that went out before it is noted sent (``_note_alert_sent``).

    ``done`` collects ``"alert"`` once the alert is out (``"alert sent"`` if this call sent it), so a later
    failure is the submitter's queue, and ``"status"`` once a status reached that queue. An alert already out but
    not acknowledged is found by its mark (``_sent_key``), so hourly resends do not page again."""
    owed = _owed_by(record)
    if owed is None:
        return True
    entry, (kind, severity, status) = owed
    now = ctx.clock.now()
    deliveries: list[Delivery] = []
    alerted = _noted(record, entry, OWED_ALERT_SENT)
    # already sent by the orchestration's timers: not sent again
    told = _noted(record, entry, OWED_STATUS_SENT)
    alert_went_out = False
    # a later hour's resend: the alert may have gone out in an earlier hour whose acknowledgement failed (marked)
    resend = record.complete_by is not None and bool(hourly_slice(record.complete_by, now))
    # Not raise_once_per_problem: this alert must raise, and its mark is written only when the record cannot be
    # acknowledged (``_mark_alert_sent``), not when it goes out.
    if resend and not alerted:
        alerted = already_paged(ctx.alert_marks, _sent_key(record, kind), now, kind=kind, order_id=record.order_id)
    try:
        if not alerted:
            raise_alert(
                ctx.sender,
                kind=kind,
                summary=_summary(record, kind),
                at=now,
                order_id=record.order_id,
                severity=severity,
                discriminator=record.attempt,
                details=_details(record, entry),
            )
            alert_went_out = True
            if done is not None:
                done.add("alert sent")
        if done is not None:
            done.add("alert")
        if record.received_owed is not None and not told:  # never heard (notifications.received): said first
            deliveries.append(
                publish_status(
                    ctx.sender, reply_to=record.reply_to, order_id=record.order_id, status="Received", attempt=0, at=now
                )
            )
        # a refused Received holds the failure status back: the queue must not hear the failure first
        say_status = Delivery.REFUSED not in deliveries and not told
        if say_status:
            deliveries.append(
                publish_status(
                    ctx.sender,
                    reply_to=record.reply_to,
                    order_id=record.order_id,
                    status=status,
                    attempt=record.attempt,
                    at=now,
                    reason=record.last_error,
                )
            )
    except Exception:
        # Still owed; ``deliver_owed`` logs and alerts it. An alert already out is noted, or every hour resends it.
        if alert_went_out:
            _note_alert_sent(ctx, record, kind)
        raise
    if done is not None and Delivery.SENT in deliveries:
        done.add("status")
    owed_since = record.complete_by
    if Delivery.REFUSED in deliveries and owed_since is not None and refusal_retried(owed_since, now):
        log.info("order %s: its reply queue refuses the %s status: still owed", record.order_id, status)
        if not alerted:
            _note_alert_sent(ctx, record, kind)
        return False
    return True


def _sent_key(record: StateRecord, kind: str) -> str:
    """The problem key (``notifications/repeats.py``) of ``record``'s owed alert having gone out."""
    return f"owed-alert-sent:{alert_id(kind, record.order_id, record.attempt)}"


def _mark_alert_sent(ctx: AppContext, record: StateRecord) -> None:
    """Marks the owed alert sent in the alert marks, for a record that could not be written (see ``send_owed``)."""
    owed = _owed_by(record)
    if owed is not None:
        kind = owed[1][0]
        sent = alert_id(kind, record.order_id, record.attempt)
        note_paged(ctx.alert_marks, _sent_key(record, kind), sent, ctx.clock.now())


def _noted(record: StateRecord, entry: HistoryEntry, note: str) -> bool:
    """Whether the record notes (``note``: ``OwedAlertSent``, ``OwedStatusSent``) the owed alert or status sent
    since the failure ``entry``."""
    since = len(record.history) - record.history[::-1].index(entry)
    return any(later.event == note for later in record.history[since:])


NOTE_RACE_RETRIES = 3


def note_status_sent(ctx: AppContext, record: StateRecord, status: StatusName, attempt: int) -> None:
    """Notes ``OwedStatusSent`` on ``record`` after the orchestration's ``publish_status`` sent the owed status.

    The sweep then sends the alert alone, if owed, and acknowledges. Nothing is written if the record no longer
    owes this status of ``attempt``. A 412 is read again and retried (``say_before_status`` may have cleared the
    ``Received`` mark since the read). Any other failure is only logged: the status is out, and the sweep may
    send it once more."""
    current: StateRecord | None = record
    for _ in range(NOTE_RACE_RETRIES):
        if current is None or current.version is None or not _owes_status(current, status, attempt):
            return
        try:
            _write_note(ctx, current, OWED_STATUS_SENT, f"{status} sent on the orchestration's timers")
            return
        except EtagMismatch:
            try:
                current = ctx.states.get(record.order_id)
            except StoreUnavailable as exc:
                log.info("order %s: %s sent, not noted: %s", record.order_id, status, exc)
                return
        except (StoreUnavailable, IllegalTransition) as exc:
            log.info("order %s: %s sent, not noted: %s", record.order_id, status, exc)
            return


def _owes_status(record: StateRecord, status: StatusName, attempt: int) -> bool:
    """Whether ``record`` still owes ``status`` of ``attempt``, not yet noted sent."""
    owed = _owed_by(record) if owes_notifications(record) and record.attempt == attempt else None
    return owed is not None and owed[1][2] == status and not _noted(record, owed[0], OWED_STATUS_SENT)


def _note_alert_sent(ctx: AppContext, record: StateRecord, kind: str) -> None:
    """Notes ``OwedAlertSent`` on the record: the alert went out while the status stays owed.

    If the write fails, the alert mark (``_mark_alert_sent``) stands in for it. A record read back without its
    etag (``update_once_or_reread``) cannot take a conditional replace and is only logged, so the error being
    handled reaches ``deliver_owed`` unchanged."""
    if record.version is None:
        log.info("order %s: owed alert sent, not noted: the record was read back without its etag", record.order_id)
        return
    try:
        _write_note(ctx, record, OWED_ALERT_SENT, f"{kind} alert sent; the status still owed")
    except (EtagMismatch, StoreUnavailable) as exc:
        log.info("order %s: owed alert sent, not noted: %s", record.order_id, exc)
        _mark_alert_sent(ctx, record)


def _write_note(ctx: AppContext, record: StateRecord, note: str, detail: str) -> None:
    """Writes one side note (``OwedAlertSent`` or ``OwedStatusSent``) by conditional replace; errors propagate."""
    update_once(ctx.states, record, lambda r: r.with_changes(ctx.clock.now(), note, SUPERVISOR, detail))


def build_owed(ctx: AppContext, record: StateRecord) -> None:
    """Builds what ``send_owed`` would send without sending, raising if the record holds what no message can carry."""
    owed = _owed_by(record)
    if owed is None:
        return
    entry, (kind, severity, status) = owed
    now = ctx.clock.now()
    build_alert(kind, _summary(record, kind), now, record.order_id, severity, record.attempt, _details(record, entry))
    reason = None if record.last_error is None else carriable(record.last_error)
    StatusUpdate(order_id=record.order_id, status=status, attempt=record.attempt, at=now, reason=reason).to_json()


def resend_due(record: StateRecord, now: datetime) -> bool:
    """True in the first duplicate window of each hour since ``record`` became owed (``hourly_slice``).

    Sends within one window collapse in duplicate detection; between windows nothing is sent. So notifications
    that went out but could not be acknowledged repeat once an hour, not every 10 minutes."""
    return record.complete_by is not None and hourly_slice(record.complete_by, now) is not None


def _details(record: StateRecord, entry: HistoryEntry) -> dict[str, Any]:
    details: dict[str, Any] = {
        "attempt": record.attempt,
        "failureCount": record.failure_count,
        "lastError": record.last_error,
        "event": entry.event,
        "by": entry.by,
        "at": to_text(entry.at),
    }
    if record.process_state is ProcessState.COMPENSATION_FAILED:
        details["notUndone"] = not_undone(record)  # every entry still held, not only the one that failed
        # The undo's reply never came or its tries failed transiently: it may have been done, and an operator who
        # undoes it by hand would refund twice.
        unknown = undo_outcome_unknown(record, entry)
        details["undoOutcomeUnknown"] = unknown
        details["nextStep"] = f"{OUTCOME_UNKNOWN_WARNING}; else {FAILED_NEXT_STEP}" if unknown else FAILED_NEXT_STEP
    return details


def acknowledge(ctx: AppContext, record: StateRecord) -> StateRecord | None:
    """Clears ``completeBy`` once the notifications are out; None if it could not.

    A failure is harmless: a later sweep delivers again. A write whose response was lost is read back
    (``write_or_reread``)."""
    if record.version is None or not owes_notifications(record):
        return None
    now = ctx.clock.now()
    try:
        return write_or_reread(
            ctx,
            record,
            lambda r: r.with_changes(
                now, DELIVERED, SUPERVISOR, "operator alert and status sent", complete_by=None, received_owed=None
            ),
        )
    except (EtagMismatch, StoreUnavailable, IllegalTransition) as exc:
        log.info("order %s: owed notifications sent, acknowledgement deferred: %s", record.order_id, exc)
        return None


def deliver_owed(ctx: AppContext, record: StateRecord) -> bool:
    """Sends what ``record`` owes and acknowledges it; True when the notifications went out. Never raises.

    Any failure is logged with the order id and leaves the notifications owed for the next sweep:

    - a build or send failure is ``OwedNotificationsFailed`` (``NotificationsStuck`` after ``STUCK_ALERT_AFTER``);
    - an acknowledgement failure after the send is ``OwedNotificationsUnacknowledged``: delivered, not undelivered.

    Every sweep builds first, so a record that cannot be built is alerted between resend windows too; sends
    happen only while ``resend_due``."""
    if not owes_notifications(record):
        return False
    try:
        build_owed(ctx, record)  # what cannot be built is alerted on the hours of every sweep's build
    except Exception as exc:  # isolation: one record's notifications never stop the caller's run
        _not_delivered(ctx, record, exc)
        return False
    if not resend_due(record, ctx.clock.now()):
        return False
    done: set[str] = set()
    try:
        sent = send_owed(ctx, record, done)
    except Exception as exc:  # a queue full, Service Bus down, or anything else only sending meets
        # after the alert: the submitter's queue failed (one stuck alert per queue, not per order)
        _not_delivered(ctx, record, exc, failed_send=True, status_queue="alert" in done)
        return False
    if "status" in done and record.reply_to:  # the queue took a status: its stuck problem is over
        for error in _STUCK_QUEUE_ERRORS:
            note_over(ctx.alert_marks, _stuck_key(record.reply_to, error), ctx.clock.now())
    if sent:
        try:
            acknowledged = acknowledge(ctx, record)
        except Exception as exc:  # sent: only the record still says owed
            _not_acknowledged(record, exc)
            acknowledged = None
        # Mark the alert paged so next hour's resend skips it. Only an alert sent now: a resend held behind the mark
        # (``already_paged``) must leave the paged time as it was, or its daily reminder never comes.
        if acknowledged is None and owes_notifications(record) and "alert sent" in done:
            _mark_alert_sent(ctx, record)
    return sent


def _not_acknowledged(record: StateRecord, exc: Exception) -> None:
    error = carriable(f"{type(exc).__name__}: {exc}")[:500]
    app_event(
        "OwedNotificationsUnacknowledged",
        f"order {record.order_id}: owed alert and status sent, but the record could not be marked "
        f"delivered: {error}; sent again in the first {DUPLICATE_WINDOW // timedelta(minutes=1)} minutes of each "
        "hour until it is",
        logging.ERROR,
        orderId=record.order_id,
        error=type(exc).__name__,
    )


def _not_delivered(
    ctx: AppContext, record: StateRecord, exc: Exception, *, failed_send: bool = False, status_queue: bool = False
) -> None:
    """Logs ``OwedNotificationsFailed``; once owed ``STUCK_ALERT_AFTER``, also alerts ``NotificationsStuck``.

    The alert carries nothing from the record and goes out at most once an hour per order: only in the first
    duplicate window of an hour, under that hour's id. The hours are counted so that the window meets the failure:

    - a build failure happens every sweep, so its hours count from ``completeBy + STUCK_ALERT_AFTER``;
    - a send is tried only in ``resend_due`` windows (hours from ``completeBy``), so its hours count from
      ``completeBy`` once ``STUCK_ALERT_AFTER`` has passed.

    ``status_queue``: the send failed after the alert went out, so the submitter's reply queue is the problem.
    That is one alert per queue and error for all its orders (``_alert_stuck_queue``), not one per order."""
    error = carriable(f"{type(exc).__name__}: {exc}")[:500]
    app_event(
        "OwedNotificationsFailed",
        f"order {record.order_id}: owed alert and status not delivered, still owed: {error}",
        logging.ERROR,
        orderId=record.order_id,
        error=type(exc).__name__,
        replyTo=record.reply_to,
    )
    owed_since = record.complete_by
    if owed_since is None:
        return
    now = ctx.clock.now()
    if failed_send:
        hour = hourly_slice(owed_since, now) if now - owed_since >= STUCK_ALERT_AFTER else None
    else:
        hour = hourly_slice(owed_since + STUCK_ALERT_AFTER, now)
    if hour is None:  # not owed long enough yet, or past this hour's slice: already alerted this hour
        return
    if status_queue and record.reply_to:
        _alert_stuck_queue(ctx, record, record.reply_to, exc, owed_since)
        return
    raise_alert_after_write(
        ctx.sender,
        kind="NotificationsStuck",
        summary=f"order {record.order_id}: its {record.process_state.value} alert and statuses could not all be "
        f"delivered since {to_text(owed_since)} ({type(exc).__name__}); see OwedNotificationsFailed",
        at=ctx.clock.now(),
        order_id=record.order_id,
        severity="critical",
        # isoformat, not to_text: part of the alert id, which must not change across an upgrade
        discriminator=f"{owed_since.isoformat()}:{hour}",
        details={"error": type(exc).__name__, "owedSince": to_text(owed_since)},
    )


# The ``SendError`` types a status send to a reply queue can raise: each its own problem (``_stuck_key``), all
# over once the queue takes a status.
_STUCK_QUEUE_ERRORS: tuple[str, ...] = tuple(
    sorted({SendError.__name__, *(e.__name__ for e in SendError.__subclasses__())})
)


def _stuck_key(queue: str, error: str) -> str:
    """The problem key (``notifications/repeats.py``) of ``queue``'s statuses failing with ``error``."""
    return f"NotificationsStuck:{queue}:{error}"


def _alert_stuck_queue(ctx: AppContext, record: StateRecord, queue: str, exc: Exception, owed_since: datetime) -> None:
    """Raises ``NotificationsStuck`` for reply queue ``queue`` once per queue and error, not per order.

    Repeats follow ``notifications/repeats.py``. Each order is still logged ``OwedNotificationsFailed`` with its
    ``replyTo``. The id carries the hour, so two instances that both find no mark raise one alert."""
    now = ctx.clock.now()
    error = type(exc).__name__
    raise_once_per_problem(
        ctx.alert_marks,
        ctx.sender,
        _stuck_key(queue, error),
        held_order_id=record.order_id,
        kind="NotificationsStuck",
        summary=f"status updates to {queue!r} cannot be delivered ({error}): failed orders of that queue owe "
        f"their statuses, the first seen {record.order_id}, owed since {to_text(owed_since)}; see "
        "OwedNotificationsFailed (orderId, replyTo)",
        at=now,
        severity="critical",
        discriminator=f"{queue}:{error}:{now:%Y-%m-%dT%H}",
        details={"error": error, "replyTo": queue, "firstOrderId": record.order_id},
    )


def deliver_due(
    ctx: AppContext, cursors: dict[ProcessState, ScanCursor] | None = None, budget: RunBudget | None = None
) -> int:
    """Delivers the failure records still owing, one bounded page per state, oldest first; returns how many went out.

    ``cursors`` (the run's ``ScanState.owed``) resumes where the last run's page ended and wraps at the end.
    Without it, records that stay owed would fill every run's first page and hide the rest. Each owed record is
    then seen about once every ``owed / SUPERVISOR_MAX_RECORDS`` runs, which must fit in a 10-minute resend
    window (20 runs at the default 30 s).

    Once ``budget`` is spent no more pages are read nor records delivered; the cursor is left after the last
    record delivered, so the next run goes on from there."""
    now = ctx.clock.now()
    delivered = 0
    looked = 0
    for state in FAILURE_STATES:
        if budget is not None and budget.spent():
            budget.stopped("owed notifications", looked=looked, delivered=delivered, unread=state.value)
            break
        cursor = cursors.get(state) if cursors is not None else None
        upper, after = (cursor.now, cursor.after) if cursor is not None else (now, None)
        try:
            page = ctx.states.expired_page(state, upper, None, ctx.settings.supervisor_max_records, after)
        except StoreUnavailable as exc:
            log.warning("owed notifications of %s records not swept: %s", state.value, exc)
            continue
        except Exception:  # a cursor whose query fails must not wedge every later run
            if cursors is not None:
                cursors.pop(state, None)
            raise
        if cursors is not None:
            if page.after is None:
                cursors.pop(state, None)
            else:
                cursors[state] = ScanCursor(upper, None, page.after, catch_up=False)
        alert_unmapped(ctx, page.unmapped, f"owed notifications of {state.value}")  # never raises
        for done, record in enumerate(page.records):
            if budget is not None and budget.spent():
                budget.stopped("owed notifications", looked=looked, delivered=delivered, left=len(page.records) - done)
                if cursors is not None:  # the next run goes on with this record
                    _go_on_after(cursors, state, page.records[done - 1] if done else None, cursor, upper)
                return delivered
            delivered += deliver_owed(ctx, record)  # it isolates each record: it never raises
            looked += 1
    return delivered


def _go_on_after(
    cursors: dict[ProcessState, ScanCursor],
    state: ProcessState,
    last_done: StateRecord | None,
    cursor: ScanCursor | None,
    upper: datetime,
) -> None:
    """Sets the cursor of ``state`` to go on after ``last_done`` (None: from ``cursor``, where this page began)."""
    after = expired_key(last_done) if last_done is not None else None
    if after is not None:
        cursors[state] = ScanCursor(upper, None, after, catch_up=False)
    elif cursor is not None:
        cursors[state] = cursor
    else:
        cursors.pop(state, None)
