"""Writes whose outcome is unknown, and the alert and status a failure write owes.

A conditional replace can commit and still fail for its caller (a timeout, a reset connection: the
response is lost). For the supervisor that used to mean a silent failure: the record was already
``Error`` or ``CompensationFailed``, no scan would ever look at it again, and the alert and the
status were never sent. Two rules close that:

- ``write_or_reread`` (``adapters.cosmos.state_store.update_once_or_reread``): on ``StoreUnavailable``
  the supervisor reads the record again; if its own write is there (its history entry), the write
  happened and the run continues with it;
- ``owe_notifications``: a write that moves a record to ``Error`` or ``CompensationFailed`` also
  sets ``completeBy`` to its own time: the operator alert and the submitter's status are owed
  from then on. ``deliver_owed`` sends both (derived from the record, with their deterministic ids,
  so a repeat collapses in duplicate detection), after a ``Received`` the submitter may never have
  heard (``receivedOwed``: notifications/received.py), and acknowledges them with one more conditional
  write that clears ``completeBy`` (and ``receivedOwed``). Whatever fails in between (a send, the re-read, the
  acknowledgement), each supervisor run sweeps the failure records still owing (``completeBy``
  past) and delivers again, until acknowledged: in the first duplicate window of each hour since
  ``completeBy`` (``resend_due``), so that notifications sent but never acknowledged (a record that
  cannot be written) are repeated once an hour, not whenever duplicate detection forgets them.

A status the submitter's reply queue refuses (missing, or this app's role on it not there yet:
``notifications.status.Delivery.REFUSED``, alerted once per queue by ``publish_status``) stays owed while
``completeBy`` is within ``orchestrators.status.REFUSED_RETRY_WINDOW``: the sweeps of the first window try it
again, and so does the first sweep of the next hour's, past the window, after which a refusal is acknowledged
like a sent status (dropped: the queue's alert stands for it, no per-order alert). The operator alert, sent with
it, is noted on the record then (``OwedAlertSent``, a side note): the sweeps after it send the status alone, where
the next hour's sent the alert again, past duplicate detection (every failed order of a queue gone for good
alerted twice).

The orchestration sends the same status on its durable timers while its send fails (``orchestrators.status``); a
try of it that goes out while the record still owes it notes so (``OwedStatusSent``, ``note_status_sent``), and the
sweeps after it send the alert alone, if still owed, and acknowledge: a queue full for the sweep's whole first
window that drained before the timers' try at 17 minutes heard the status from that try, and again from the next
hour's sweep, past duplicate detection (tests/notifications/test_redteam42_failed_heard_twice.py).
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
    """``record`` as a write is about to store it; if it is a failure, its notifications are owed
    from the write's own time (``completeBy``)."""
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
    """Sends the alert and the status ``record`` owes: the alert first (a submitter's queue that refuses or
    cannot take sends never holds the operator's alert back), then the ``Received`` the record may still owe
    its submitter (``receivedOwed``, cleared by the acknowledgement), then the status; True when all went out
    (or the status has nowhere to go: no reply queue, or a queue that still refuses it
    ``REFUSED_RETRY_WINDOW`` after ``completeBy``; ``publish_status`` logs and alerts a refusal on its own). A
    failed send raises what it raised (the alert noted sent if it went out); a refused one within the
    window is left owed. A refused ``Received`` holds the failure status back (not sent in that sweep), so
    the submitter never hears the failure before ``Received``. ``done`` gets ``"alert"`` once the alert is out
    (or was before; ``"alert sent"`` when this call sent it): what fails after it is the submitter's queue; and
    ``"status"`` once a status reached that queue.

    An alert that went out but whose record could not be marked delivered (``deliver_owed``) is marked paged
    (``notifications/repeats.py``, key ``_sent_key``): the next hours' resends send the status alone, not the
    alert again (each hour's copy paged the operator again: past duplicate detection, and past the
    ``operatorAlertRaised`` rule's resolution)."""
    owed = _owed_by(record)
    if owed is None:
        return True
    entry, (kind, severity, status) = owed
    now = ctx.clock.now()
    deliveries: list[Delivery] = []
    alerted = _noted(record, entry, OWED_ALERT_SENT)
    # sent by the orchestration's timers since (after the Received it owed): sent again here, past duplicate
    # detection, the submitter heard it twice
    told = _noted(record, entry, OWED_STATUS_SENT)
    alert_went_out = False
    # a later hour's resend: the alert may have gone out in an earlier hour whose acknowledgement failed (marked)
    resend = record.complete_by is not None and bool(hourly_slice(record.complete_by, now))
    # not raise_once_per_problem: this alert must raise (the status stays owed), and its mark is written only when
    # its record cannot be marked delivered (``_mark_alert_sent``), not when it goes out
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
        # a refused Received holds the failure status back with it (owed, or dropped with it past the
        # window): a queue taking sends again a moment later must not hear the failure first
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
        # still owed; the caller logs it and, owed long enough, alerts it (``deliver_owed``). An alert that went
        # out before a status send failed (the submitter's queue full) is noted, or every hour sends it again
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
    """Marks ``record``'s owed alert sent beside the record (which could not be written), so the next hour's resend
    does not page again (``send_owed``)."""
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
    """The ``publish_status`` activity sent ``status`` of ``attempt`` (``Failed``, ``CompensationFailed``: the
    orchestration's try, on its timers) while ``record``, read fresh for it, still owes that status: noted on the
    record (``OwedStatusSent``, a side note), so the sweep sends it no more (``send_owed``: the alert alone, if
    still owed, then the acknowledgement). Nothing is written when the record owes nothing (acknowledged), another
    status, or has moved on. A write that fails is only logged (the status is out): the sweep then sends it again,
    as before, collapsed only within duplicate detection's 10 minutes; a write another writer beat is read again
    and retried (``say_before_status`` itself may have cleared the ``Received`` mark since the read)."""
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
    """Notes on the record that its owed alert went out while the status stays owed (its reply queue refuses it,
    or a send of it or of ``Received`` failed: the queue full), so
    the next hour's sweep does not send the alert again. A write that fails is only logged: that sweep then
    sends it again, as for a delivery it could not acknowledge. A record read back without its etag (a write whose
    response was lost, moved on since by another writer: ``update_once_or_reread``) is not noted either: a
    conditional replace needs one, and the error being handled must reach ``deliver_owed`` as it is."""
    if record.version is None:
        log.info("order %s: owed alert sent, not noted: the record was read back without its etag", record.order_id)
        return
    try:
        _write_note(ctx, record, OWED_ALERT_SENT, f"{kind} alert sent; the status still owed")
    except (EtagMismatch, StoreUnavailable) as exc:
        log.info("order %s: owed alert sent, not noted: %s", record.order_id, exc)
        _mark_alert_sent(ctx, record)


