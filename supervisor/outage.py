"""Waiting an outage out: the supervisor's reading of dependency health (``domain/circuit.py``).

An expired attempt (or a stuck compensation round) whose dependency's circuit is open, or was open at
some moment since the step (round) began, failed because of the outage, not because of the order:
it is not counted against ``MAX_FAILURES``. The order is rescheduled for after the circuit's next
probe (on a closed circuit whose service has had no success since: after as long as the order has
waited, from one cool-down to its cap), plus a jitter of up to one cool-down so a closing circuit does
not release every waiting order at once (the starter's admission caps still apply on top), and never
after ``outageWaitSince`` plus ``MAX_OUTAGE_WAIT_MINUTES``: the attempt then finds the wait over and the
order escalates anyway, with a reason that says so.

When the health store is unavailable the record is left expired for the next run (``StoreUnavailable``, as
for its write); any other failure to read it counts the attempt as it did before circuits existed.

One operator alert per outage, not per order (``alert_outages``, once per supervisor run): a
``DependencyOutage`` when a circuit opened (with the orders waiting on it) and a
``DependencyRecovered`` once it has stayed closed for ``OUTAGE_SETTLE_SECONDS`` (how long it was open, the
orders resuming). A reopening sooner continues the outage paged (``OutageAlertContinued``, nothing sent: a
marker in the health document, ``outageContinuedTo``), and its recovery covers it all, from the first opening
to the last closing, with the reopenings counted; a reopening later is a new outage. The recovery judged due by
the supervisor's clock is recorded as decided before it is sent (``outageSettledFor``): no reopening is taken into
it from then on (its marker write may fail after the send). Each alert is
identified by its dependency and the outage's start, so its MessageId is the same whoever sends it
(two supervisors racing, a resend after a lost response: Service Bus duplicate detection keeps one);
it is sent first, then recorded in the health document (``outageAlertedFor``/``recoveryAlertedFor``,
a conditional write re-applied on a lost race), and a recorded alert is never sent again, so a
resend after the duplicate-detection window cannot page twice either. A send that fails is not
recorded: the next run sends the same alert again. A ``DependencyOutage`` is recorded as being paged before it is
sent (``outagePagingFor``): if its marker write fails and, before the next run, the outage closes and others come
and go, the next run still pages it again and sends its recovery (the operator may have been paged).

The submitter hears "waiting for <dependency>" once per wait (``tell_waiting``): from the write that
began the wait (the record as read had no ``outageWaitSince``), not from every retry of it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from adapters.cosmos.errors import StoreError, StoreUnavailable
from adapters.cosmos.health_store import RacePause, update_health
from adapters.cosmos.mapping import DocumentError
from adapters.servicebus.sender import SendError
from contracts.messages import StatusName
from dependencies import AppContext
from domain.circuit import (
    CONTINUED,
    NOT_SENT,
    OUTAGE_ALERT,
    CircuitState,
    OutageAlert,
    mark_alerted,
    mark_paging,
    outage_alerts_due,
    waiting_reason,
)
from domain.outage import InFlight
from domain.records import StateRecord
from domain.timefmt import text_or_none, to_text
from domain.workflow import AGENTS
from notifications.alerts import raise_alert_after_write
from notifications.status import Delivery, publish_status
from observability.events import app_event
from supervisor.budget import RunBudget


@dataclass(frozen=True)
class OutageVerdict:
    dependency: str
    until: datetime  # not retried before this
    since: datetime  # the order has been waiting since
    exceeded: bool  # waited MAX_OUTAGE_WAIT_MINUTES or longer: escalate anyway
    bound: timedelta
    # waited for because the service, its circuit closed all along, is still working on the order's call (the wait's
    # reason says so, not "circuit open")
    still_working: bool = False

    def escalation_reason(self, now: datetime) -> str:
        minutes = (now - self.since).total_seconds() / 60
        return (
            f"{self.dependency} unavailable (circuit open, or failing with no success since, or still working on the "
            f"order's call) and the order waited "
            f"{minutes:.0f} min, "
            f"beyond MAX_OUTAGE_WAIT_MINUTES={self.bound.total_seconds() / 60:.0f}: escalated although only the "
            "outage failed it"
        )


def outage_verdict(
    ctx: AppContext,
    record: StateRecord,
    in_flight: InFlight | None,
    now: datetime,
    *,
    failed_transiently: bool = False,
    still_working: bool = False,
) -> OutageVerdict | None:
    """None when the failure was the order's own (no dependency in flight, or its circuit stayed
    closed since the step began); else when to come back, or that the wait is over.

    ``failed_transiently``: the attempt ended on its agent's transient failures (``domain.outage.failed_transiently``).
    Such a failure is taken for an outage's too while the service has had no success since (its failures in a row
    not reset), even with the circuit closed: an order alone in an outage makes fewer than
    ``CIRCUIT_FAILURE_THRESHOLD`` failures in a row and would spend its retries on it. With other traffic to the
    service, a success of another order resets the count and the failure counts as before.

    ``still_working``: those failures ended on the service's answer that it is still working on an earlier call with
    the order's key (an undo's tries, ``activities.compensation_steps.fail_compensation``): the call is being done, its
    outcome still to come, whatever other orders' calls did meanwhile; waited for as on a closed circuit with no
    success since (a slow undo failed the compensation, and the service did it minutes later)."""
    if in_flight is None or not ctx.settings.max_outage_wait:
        return None  # MAX_OUTAGE_WAIT_MINUTES=0: never wait, every failure counts
    try:
        health = ctx.health.get(in_flight.dependency)
    except StoreUnavailable as exc:
        # Not known yet whether the outage failed it: left expired for the next run to read again, never
        # counted for a blip of the store (counted, a few 503s during an outage spent the whole retry budget)
        app_event(
            "DependencyHealthUnavailable",
            f"order {record.order_id}: health of {in_flight.dependency} unknown ({exc}); left for the next run",
            logging.WARNING,
            orderId=record.order_id,
        )
        raise
    except (StoreError, DocumentError) as exc:
        # DocumentError: a health document this version cannot read (a newer version's circuit state or field):
        # counted as if healthy, not left to fail the recovery at every run (the order was never retried)
        app_event(
            "DependencyHealthUnavailable",
            f"order {record.order_id}: health of {in_flight.dependency} unknown ({exc}); counted as a failure",
            logging.WARNING,
            orderId=record.order_id,
        )
        return None
    if health is None:
        return None
    failing = failed_transiently and (health.consecutive_failures > 0 or still_working)
    # the record's own word that the circuit refused the call (``InFlight.met_open``) outweighs the closing's date: a
    # probe closing it seconds after the claim, on an agent whose clock runs behind, dated it before the claim
    overlaps = in_flight.met_open or health.outage_overlaps(in_flight.since)
    if not (overlaps or failing):
        return None
    policy = ctx.settings.circuit_policy
    spread = policy.cooldown_after(health.reopens)
    since = record.outage_wait_since or now
    if health.state is not CircuitState.CLOSED:
        base = health.next_probe(now, policy)
    elif failing:
        # No success since, on a closed circuit (slow, or down and not known yet): back off as long as the order
        # has waited, within the circuit's cool-downs, so that a slow service's call still running for it can
        # commit before the next attempt fences it (back within one cool-down, slow orders took up to an hour)
        base = now + min(max(now - since, policy.cooldown), policy.cooldown_max)
    else:
        base = now  # the outage has closed: back soon
    bound = ctx.settings.max_outage_wait
    # never past the bound: the attempt that finds the wait over runs at it (and escalates), not a probe later
    until = min(base + timedelta(seconds=ctx.rng.uniform(0, spread.total_seconds())), since + bound)
    working = still_working and not overlaps
    return OutageVerdict(in_flight.dependency, until, since, now - since >= bound, bound, working)


DEPENDENCIES = tuple(sorted({a.service for a in AGENTS.values()}))
# An outage that closed longer ago than this, never alerted, is history: not paged (the first run
# after a deployment finds the health documents of earlier outages)
OUTAGE_ALERT_MAX_AGE = timedelta(hours=1)


def alert_outages(ctx: AppContext, budget: RunBudget | None = None) -> int:
    """Sends the outage alerts due for every dependency (``domain.circuit.outage_alerts_due``);
    returns how many were sent. A dependency whose health cannot be read or marked is retried by the
    next run (the alert then goes out again with the same MessageId), and so is one not looked at once
    ``budget`` is spent (what is due is read from its health document)."""
    sent = 0
    for done, dependency in enumerate(DEPENDENCIES):
        if budget is not None and budget.spent():
            budget.stopped("outage alerts", done=done, sent=sent, left=len(DEPENDENCIES) - done)
            break
        try:
            sent += _alert_dependency(ctx, dependency)
        except StoreError as exc:
            app_event(
                "DependencyHealthUnavailable",
                f"outage alerts of {dependency} deferred to the next run: {exc}",
                logging.WARNING,
                dependency=dependency,
            )
        except Exception as exc:  # isolation: one dependency's alerts never stop the others'
            app_event(
                "DependencyHealthUnavailable",
                f"outage alerts of {dependency} deferred to the next run: {type(exc).__name__}: {exc}",
                logging.ERROR,
                dependency=dependency,
                error=type(exc).__name__,
            )
    return sent


def _alert_dependency(ctx: AppContext, dependency: str) -> int:
    health = ctx.health.get(dependency)
    if health is None:
        return 0
    sent = 0
    now = ctx.clock.now()
    settle = ctx.settings.outage_settle
    for alert in outage_alerts_due(health, closed_before=now - OUTAGE_ALERT_MAX_AGE, now=now, settle=settle):
        # agents write the same document meanwhile (an opening is when most of them fail at once)
        pause = RacePause(ctx.clock.sleep, ctx.rng)
        if alert.kind == OUTAGE_ALERT:  # recorded as being paged before it is: its recovery is owed from then on
            update_health(ctx.health, dependency, partial(mark_paging, alert=alert), ctx.clock.now(), pause=pause)
        if alert.kind not in NOT_SENT and not _send(ctx, alert):
            break  # not marked: the next run sends it (and what follows it) again
        _written, marked = update_health(
            ctx.health, dependency, partial(mark_alerted, alert=alert), ctx.clock.now(), pause=pause
        )
        if alert.kind in NOT_SENT:
            if not marked:
                break  # taken in or settled by another supervisor, the circuit moved, or the recovery recorded
            if alert.kind == CONTINUED:
                _continued(alert, settle)
        else:
            sent += 1
    return sent


def _continued(alert: OutageAlert, settle: timedelta) -> None:
    app_event(
        "OutageAlertContinued",
        f"{alert.dependency} reopened at {to_text(alert.last_opening)}, less than OUTAGE_SETTLE_SECONDS="
        f"{settle.total_seconds():.0f} after it closed: the outage paged since {to_text(alert.started)} goes on, "
        "not paged again",
        dependency=alert.dependency,
        outageStartedAt=to_text(alert.started),
        reopenedAt=to_text(alert.last_opening),
    )


def _waiting(ctx: AppContext, dependency: str) -> int | None:
    try:
        return ctx.health.count_waiting(waiting_reason(dependency))
    except StoreError:
        return None  # the alert goes out anyway, saying the count is unknown


def _send(ctx: AppContext, alert: OutageAlert) -> bool:
    waiting = _waiting(ctx, alert.dependency)
    counted = "an unknown number of" if waiting is None else str(waiting)
    details: dict[str, object] = {
        "dependency": alert.dependency,
        "outageStartedAt": to_text(alert.started),
        "waitingOrders": waiting,
    }
    if alert.kind == OUTAGE_ALERT:
        consequence = (
            f"{counted} orders wait for it without spending their retries"
            if ctx.settings.max_outage_wait
            else "orders do not wait (MAX_OUTAGE_WAIT_MINUTES=0): those failing on it spend their retries"
        )
        summary = f"{alert.dependency} is unavailable (circuit open since {to_text(alert.started)}); {consequence}"
        severity = "error"
    else:
        if alert.outage_seconds is None:  # closed before a later outage began, unseen by any run
            lasted = f"from the outage that began {to_text(alert.started)} (closed before a later one)"
        else:
            lasted = f"after {alert.outage_seconds / 60:.1f} min"
        if alert.reopenings:
            lasted += (
                f", from its first opening to its last closing (it reopened {alert.reopenings} "
                f"time{'s' if alert.reopenings > 1 else ''} within OUTAGE_SETTLE_SECONDS of closing)"
            )
        summary = f"{alert.dependency} recovered {lasted}; {counted} waiting orders resume"
        details |= {
            "closedAt": text_or_none(alert.closed),
            "outageSeconds": alert.outage_seconds,
            "reopenings": alert.reopenings,
        }
        severity = "warning"
    sent = raise_alert_after_write(
        ctx.sender,
        kind=alert.kind,
        summary=summary,
        at=ctx.clock.now(),
        severity=severity,
        # isoformat, not to_text: part of the alert id, which must not change across an upgrade
        discriminator=f"{alert.dependency}@{alert.started.isoformat()}",
        details=details,
    )
    if sent:
        app_event(
            "OutageAlertSent",
            f"operator alert {alert.kind} for the outage of {alert.dependency} since {to_text(alert.started)}",
            dependency=alert.dependency,
            alertKind=alert.kind,
            outageStartedAt=to_text(alert.started),
            waitingOrders=waiting,
        )
    return sent


WAITING_VARIANT = "waiting"


def tell_waiting(
    ctx: AppContext,
    before: StateRecord,
    written: StateRecord,
    dependency: str,
    status: StatusName,
    *,
    still_working: bool = False,
) -> bool:
    """Tells the submitter the order waits for ``dependency``: only when ``written`` began the wait
    (``before``, the record as read, was not waiting yet); a further retry of the same wait says
    nothing new. Its own MessageId (status, attempt and ``waiting``), so a repeat collapses and the
    attempt's first status is not mistaken for it. Tried once, like any progress status."""
    if before.outage_wait_since is not None:
        return False
    return say_waiting(ctx, written, status, waiting_reason(dependency, still_working=still_working))


def say_waiting(ctx: AppContext, written: StateRecord, status: StatusName, reason: str) -> bool:
    """Tells the submitter of ``written`` what its order waits for (``reason``), under the waiting
    MessageId of its attempt; tried once. Not while ``written`` still owes ``Received`` (the write tried it
    first, ``notifications.received.say_owed_received``, and its send failed): never before it."""
    if written.received_owed is not None:
        return False
    try:
        delivery = publish_status(
            ctx.sender,
            reply_to=written.reply_to,
            order_id=written.order_id,
            status=status,
            attempt=written.attempt,
            at=ctx.clock.now(),
            reason=reason,
            variant=WAITING_VARIANT,
        )
    except SendError as exc:
        app_event(
            "StatusSendFailed",
            f"order {written.order_id}: waiting status not sent: {exc}",
            logging.WARNING,
            orderId=written.order_id,
            status=status,
        )
        return False
    return delivery is Delivery.SENT