def _write_note(ctx: AppContext, record: StateRecord, note: str, detail: str) -> None:
    """One side note (``note``: ``OwedAlertSent``, ``OwedStatusSent``) written on ``record`` by a conditional
    replace; what the write raises propagates."""
    update_once(ctx.states, record, lambda r: r.with_changes(ctx.clock.now(), note, SUPERVISOR, detail))


def build_owed(ctx: AppContext, record: StateRecord) -> None:
    """Builds what ``send_owed`` would send, sending nothing: raises what building it raises (what
    the record holds that no alert or status can carry)."""
    owed = _owed_by(record)
    if owed is None:
        return
    entry, (kind, severity, status) = owed
    now = ctx.clock.now()
    build_alert(kind, _summary(record, kind), now, record.order_id, severity, record.attempt, _details(record, entry))
    reason = None if record.last_error is None else carriable(record.last_error)
    StatusUpdate(order_id=record.order_id, status=status, attempt=record.attempt, at=now, reason=reason).to_json()


def resend_due(record: StateRecord, now: datetime) -> bool:
    """Whether a run sends what ``record`` owes now: in the first duplicate window of each hour since
    it has been owed (``notifications.alerts.hourly_slice``). Every send of one window collapses in
    duplicate detection (same MessageIds); between windows nothing is sent, so notifications that went
    out but could not be acknowledged (the record cannot be written) reach the operator and the
    submitter again once an hour, not every 10 minutes."""
    return record.complete_by is not None and hourly_slice(record.complete_by, now) is not None


def _details(record: StateRecord, entry: HistoryEntry) -> dict[str, Any]:
    details: dict[str, Any] = {
        "attempt": record.attempt,
        "failureCount": record.failure_count,
        "lastError": record.last_error,
        "event": entry.event,
        "by": entry.by,
        "at": entry.at.isoformat(),
    }
    if record.process_state is ProcessState.COMPENSATION_FAILED:
        details["notUndone"] = not_undone(record)  # every entry still held, not only the one that failed
        # The rounds ran out (their undo's reply never came) or its tries failed transiently: the undo may have been
        # done, and undone by hand a refund is made twice. Before, this alert (the only one when the rounds ran out)
        # had no next step at all.
        unknown = undo_outcome_unknown(record, entry)
        details["undoOutcomeUnknown"] = unknown
        details["nextStep"] = f"{OUTCOME_UNKNOWN_WARNING}; else {FAILED_NEXT_STEP}" if unknown else FAILED_NEXT_STEP
    return details


def acknowledge(ctx: AppContext, record: StateRecord) -> StateRecord | None:
    """Clears ``completeBy`` once the notifications are out; None when it could not (another writer
    moved the record, or the store is down: a later sweep delivers again, harmlessly). A write whose answer
    was lost is read back (``write_or_reread``): found landed, it is logged as the transition it made."""
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
    """Sends what ``record`` owes and acknowledges it; True when the notifications went out. Never
    raises: whatever goes wrong with one record's notifications is logged with the order id and
    leaves them owed for the next sweep; the caller goes on with its other records. A send that fails
    (a send, an alert or a status that cannot be built from what the record holds) is
    ``OwedNotificationsFailed`` (and ``NotificationsStuck`` after ``STUCK_ALERT_AFTER``); an
    acknowledgement that fails after the send is ``OwedNotificationsUnacknowledged``: delivered, not
    reported as undelivered. Sends happen only while ``resend_due``; every sweep builds the record's
    notifications first, so one that cannot be built is found and alerted between the windows too, on its
    own hours, and whatever fails only in sending is alerted on the windows' (``_not_delivered``)."""
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
        # resent next hour: the alert not again. Only an alert sent now marks it paged: a resend held behind the
        # mark (``already_paged``) leaves the time it paged as it was, or its daily reminder never came
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
    """Logs (``OwedNotificationsFailed``, ERROR); once they have been owed ``STUCK_ALERT_AFTER``, an
    alert that says so without what the record holds, at most once an hour per order: sent only in
    the first duplicate window of each hour since (``notifications.alerts.hourly_slice``), under that
    hour's id, so the sends of the slice collapse into one and the rest of the hour sends none.

    What cannot be built fails every sweep, so its hours count from ``STUCK_ALERT_AFTER`` after
    ``completeBy``. A send is tried only in the resend windows (``resend_due``: the first duplicate window
    of each hour since ``completeBy``), so a send that keeps failing is alerted in those windows once owed
    ``STUCK_ALERT_AFTER``: from the second hour's (counted from ``STUCK_ALERT_AFTER`` too, it would never
    meet a send; a submitter's queue full for good was never alerted but by the log).

    A send that failed after the alert went out (``status_queue``: the submitter's queue full, missing, refusing)
    is one problem for every order of that queue: one ``NotificationsStuck`` per reply queue and error, not per
    order and hour (``_alert_stuck_queue``: a queue full for good paged for each of its failed orders every hour)."""
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
        f"delivered since {owed_since.isoformat()} ({type(exc).__name__}); see OwedNotificationsFailed",
        at=ctx.clock.now(),
        order_id=record.order_id,
        severity="critical",
        discriminator=f"{owed_since.isoformat()}:{hour}",
        details={"error": type(exc).__name__, "owedSince": owed_since.isoformat()},
    )


# The errors a status send to a reply queue fails with (``publish_status`` raises a full queue's, a transient
# failure's ``SendError``): each a problem of the queue's own (``_stuck_key``), all over once the queue takes a status.
_STUCK_QUEUE_ERRORS: tuple[str, ...] = tuple(
    sorted({SendError.__name__, *(e.__name__ for e in SendError.__subclasses__())})
)


def _stuck_key(queue: str, error: str) -> str:
    """The problem key (``notifications/repeats.py``) of ``queue``'s statuses failing with ``error``."""
    return f"NotificationsStuck:{queue}:{error}"


def _alert_stuck_queue(ctx: AppContext, record: StateRecord, queue: str, exc: Exception, owed_since: datetime) -> None:
    """``NotificationsStuck`` for the reply queue ``queue``, once per problem (``notifications/repeats.py``: the
    queue and the error; again when it was over, not seen for two hours, or once a day while it lasts), not per
    order: every failed order of the queue owes its statuses, each logged ``OwedNotificationsFailed`` (its
    ``replyTo``). Under the hour's id: two instances that both find no mark raise one alert."""
    now = ctx.clock.now()
    error = type(exc).__name__
    raise_once_per_problem(
        ctx.alert_marks,
        ctx.sender,
        _stuck_key(queue, error),
        held_order_id=record.order_id,
        kind="NotificationsStuck",
        summary=f"status updates to {queue!r} cannot be delivered ({error}): failed orders of that queue owe "
        f"their statuses, the first seen {record.order_id}, owed since {owed_since.isoformat()}; see "
        "OwedNotificationsFailed (orderId, replyTo)",
        at=now,
        severity="critical",
        discriminator=f"{queue}:{error}:{now:%Y-%m-%dT%H}",
        details={"error": error, "replyTo": queue, "firstOrderId": record.order_id},
    )


def deliver_due(
    ctx: AppContext, cursors: dict[ProcessState, ScanCursor] | None = None, budget: RunBudget | None = None
) -> int:
    """The sweep of each supervisor run: failure records whose notifications are still owed, one bounded
    page per state, oldest first, each delivered on its own. Returns how many went out.

    ``cursors`` (the run's ``ScanState.owed``) makes the sweep go on from where the last run's page ended,
    until the query's end, then start over: records that stay owed (a record that cannot be acknowledged,
    or whose hour is not due: ``resend_due``) would otherwise fill the first page of every run, and the
    owed records after them would never be looked at. So each owed record is looked at about once every
    ``owed / SUPERVISOR_MAX_RECORDS`` runs, which must fit in a resend window (10 minutes: 20 runs at the
    default 30 s). Without cursors each run reads the first page.

    Once ``budget`` is spent the sweep reads no page and delivers no record more: the cursor is left after the last
    record it delivered (or where it was), so the next run goes on with the rest of the page."""
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
    """The sweep of ``state`` goes on after ``last_done`` (None: from ``cursor``, where this page began)."""
    after = expired_key(last_done) if last_done is not None else None
    if after is not None:
        cursors[state] = ScanCursor(upper, None, after, catch_up=False)
    elif cursor is not None:
        cursors[state] = cursor
    else:
        cursors.pop(state, None)
