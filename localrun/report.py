"""The simulation report: final states, invariants from independent evidence, recoveries,
latencies in simulated seconds, operations per order, dead letters."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Container, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.ledger import Ledger
from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE
from domain.deferral import DISCARDED
from domain.ids import status_message_id
from domain.states import TERMINAL_STATES, ProcessState
from domain.timefmt import parse
from localrun import orderless
from localrun.clocks import skew_of
from localrun.durable.instance import Instance
from localrun.host import LocalHost
from localrun.operator_answers import Evidence, broken_answers, checked_counts
from localrun.orderless import sent_as
from localrun.outages import Window, operator_actions, outage_summary, paged_outages
from localrun.prices import Usage, cost_per_1m_orders, instance_memory_mb
from localrun.servicebus.messages import MessageState
from localrun.simulation import (
    FUNCTIONS_RUNNING,
    NON_TERMINAL,
    OWED_NOTIFICATIONS,
    START,
    SimulationResult,
    base_settings,
)
from localrun.statuses_in_flight import statuses_in_flight
from localrun.worker.process import LOOP_THREAD
from orchestrators.status import REFUSED_RETRY_WINDOW
from settings import Settings

FORWARD_ACTIONS = ("reserve", "charge", "ship", "capture")
UNDO_ACTIONS = ("release", "refund")
UNDO_OF_FORWARD = {"reserve": "release", "charge": "refund", "capture": "refund"}
# The status an order's own submitter must hear when it ends in a failure (``silent_failures``).
FAILURE_STATUS = {"Error": "Failed", "CompensationFailed": "CompensationFailed", "Rejected": "Rejected"}


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 3)
    return round(statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1], 3)


EMPTY_LEDGER = Ledger()


def _ledger_per_order(ledger: Ledger) -> dict[str, Ledger]:
    """The simulators' ledger split by order (each read of the whole ledger scans every effect)."""
    split: dict[str, Ledger] = {}
    for effect in ledger.effects():
        split.setdefault(effect.order_id, Ledger()).record(effect)
    return dict(sorted(split.items()))


def _status_messages(result: SimulationResult) -> list[dict[str, Any]]:
    statuses: list[dict[str, Any]] = []
    for queue in result.workload.submitters:
        for message in result.broker.contents(queue):
            body = json.loads(str(message))
            body["_queue"] = queue
            body["_enqueued"] = (message.enqueued_time_utc, int(message.sequence_number))
            statuses.append(body)
    return statuses


def misrouted_statuses(
    statuses: list[dict[str, Any]], valid: dict[str, dict[str, Any]], injected: Mapping[str, Container[str]]
) -> list[dict[str, Any]]:
    """Statuses on a submitter's queue about an order that queue did not submit: a workload order's on any queue
    but its submitter's, and any other order's on a queue no injected submission of it named (``--inject-raw``
    submits orders of its own to the queues it chooses, the run's submitters' among them)."""
    return [
        s
        for s in statuses
        if (
            valid[s["orderId"]].get("replyTo") != s["_queue"]
            if s["orderId"] in valid
            else s["_queue"] not in injected.get(s["orderId"], ())
        )
    ]


def _judged_orders(
    result: SimulationResult, by_order: dict[str, Any], told_as: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The orders whose statuses the report judges, with the queue they are owed on: the workload's (``told_as``),
    and each order an injected line submitted (one the workload does not have, or a workload id the line took
    first: ``_displaced_orders``) whose state record names one of the run's status queues, the queue the app
    was asked to tell. Before, an order submitted only by a line had no missing-status, silent-failure or
    early-status check. A line's order told on a queue the run does not read is judged by its alerts alone."""
    injected = result.workload.injected_reply_to
    queues = set(result.workload.submitters)
    lines_orders = {
        order_id: {"replyTo": doc.get("replyTo")}
        for order_id, doc in by_order.items()
        if order_id in injected and order_id not in told_as and doc.get("replyTo") in queues
    }
    return told_as | lines_orders


def _displaced_orders(result: SimulationResult) -> set[str]:
    """Workload orders whose own submission was dead-lettered ``ConflictingOrderData`` while an injected line
    submitted the same order id: the line's submission came first and is the order the app ran. Without such a
    line nobody else could have created the order, so the dead letter alone excuses nothing."""
    injected = result.workload.injected_reply_to
    conflicting = {
        sent_as(d.message_id, d.application_properties)
        for d in result.broker.dead_letters(ORDERS_QUEUE)
        if d.reason == "ConflictingOrderData"
    }
    return {o for o in conflicting if o in result.workload.orders and o in injected}


def _rejected_after_accepted(result: SimulationResult) -> list[str]:
    """Orders with a state record (a submission of theirs accepted) whose submitter's queue took a ``Rejected`` after
    that record was written: a refusal told once another submission of the order had been accepted, contradicting
    it (the status courier delivering a stale ``Rejected``: docs/design.md). From the broker's enqueue times and the
    audited transitions (the record's creation is the order's first), both in true time."""
    created: dict[str, datetime] = {}
    for t in result.audit.transitions:
        if t.order_id not in created or t.at < created[t.order_id]:
            created[t.order_id] = t.at
    late: set[str] = set()
    for queue in result.workload.submitters:
        for message in result.broker.contents(queue):
            body = json.loads(str(message))
            order_id = body.get("orderId")
            if (
                body.get("status") == "Rejected"
                and order_id in created
                and message.enqueued_time_utc > created[order_id]
            ):
                late.add(order_id)
    return sorted(late)


def _heard_in_order(
    statuses: list[dict[str, Any]], by_order: dict[str, Any], valid: dict[str, dict[str, Any]]
) -> dict[str, list[tuple[datetime, int, str]]]:
    """What each order with a state record told its own submitter: (enqueued, sequence number, status), sorted."""
    heard: dict[str, list[tuple[datetime, int, str]]] = {}
    for s in statuses:
        order_id = s["orderId"]
        if order_id in by_order and valid.get(order_id, {}).get("replyTo") == s["_queue"]:
            heard.setdefault(order_id, []).append((*s["_enqueued"], str(s["status"])))
    for told in heard.values():
        told.sort()
    return heard


def _statuses_before_received(
    statuses: list[dict[str, Any]], by_order: dict[str, Any], valid: dict[str, dict[str, Any]], missing: set[str]
) -> list[str]:
    """Orders with a state record whose own submitter's queue took a status of the order other than ``Rejected``
    before the order's first ``Received`` (broker enqueue time, true time, then sequence number), or took one and no
    ``Received`` at all: the submitter heard of an order it was never told was received (docs/deferral.md, status
    messages). An order with no ``Received`` that ``missing_statuses`` counts already (finished, its queue reachable)
    is not counted again here; one whose queue is unreachable at the end is, as a status did reach it."""
    heard = _heard_in_order(statuses, by_order, valid)
    early: list[str] = []
    for order_id, told in sorted(heard.items()):
        told.sort()
        received = next((t for t in told if t[2] == "Received"), None)
        if received is None and order_id in missing:
            continue
        before = [t for t in told if t[2] not in ("Received", "Rejected") and (received is None or t < received)]
        if before:
            when = "with no Received" if received is None else f"before Received at {received[0]}"
            early.append(f"{order_id}: {', '.join(t[2] for t in before)} {when}")
    return early


# The statuses that say how an order ended, by final state (``missing_statuses``, ``stale_final_statuses``).
FINAL_STATUS = {
    "Processed": "Completed",
    "Error": "Failed",
    "Compensated": "Compensated",
    "CompensationFailed": "CompensationFailed",
}


def _missing_statuses(
    statuses: list[dict[str, Any]],
    by_order: dict[str, Any],
    owners: dict[str, dict[str, Any]],
    unreachable: Container[str],
    given_up: Container[tuple[str, str]],
    restarted: Mapping[str, datetime],
) -> list[str]:
    """Settled orders whose submitter never heard ``Received``, or never heard the status that says how the order
    ended since it last left a failure (``restarted``: the ``Failed`` of an attempt an operator resubmitted is not
    the ending of an order that failed again, or ended otherwise). Not counted: a status the app gave up on and told
    an operator so, or still tried when the horizon cut the run (``given_up``: ``_undelivered_statuses``,
    ``statuses_in_flight``), an order whose queue still refuses the app at the end, alerted, and refused the
    order's statuses (``unreachable``, order ids: ``_unreachable_orders``)."""
    heard: dict[str, set[str]] = {}
    heard_since: dict[str, set[str]] = {}
    for s in statuses:
        order_id = s["orderId"]
        heard.setdefault(order_id, set()).add(s["status"])
        if s["_enqueued"][0] >= restarted.get(order_id, START):
            heard_since.setdefault(order_id, set()).add(s["status"])
    missing: list[str] = []
    for order_id, doc in by_order.items():
        ending = FINAL_STATUS.get(doc["processState"])
        if order_id not in owners or order_id in unreachable or ending is None:
            continue
        wanted = (("Received", heard.get(order_id, set())), (ending, heard_since.get(order_id, set())))
        if any(status not in told and (order_id, status) not in given_up for status, told in wanted):
            missing.append(order_id)
    return missing


# A cancellation taken ends its order so (``Compensating`` in flight is ``non_terminal``'s to count)
UNDONE_STATES = frozenset({"Compensating", "Compensated", "CompensationFailed"})


def _unanswered_cancellations(
    cancelled: Iterable[str],
    statuses: list[dict[str, Any]],
    by_order: dict[str, Any],
    owners: dict[str, dict[str, Any]],
    unreachable: Container[str],
    given_up: Container[tuple[str, str]],
    undoing: Container[str],
) -> list[str]:
    """Orders a client's ``CancelOrder`` reached (``cancelled``: not dead-lettered, not cut by the horizon) that the
    app neither took (the order never went to ``Compensating``: ``undoing``, nor ended ``Compensated`` or
    ``CompensationFailed``) nor refused with ``CancellationRejected`` on the order's own queue
    (submission/cancellation.py): the order finished (``Processed``, ``Error``) and its submitter never heard
    what became of its cancellation. Not counted, as for ``missing_statuses``: a status the app gave up on and
    alerted (``given_up``), an order whose queue still refuses the app at the end (``unreachable``, order ids:
    ``_unreachable_orders``), an order with no record (refused at admission: ``CancelIgnored``) or still unsettled
    (``non_terminal``)."""
    refused = {
        s["orderId"]
        for s in statuses
        if s["status"] == "CancellationRejected" and s["_queue"] == owners.get(s["orderId"], {}).get("replyTo")
    }
    unanswered: list[str] = []
    for order_id in dict.fromkeys(cancelled):
        state = by_order.get(order_id, {}).get("processState")
        if state is None or state in UNDONE_STATES or ProcessState(state) in NON_TERMINAL or order_id in undoing:
            continue
        if order_id not in owners or order_id in unreachable:
            continue
        if order_id not in refused and (order_id, "CancellationRejected") not in given_up:
            unanswered.append(
                f"{order_id}: its CancelOrder neither taken nor answered CancellationRejected (ended {state})"
            )
    return unanswered


# What no status may follow the order's own ending with: another ending, or a progress status (``Processing``,
# ``Compensating``: an attempt or a round the order moved past). ``Received`` (a message of the order handled
# again), ``CancellationRejected`` (answers a cancellation) and ``Rejected`` (a refused resubmission) may.
STALE_AFTER_FINAL = frozenset(FINAL_STATUS.values()) | {"Processing", "Compensating"}


def _stale_final_statuses(
    statuses: list[dict[str, Any]],
    by_order: dict[str, Any],
    valid: dict[str, dict[str, Any]],
    restarted: Mapping[str, datetime] | None = None,
) -> list[str]:
    """Orders whose own submitter's queue took another ending status (``Completed``, ``Failed``,
    ``Compensated``, ``CompensationFailed``) after the last status that says how the order did end: the
    submitter's last word about its order is one the order moved past (a ``Failed`` of an attempt an operator
    resubmitted, heard after the next attempt's ``Completed``). Broker enqueue order (true time, then sequence
    number); an order whose final status never came is ``missing_statuses``' to count, not this. The ending is
    looked for since the order last left a failure (``restarted``, ``restarted_at``): the ``Failed`` of an attempt
    an operator resubmitted says nothing of how the order ended, so an order that failed again whose last
    ``Failed`` never came (its queue refusing it for good) is not judged on the first one."""
    heard = _heard_in_order(statuses, by_order, valid)
    restarted = restarted or {}
    stale: list[str] = []
    for order_id, told in sorted(heard.items()):
        wanted = FINAL_STATUS.get(by_order[order_id].get("processState"))
        told.sort()
        since = restarted.get(order_id, START)
        last = max((n for n, t in enumerate(told) if t[2] == wanted and t[0] >= since), default=None)
        if wanted is None or last is None:
            continue
        after = [t[2] for t in told[last + 1 :] if t[2] in STALE_AFTER_FINAL and t[2] != wanted]
        if after:
            stale.append(
                f"{order_id}: ended {by_order[order_id]['processState']}, heard {', '.join(after)} after {wanted}"
            )
    return stale


FAILURE_STATES = (ProcessState.ERROR, ProcessState.COMPENSATION_FAILED)


def restarted_at(transitions: Iterable[Any]) -> dict[str, datetime]:
    """When each order last left ``Error`` or ``CompensationFailed`` for a state that is not a failure: an operator
    resubmitted, compensated (again) or cancelled it (the runner's ``operator``, a developer at ``localrun serve``'s
    console). How it ended is judged from then on (``_silent_failures``, ``outage_only_failures``): an alert and a
    status of the failure it left behind say nothing of the one it ended with. From the audited writes."""
    left: dict[str, datetime] = {}
    for t in transitions:
        if t.before in FAILURE_STATES and t.after not in FAILURE_STATES:
            left[t.order_id] = max(t.at, left.get(t.order_id, t.at))
    return left


UNDOING_STATES = (ProcessState.COMPENSATING, ProcessState.COMPENSATED, ProcessState.COMPENSATION_FAILED)


def left_compensation(
    transitions: Iterable[Any], finals: Mapping[str, str], cancelled: Iterable[tuple[str, datetime]] = ()
) -> list[str]:
    """Orders that went on after their undoing began: an audited write took the order to a state other than
    ``Compensating``, ``Compensated`` or ``CompensationFailed`` after one took it to ``Compensating`` (a
    cancellation taken, a client's or an operator's, an escalation, an operator's compensate: nothing moves an
    order forward again, and only an operator's compensate moves it on from ``CompensationFailed``, to
    ``Compensating``); and orders whose cancel the app answered taken (``cancelled``: the runner's operator's,
    order and when the answer came) that ended in none of those three states (a cancel answered 200 whose
    write did not land, or was undone). From the audited writes, the runner's record of the answers, Cosmos."""
    entered: dict[str, datetime] = {}
    left: dict[str, str] = {}
    for t in transitions:
        if t.order_id in entered and t.after not in UNDOING_STATES and t.order_id not in left:
            left[t.order_id] = f"{t.order_id}: {t.before} -> {t.after} ({t.event} by {t.by}) at {t.at}, after "
            left[t.order_id] += f"Compensating at {entered[t.order_id]}"
        if t.after is ProcessState.COMPENSATING:
            entered.setdefault(t.order_id, t.at)
    for order_id, at in cancelled:
        final = finals.get(order_id)
        if order_id not in left and final not in UNDOING_STATES:
            left[order_id] = f"{order_id}: cancel taken at {at}, ended {final}"
    return [left[o] for o in sorted(left)]


def _kept_after_compensation(result: SimulationResult, ledgers: dict[str, Ledger]) -> list[str]:
    """Forward side effects that became effective after their undo was answered, or after the order
    reached ``Compensated``: from the ledger's timeline, the runner's record of undo answers and the
    audited transitions (all in true time), never from the app's own records."""
    compensated_at: dict[str, datetime] = {}
    for t in result.audit.transitions:
        if t.after is ProcessState.COMPENSATED:
            compensated_at.setdefault(t.order_id, t.at)
    kept: list[str] = []
    for order_id, ledger in ledgers.items():
        for effect in ledger.effects():
            if effect.action not in FORWARD_ACTIONS or not effect.amount:
                continue
            undo = UNDO_OF_FORWARD.get(effect.action)
            undone = result.undone_at.get((order_id, effect.service, undo)) if undo else None
            finished = compensated_at.get(order_id)
            what = f"{order_id}: {effect.service}.{effect.action} {effect.amount} at {effect.at}"
            if undone is not None and effect.at > undone:
                kept.append(f"{what}, undone at {undone}")
            elif finished is not None and effect.at > finished:
                kept.append(f"{what}, Compensated at {finished}")
    return kept


MONEY_TAKEN = ("charge", "capture")


def _unreleased_prepayments(
    by_order: dict[str, Any], ledgers: dict[str, Ledger], alert_bodies: list[dict[str, Any]]
) -> list[str]:
    """``Compensated`` orders whose payment notification was applied (the customer paid the provider)
    and that no provider ever charged or captured (nothing an undo could refund), without a
    ``PrepaymentToRelease`` alert naming them: the prepayment stays at the provider and nobody is told.
    From Cosmos, the simulators' ledger and the alert queue."""
    alerted = {body.get("orderId") for body in alert_bodies if _alert_kind(body) == "PrepaymentToRelease"}
    unreleased: list[str] = []
    for order_id, doc in by_order.items():
        payment = doc.get("payment")
        if doc.get("processState") != ProcessState.COMPENSATED.value or not isinstance(payment, dict):
            continue
        ledger = ledgers.get(order_id, EMPTY_LEDGER)
        taken = any(e.amount for action in MONEY_TAKEN for e in ledger.effects(order_id, action))
        if not taken and order_id not in alerted:
            unreleased.append(f"{order_id}: payment {payment.get('notificationId')} applied, never captured, no alert")
    return unreleased


def _unreachable_submitters(result: SimulationResult) -> set[str]:
    """Status queues that still refuse sends at the end of the run (deleted, or the app's role
    removed, for good) AND for which the app raised a ``ReplyQueueUnavailable`` alert: their orders'
    statuses cannot arrive, and the alert is what the app owes instead."""
    alerts = [json.loads(str(m)) for m in result.broker.contents(OPERATOR_ALERTS_QUEUE)]
    alerted = {a.get("details", {}).get("replyTo") for a in alerts if a.get("kind") == "ReplyQueueUnavailable"}
    now = START + timedelta(seconds=result.simulated_s)
    return {q for q in result.workload.submitters if q in alerted and result.broker.refusing(q, now) is not None}


def _unreachable_orders(result: SimulationResult, owners: dict[str, dict[str, Any]]) -> set[str]:
    """The orders of ``owners`` whose statuses cannot arrive: their queue still refuses the app at the end, alerted
    (``_unreachable_submitters``), and the app met that refusal for the order (its ``ReplyQueueUnavailable`` event,
    logged for every status a queue refuses: notifications/status.py, and for the ``Received`` a status waited
    for). Before, every order of such a queue was excused: a queue that began refusing after some of its orders had
    ended excused the statuses the app had dropped for them while it took sends (an app that answered ``Completed``
    sent without sending it, and a queue deleted a few seconds after those orders ended: ``missing_statuses`` held)."""
    queues = _unreachable_submitters(result)
    met = {event.get("orderId") for event in result.events.named("ReplyQueueUnavailable")}
    return {order_id for order_id, owner in owners.items() if owner.get("replyTo") in queues and order_id in met}


# What a NotificationsStuck alert says cannot reach the submitter yet: the failure status its record owes
# (supervisor/owed.py) and the Received it may owe before it
STUCK_STATUSES = ("Received", "Failed", "CompensationFailed")
# A record alerted stuck stays owed: the supervisor sends its statuses in the first resend window (the first
# 10 minutes of each hour since completeBy) after its queue takes sends again. A queue that took sends this long
# before the end has met one, so its stuck alert stands for nothing
STUCK_RESENT_WITHIN = timedelta(hours=1, minutes=10)


def _undelivered_statuses(
    result: SimulationResult, owners: dict[str, dict[str, Any]] | None = None
) -> set[tuple[str, str]]:
    """(order, status) pairs the app could not deliver and told an operator so, with an alert raised while
    the order's own submitter's queue refused sends (full, deleted or the app's role removed:
    ``status_queues.refusing``): a ``StatusUndelivered`` naming the status (given up after about six hours of
    tries: notifications/status.py, ``give_up``), or a ``NotificationsStuck`` naming the order (a failure
    record's status, which the supervisor keeps owing: supervisor/owed.py; a queue full for good leaves the run to
    its horizon; one with no order but the queue, ``details.replyTo``, names every order of that queue that
    failed). The alert is what the app owes instead; one raised while the queue took
    sends is not an excuse. Nor is a ``NotificationsStuck`` whose refusal ended ``STUCK_RESENT_WITHIN`` before
    the end of the run: the record stayed owed, and a resend window since would have delivered it. ``owners``: the
    orders judged, with their status queue (``_judged_orders``; default: the workload's)."""
    owners = result.workload.orders if owners is None else owners
    end = START + timedelta(seconds=result.simulated_s)
    given_up: set[tuple[str, str]] = set()
    queues_alerted: set[str] = set()  # StatusUndelivered alerted for the queue while it refused
    for message in result.broker.contents(OPERATOR_ALERTS_QUEUE):
        try:
            body = json.loads(str(message))
        except ValueError:
            continue
        kind = _alert_kind(body) if isinstance(body, dict) else NOT_AN_ALERT
        if kind not in ("StatusUndelivered", "NotificationsStuck"):
            continue
        order_id, details = body.get("orderId"), body.get("details")
        queue = owners.get(order_id, {}).get("replyTo") if isinstance(order_id, str) else None
        if kind == "NotificationsStuck" and order_id is None and isinstance(details, dict):
            queue = details.get("replyTo")  # one alert for the queue: every failed order of it (supervisor/owed.py)
        refusal = result.broker.refusing(queue, message.enqueued_time_utc) if isinstance(queue, str) else None
        if refusal is None:
            continue
        status = details.get("status") if isinstance(details, dict) else None
        if kind == "NotificationsStuck":
            if refusal.end is not None and refusal.end <= end - STUCK_RESENT_WITHIN:
                continue  # the queue took sends long enough before the end: owed, so resent since
            stuck = [str(order_id)] if order_id is not None else _failed_of(result, owners, queue, refusal.end)
            given_up.update((o, s) for o in stuck for s in STUCK_STATUSES)
        elif isinstance(status, str):
            before = details.get("undeliveredBefore") if isinstance(details, dict) else None
            waited = [b for b in before if isinstance(b, str)] if isinstance(before, list) else []
            given_up.update((str(order_id), s) for s in (status, *waited))  # and the Received it waited for
            queues_alerted.add(str(queue))
    held = _given_up_held(result, owners, queues_alerted)
    failed = _given_up_to_failed_sends(result, owners)
    lost = _last_tries_lost(result)
    return (
        given_up | held | _given_up_alert_lost(result, owners) | failed | _dropped_after_refusals(result, owners) | lost
    )


def _last_tries_lost(result: SimulationResult) -> set[tuple[str, str]]:
    """(order, status) pairs whose last try on the durable timers failed on every repeat without running its give-up
    (the app's ``LastTryLost``, logged by the orchestration itself: orchestrators/status.py): nothing was sent or
    alerted, and the ``alertsUndelivered`` log alert rule (infra/modules/alerts.bicep) pages on that event, so it
    stands for the status as a ``StatusUndelivered`` alert would. Before that event, such a status (its worker killed
    at ``functionTimeout``, or exited: ``host.last_try_crash_rate``) was dropped unheard and counted here missing."""
    return {
        (event["orderId"], event["status"])
        for event in result.events.named("LastTryLost")
        if isinstance(event.get("orderId"), str) and isinstance(event.get("status"), str)
    }


# The statuses a reply queue's refusal may drop by design, after ``REFUSED_RETRY_WINDOW`` of tries
# (orchestrators/status.py; notifications/received.py for ``Received``)
DROPPABLE_STATUSES = ("Received", "CancellationRejected", *FINAL_STATUS.values())
# the app measures the window from its first try (a failure status: from its record's completeBy, seconds before)
REFUSED_WINDOW_SLACK = timedelta(minutes=2)


def _dropped_after_refusals(result: SimulationResult, owners: dict[str, dict[str, Any]]) -> set[tuple[str, str]]:
    """(order, status) pairs the app dropped as designed (orchestrators/status.py): the order's queue refused the
    status's first try as missing or forbidden (``not_found``, ``unauthorized``: the app's ``QueueNotFound``,
    alerted ``ReplyQueueUnavailable`` once per queue), kept refusing it for the whole ``REFUSED_RETRY_WINDOW`` after
    that try (less ``REFUSED_WINDOW_SLACK``), and no send stored it since; the queue's ``ReplyQueueUnavailable``
    alert raised. That alert stands for the status, as for a queue refusing at the end (``_unreachable_orders``),
    also when the queue takes sends again later. A try that said an owed ``Received`` first and was refused there is
    a try of the status all the same (its own MessageId refused at least once: the app tried it). A queue full
    (``quota_exceeded``) is not this: the app tries that for hours and gives the status up by name
    (``StatusUndelivered``). One the app dropped sooner, while the queue came back within the window, is not
    excused. Found by a red team: a queue deleted for 55 minutes, then back, counted the statuses dropped meanwhile
    in ``missing_statuses``."""
    alerts = [json.loads(str(m)) for m in result.broker.contents(OPERATOR_ALERTS_QUEUE)]
    alerted = {a.get("details", {}).get("replyTo") for a in alerts if a.get("kind") == "ReplyQueueUnavailable"}
    attempts = {str(doc.get("orderId")): doc.get("attempt") for doc in result.states}
    dropped: set[tuple[str, str]] = set()
    for order_id, owner in owners.items():
        queue = owner.get("replyTo")
        if not isinstance(queue, str) or queue not in alerted or not result.broker.refusals(queue):
            continue
        last = attempts.get(order_id)
        # each try of a status says an owed Received first: a try refused there is a try of the status all the same
        received = result.broker.first_refused(queue, status_message_id(order_id, "Received", 0))
        for status in DROPPABLE_STATUSES:
            for attempt in range((last if isinstance(last, int) else 0) + 2):
                own = result.broker.first_refused(queue, status_message_id(order_id, status, attempt))
                if own is None:
                    continue  # never tried, or stored since
                first = own if received is None else min(own, received)
                if _refused_throughout(result, queue, first, first + REFUSED_RETRY_WINDOW):
                    dropped.add((order_id, status))
    return dropped


def _refused_throughout(result: SimulationResult, queue: str, since: datetime, until: datetime) -> bool:
    """Whether ``queue`` refused sends as missing or forbidden from ``since`` to ``until`` (less
    ``REFUSED_WINDOW_SLACK``), one refusal or several back to back."""
    at, end = since, until - REFUSED_WINDOW_SLACK
    while at < end:
        refusal = result.broker.refusing(queue, at)
        if refusal is None or refusal.kind == "quota_exceeded":
            return False
        if refusal.end is None:
            return True
        at = refusal.end
    return True


def _given_up_to_failed_sends(result: SimulationResult, owners: dict[str, dict[str, Any]]) -> set[tuple[str, str]]:
    """(order, status) pairs given up (the app's ``StatusUndelivered`` event, after about six hours of tries, its
    alert raised, held as a repeat or its send failing: notifications/status.py ``give_up``) whose tries Service Bus
    failed: an injected send failure (``servicebus.send_failure_rate``) kept the status's MessageId, or that of the
    ``Received`` each try sends first, off the order's queue (the broker's evidence), and no try stored it, or it
    would have been heard. The queue did not take those sends, as a refusing one does not: the give-up is what the
    app owes. Before, only a refusal excused one: at a rate of 0.9, statuses whose 11 tries all failed were counted
    in ``missing_statuses``."""
    failed: set[tuple[str, str]] = set()
    for event in result.events.named("StatusUndelivered"):
        order_id, status, attempt = event.get("orderId"), event.get("status"), event.get("attempt")
        queue = owners.get(str(order_id), {}).get("replyTo")
        if not (isinstance(order_id, str) and isinstance(status, str) and isinstance(attempt, int)):
            continue
        # the status's own sends, or those of the Received it waits for (notifications/received.py)
        tried = (status_message_id(order_id, status, attempt), status_message_id(order_id, "Received", 0))
        if isinstance(queue, str) and any(result.broker.send_failed(queue, message_id) for message_id in tried):
            failed.add((order_id, status))
    return failed


def _given_up_held(
    result: SimulationResult, owners: dict[str, dict[str, Any]], queues: set[str]
) -> set[tuple[str, str]]:
    """(order, status) pairs given up (the app's ``StatusUndelivered`` event) for an order of a queue whose
    ``StatusUndelivered`` alert was raised while it refused: one alert per queue and error while it lasts
    (notifications/status.py ``give_up``), the later give-ups logged, not alerted again."""
    return {
        (str(event["orderId"]), event["status"])
        for event in result.events.named("StatusUndelivered")
        if isinstance(event.get("status"), str) and owners.get(str(event.get("orderId")), {}).get("replyTo") in queues
    }


def _failed_of(
    result: SimulationResult, owners: dict[str, dict[str, Any]], queue: object, until: datetime | None
) -> list[str]:
    """The orders of ``owners`` whose status queue is ``queue`` that ended ``Error`` or ``CompensationFailed`` and
    began owing their statuses (the failure record's ``completeBy``) before the refusal ended (``until``; None: it
    did not): those a ``NotificationsStuck`` alert for the queue raised in that refusal stands for
    (supervisor/owed.py). Not one that failed after the queue took sends again: its statuses went to a queue that
    took them, and one never heard is the app's to count."""
    return [
        str(doc["orderId"])
        for doc in result.states
        if doc.get("processState") in ("Error", "CompensationFailed")
        and owners.get(str(doc.get("orderId")), {}).get("replyTo") == queue
        and (until is None or _before(doc.get("completeBy"), until))
    ]


def _before(text: object, until: datetime) -> bool:
    """Whether the timestamp ``text`` is before ``until`` (one that does not read: taken as before)."""
    try:
        return not isinstance(text, str) or parse(text) < until
    except ValueError:
        return True


def _given_up_alert_lost(result: SimulationResult, owners: dict[str, dict[str, Any]]) -> set[tuple[str, str]]:
    """(order, status) pairs given up (the app's ``StatusUndelivered`` event) whose ``StatusUndelivered`` alert could
    not be sent either (``AlertSendFailed`` with ``alertKind`` ``StatusUndelivered``, right after it: the give-up
    sends its alert once, notifications/status.py ``give_up``), for an order whose queue refused sends in the run.
    Nothing reaches ``operator-alerts`` then; the ``alertsUndelivered`` log alert rule (infra/modules/alerts.bicep)
    pages on that event instead, as designed (docs/design.md), so it stands for the status as the alert would."""
    last_given_up: dict[str, list[str]] = {}  # the statuses of the order's last give-up (one alert for them)
    lost: set[tuple[str, str]] = set()
    for event in result.events.named("StatusUndelivered", "AlertSendFailed"):
        order_id = event.get("orderId")
        if not isinstance(order_id, str):
            continue
        if event["event"] == "StatusUndelivered" and isinstance(event.get("status"), str):
            status = event["status"]
            # a give-up logs the Received its status waited for first, then the status: one alert for both
            waited = last_given_up.get(order_id) == ["Received"] and status != "Received"
            last_given_up[order_id] = ["Received", status] if waited else [status]
        elif (
            event["event"] == "AlertSendFailed"
            and event.get("alertKind") == "StatusUndelivered"
            and order_id in last_given_up
        ):
            queue = owners.get(order_id, {}).get("replyTo")
            if isinstance(queue, str) and result.broker.refusals(queue):
                lost.update((order_id, status) for status in last_given_up[order_id])
    return lost


def _rejected_orders(
    statuses: list[dict[str, Any]],
    alerts: list[dict[str, Any]],
    valid: dict[str, dict[str, Any]],
    unreachable: set[str],
    given_up: set[tuple[str, str]] | None = None,
) -> set[str]:
    """Orders told ``Rejected`` on a submitter's queue, and orders refused (an ``OrderRejected`` alert
    naming them) whose submitter's queue is unreachable (``unreachable``, order ids: ``_unreachable_orders``, the
    app met the refusal for the order) or whose ``Rejected``
    the app gave up on while that queue refused (``_undelivered_statuses``: a queue full for good): that
    status cannot arrive, and the alert stands in for it, as for ``missing_statuses``."""
    told = {s["orderId"] for s in statuses if s["status"] == "Rejected"}
    undeliverable = {o for o, status in given_up or () if status == "Rejected"}
    refused = {
        a["orderId"]
        for a in alerts
        if a.get("type") == "OperatorAlert" and a.get("kind") == "OrderRejected" and isinstance(a.get("orderId"), str)
    }
    return told | {o for o in refused if o in unreachable or o in undeliverable}


def _stranded_messages(result: SimulationResult, by_order: dict[str, Any], refused: set[str]) -> list[str]:
    """Deferred messages left on ``orders`` at the end that nothing scheduled will apply or dead-letter, and no
    operator was told of: their order has no state record (no submission will fetch them; the peek sweep, the
    safety net, only once they are ``PEEK_SWEEP_AGE_MINUTES`` old and only if their order was refused), no
    ``RetryDeferred`` for their sequence number is still on the queue, and no ``PaymentWithoutOrder`` alert
    names them (the peek sweep's, once one has waited ``ORDERLESS_PAYMENT_ALERT_MINUTES``: it waits on for its
    order, an operator told) unless their order was ``refused`` (admission control: dead-lettered
    ``OrderRejected`` is what the design does with them, not a wait). From the broker and Cosmos."""
    retried: set[int] = set()
    for message in result.broker.contents(ORDERS_QUEUE):
        try:
            body = json.loads(str(message))
        except ValueError:
            continue
        if isinstance(body, dict) and body.get("type") == "RetryDeferred" and int(message.state) != 1:
            retried.add(int(body.get("sequenceNumber", -1)))
    alerted = orderless.told(result.broker)
    waiting = orderless.waiting_without_order(result.broker, by_order)
    return [
        f"#{seq} for {order}"
        for seq, order in waiting.items()
        if seq not in retried and (seq not in alerted or order in refused)
    ]


def _discarded_payments_applied(result: SimulationResult, by_order: dict[str, Any]) -> list[str]:
    """Payment notifications an operator discarded (dead-lettered ``DiscardedByOperator``: refunded, its order never
    came) that their order took all the same: its state record's payment is that notification (an order submitted
    under the id afterwards, or one whose submission raced the discard). The payment step captures against the
    record's payment only, so no capture of a discarded payment can happen without it. From the broker and Cosmos."""
    taken: list[str] = []
    for dead in result.broker.dead_letters(ORDERS_QUEUE):
        if dead.reason != DISCARDED:
            continue
        try:
            body = json.loads(dead.body)
        except ValueError:
            continue
        order_id = body.get("orderId") if isinstance(body, dict) else None
        if not isinstance(order_id, str):
            continue
        payment = (by_order.get(order_id) or {}).get("payment") or {}
        if payment.get("notificationId") == body.get("notificationId"):
            taken.append(f"#{dead.sequence_number} for {order_id}")
    return taken


def _operator_answers_broken(result: SimulationResult, by_order: dict[str, Any]) -> list[str]:
    """The runner's operator's answers whose promise did not come true (``localrun.operator_answers``): from the
    audited writes, the final state documents and the broker, never the app's word."""
    if not result.operator_answers:
        return []
    queue = result.broker.contents(ORDERS_QUEUE)
    evidence = Evidence(
        transitions=result.audit.transitions,
        finals=by_order,
        dead_lettered={int(d.sequence_number): str(d.reason) for d in result.broker.dead_letters(ORDERS_QUEUE)},
        deferred=frozenset(int(m.sequence_number) for m in queue if m.state is MessageState.DEFERRED),
        horizon_reached=result.horizon_reached,
    )
    return broken_answers(result.operator_answers, evidence)


def _silent_failures(
    result: SimulationResult,
    finals: dict[str, str],
    statuses: list[dict[str, Any]],
    given_up: set[tuple[str, str]],
    valid: dict[str, dict[str, Any]],
    restarted: Mapping[str, datetime] | None = None,
) -> list[str]:
    """Orders that ended ``Error``, ``CompensationFailed`` or ``Rejected`` without an operator alert
    naming them (on the alert queue) and the failure status on their own submitter's queue (or, that
    queue refusing, a ``StatusUndelivered`` alert for it: ``_undelivered_statuses``). ``valid``: the
    orders judged, with the queue each is owed on (``_judged_orders``). ``restarted``: when an order last left a
    failure state (``restarted_at``): only an alert and a status enqueued since count for it."""
    restarted = restarted or {}
    alerted: set[Any] = set()
    for m in result.broker.contents(OPERATOR_ALERTS_QUEUE):
        order_id = json.loads(str(m)).get("orderId")
        if not isinstance(order_id, str) or order_id not in restarted or m.enqueued_time_utc >= restarted[order_id]:
            alerted.add(order_id)
    unreachable = _unreachable_orders(result, valid)
    heard_own: dict[str, set[str]] = {}
    for status in statuses:
        order_id = status["orderId"]
        if order_id in restarted and status["_enqueued"][0] < restarted[order_id]:
            continue  # told before an operator moved the order on
        if valid.get(order_id, {}).get("replyTo") == status["_queue"]:
            heard_own.setdefault(order_id, set()).add(status["status"])
    silent: list[str] = []
    for order_id, final in sorted(finals.items()):
        wanted = FAILURE_STATUS.get(final)
        if wanted is None or order_id not in valid:
            continue
        if order_id in unreachable or (order_id, wanted) in given_up:
            heard_own.setdefault(order_id, set()).add(wanted)  # nowhere to send it: the queue's alert stands in
        missing = [
            what
            for what, ok in (("alert", order_id in alerted), (wanted, wanted in heard_own.get(order_id, set())))
            if not ok
        ]
        if missing:
            silent.append(f"{order_id} ended {final} without {' and '.join(missing)}")
    return silent


NOT_AN_ALERT = "(not an OperatorAlert)"


def _alert_bodies(result: SimulationResult) -> list[dict[str, Any]]:
    """The bodies on ``operator-alerts`` as JSON objects; anyone with send rights may put anything
    there, so a body that is not a JSON object counts as an empty one (its kind ``NOT_AN_ALERT``)."""
    bodies: list[dict[str, Any]] = []
    for message in result.broker.contents(OPERATOR_ALERTS_QUEUE):
        try:
            body = json.loads(str(message))
        except ValueError:
            body = None
        bodies.append(body if isinstance(body, dict) else {})
    return bodies


def durable_instance_counts(instances: Iterable[Instance]) -> dict[str, dict[str, int]]:
    """How many Durable instances end in each runtime status, per orchestrator name."""
    counts: dict[str, Counter[str]] = {}
    for instance in instances:
        counts.setdefault(instance.name, Counter())[instance.status.value] += 1
    return {name: dict(sorted(by_status.items())) for name, by_status in sorted(counts.items())}


def _alert_kind(body: dict[str, Any]) -> str:
    kind = body.get("kind") if body.get("type") == "OperatorAlert" else None
    return kind if isinstance(kind, str) else NOT_AN_ALERT


def _outage_windows(result: SimulationResult) -> dict[str, list[Window]]:
    """The profile's injected outages per service, in true time (the runner's simulators' origin)."""
    windows: dict[str, list[Window]] = {}
    for service, entry in result.config.profile.remote.items():
        config = SimulatorConfig.from_profile(entry, origin=START)
        windows[service] = [(START + o.start, START + o.start + o.duration) for o in config.outages]
    return windows


def _outage_wait_bound(result: SimulationResult) -> timedelta:
    """MAX_OUTAGE_WAIT_MINUTES of the run (0: orders never wait an outage out, by configuration)."""
    merged = {**base_settings(result.config.profile), **result.config.settings}
    return Settings.from_env(merged).max_outage_wait


def _outage_settle(result: SimulationResult) -> timedelta:
    """OUTAGE_SETTLE_SECONDS of the run: how long a circuit stays closed before its outage's recovery is paged."""
    merged = {**base_settings(result.config.profile), **result.config.settings}
    return Settings.from_env(merged).outage_settle


def _full_for_good(result: SimulationResult, by_order: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The status queues that keep a run cut by its horizon from ever ending, when nothing else does: all that was
    left is failure records owing their status (``left_at_horizon`` is ``OWED_NOTIFICATIONS``, and maybe a function
    running then, as a supervisor run is every 30 s: fuzz seed 8469), and each owes
    it to a queue the profile keeps full to the end (``quota_exceeded`` with no ``duration_s``). Such a status is
    sent by the supervisor's owed sweep until acknowledged, with no end (``supervisor/owed.py``; a queue full is
    transient on Azure), and ``NotificationsStuck`` pages for the queue: the app as designed, and no longer horizon
    would end the run. A refusal that ends, or one that is ``not_found`` or ``unauthorized`` (the owed status
    dropped after ``REFUSED_RETRY_WINDOW``), leaves a run that a longer horizon ends: none named."""
    # a function still running at that moment (a supervisor run: it fires every 30 s) ends with no help from the horizon
    if (
        tuple(n for n in result.left_at_horizon if n != FUNCTIONS_RUNNING) != (OWED_NOTIFICATIONS,)
        or not result.audit.owing
    ):
        return []
    end = START + timedelta(seconds=result.simulated_s)
    queues: set[str] = set()
    for order_id in result.audit.owing:
        queue = by_order.get(order_id, {}).get("replyTo")
        refusal = result.broker.refusing(queue, end) if isinstance(queue, str) else None
        if refusal is None or refusal.kind != "quota_exceeded" or refusal.end is not None:
            return []
        queues.add(queue)  # type: ignore[arg-type]  # a str: refusal is None otherwise
    return sorted(queues)


def build_report(result: SimulationResult) -> dict[str, Any]:
    audit = result.audit
    ledgers = _ledger_per_order(result.ledger)
    by_order = {doc["orderId"]: doc for doc in result.states if "processState" in doc}
    valid = result.workload.orders

    final: Counter[str] = Counter(doc["processState"] for doc in by_order.values())
    # The orders the runner's submitters own: the workload's, less any whose id an injected line submitted first
    # (the app ran the line's order, told on the line's queue, and dead-lettered the workload's submission
    # ConflictingOrderData): those are judged as the line's (``misrouted_statuses``), not owed to the workload
    displaced = _displaced_orders(result)
    told_as = {o: v for o, v in valid.items() if o not in displaced}
    owners = _judged_orders(result, by_order, told_as)
    statuses = _status_messages(result)
    alert_bodies = _alert_bodies(result)
    # A run cut by its horizon may end while the app still tries a status (its give-up not due yet): not missing,
    # named in ``statuses_in_flight_at_end``, and excused as a status given up is. A run that ended quiet tries none.
    tried = statuses_in_flight(result.host.engine.instances(), by_order) if result.horizon_reached else set()
    excused = _undelivered_statuses(result, owners) | tried
    rejected = _rejected_orders(statuses, alert_bodies, valid, _unreachable_orders(result, valid), excused)
    rejected -= set(by_order)
    final["Rejected"] = len(rejected)
    dead = result.broker.dead_letters()
    final["DeadLettered"] = sum(1 for d in dead if d.queue == "orders")

    # a dead letter stands for the workload message it was sent as (an app's store-retry copy for its original)
    dead_order_ids = {sent_as(d.message_id, d.application_properties) for d in dead if d.queue == "orders"}
    # A run cut by its horizon left work in flight: a message it stopped before it was sent, or left on the
    # orders queue (a store retry scheduled, not received yet), is unsettled with its order (non_terminal),
    # not lost or unmatched. A run that ended quiet leaves nothing of the kind: those are the app's.
    in_flight = set(result.unsent_messages)
    # a workload message whose MessageId an injected line took first was dropped by duplicate detection before the
    # app could see it: not the app's to settle (``preempted_messages``)
    preempted = set(result.preempted_messages)
    # and one its client gave up on, every send failing (``servicebus.send_failure_rate`` near 1), never reached it
    preempted |= result.given_up_messages
    if result.horizon_reached:
        in_flight |= {sent_as(m.message_id, m.application_properties) for m in result.broker.contents(ORDERS_QUEUE)}
    unsent = [o for o in valid if o not in by_order and o in in_flight]
    lost = [
        o
        for o in valid
        if o not in by_order
        and o not in rejected
        and o not in dead_order_ids
        and o not in unsent
        and o not in preempted
    ]
    non_terminal = [o for o, doc in by_order.items() if ProcessState(doc["processState"]) in NON_TERMINAL] + unsent
    unsent_orders = set(unsent)
    duplicates = 0
    for ledger in ledgers.values():
        for action in (*FORWARD_ACTIONS, *UNDO_ACTIONS):
            keys = Counter(e.idempotency_key for e in ledger.effects(action=action) if e.amount)
            duplicates += sum(1 for n in keys.values() if n > 1)
            if action in FORWARD_ACTIONS and sum(1 for e in ledger.effects(action=action) if e.amount) > 1:
                duplicates += 1
    unbalanced = [
        o
        for o, doc in by_order.items()
        if doc["processState"] == ProcessState.COMPENSATED.value
        and any(vars(ledgers.get(o, EMPTY_LEDGER).net(o)).values())
    ]

    events = Counter(t.event for t in audit.transitions)
    retry_latency = [
        (t.at - t.expired_at).total_seconds()
        for t in audit.transitions
        if t.event == "RetryScheduled" and t.expired_at is not None
    ]
    first_request = [
        (result.first_remote_call[o] - sent).total_seconds()
        for o, sent in result.sent_at.items()
        if o in result.first_remote_call
    ]
    terminal_at: dict[str, datetime] = {}
    for t in audit.transitions:
        if t.after in TERMINAL_STATES and t.order_id not in terminal_at:
            terminal_at[t.order_id] = t.at
    to_terminal = [(terminal_at[o] - sent).total_seconds() for o, sent in result.sent_at.items() if o in terminal_at]

    n = max(len(valid), 1)
    counters = result.broker.counters()
    workload_sends = sum(1 for a in result.workload.arrivals)
    ops = {
        "cosmos_reads": audit.ops["cosmos_reads"] / n,
        "cosmos_writes": audit.ops["cosmos_writes"] / n,
        "cosmos_queries": audit.ops["cosmos_queries"] / n,
        "servicebus_sends": max(0, counters.send_operations - workload_sends) / n,
        "servicebus_receives": counters.receive_operations / n,
        "durable_history_events": result.host.engine.counters.history_events / n,
        "function_executions": sum(result.host.executions.values()) / n,
        # of which orchestrator episodes (each replays the history so far); the rest are triggers and activities
        "orchestrator_episodes": _orchestrator_episodes(result.host) / n,
    }
    # Notifications: each one the workload sent is either applied (on its order's state record) or
    # dead-lettered with a reason; read from Cosmos and the broker, not from the app's logs.
    applied = {doc["payment"]["notificationId"] for doc in by_order.values() if doc.get("payment")}
    dead_ids = {sent_as(d.message_id, d.application_properties) for d in dead if d.reason}
    # one in flight when the horizon cut the run, or sent ahead of an order that was (``unsent``), is unsettled
    # with its order, not unmatched
    notifications = [
        a.message.message_id
        for a in result.workload.arrivals
        if a.kind == "notification"
        and a.message.message_id not in in_flight
        and a.message.message_id not in preempted
        and a.order_id not in unsent_orders
    ]
    # one still deferred for an order never submitted, an operator told (PaymentWithoutOrder), waits for that order
    waiting_told = orderless.told_message_ids(result.broker, set(by_order) | rejected)
    unmatched = [m for m in notifications if m not in applied and m not in dead_ids and m not in waiting_told]
    # Status routing: every status on a submitter's queue is about that submitter's own order, and
    # each settled order's submitter heard that it was received and how it ended.
    misrouted = misrouted_statuses(statuses, told_as, result.workload.injected_reply_to)
    restarted = restarted_at(audit.transitions)
    unreachable_orders = _unreachable_orders(result, owners)
    missing_status = _missing_statuses(statuses, by_order, owners, unreachable_orders, excused, restarted)
    # a client's CancelOrder the app neither took nor refused: the CancellationRejected its submitter is owed
    cancelled = [
        a.order_id
        for a in result.workload.arrivals
        if a.kind == "cancel"
        and a.order_id is not None
        and a.message.message_id not in dead_order_ids
        and a.message.message_id not in in_flight
        and a.message.message_id not in preempted
    ]
    undoing = {t.order_id for t in audit.transitions if t.after is ProcessState.COMPENSATING}
    unanswered = _unanswered_cancellations(cancelled, statuses, by_order, owners, unreachable_orders, excused, undoing)
    kept = _kept_after_compensation(result, ledgers)
    contradicted = _rejected_after_accepted(result)
    early = _statuses_before_received(statuses, by_order, owners, set(missing_status))
    stale_final = _stale_final_statuses(statuses, by_order, owners, restarted)
    finals = {o: doc["processState"] for o, doc in by_order.items()} | dict.fromkeys(rejected, "Rejected")
    silent = _silent_failures(result, finals, statuses, excused, owners, restarted)
    cancels = [(m.order_id, m.at) for m in result.operator_moves if m.action == "cancel"]
    went_on = left_compensation(audit.transitions, finals, cancels)
    stranded = _stranded_messages(result, by_order, rejected)
    discarded_taken = _discarded_payments_applied(result, by_order)
    answers_broken = _operator_answers_broken(result, by_order)
    unreleased = _unreleased_prepayments(by_order, ledgers, alert_bodies)
    windows = _outage_windows(result)
    # orders needing an operator because of an outage alone (localrun/outages.py), from the runner's evidence
    bound = _outage_wait_bound(result)
    # an order an operator moved on from a failure is judged by what happened to it since (``restarted_at``)
    actions = operator_actions(
        by_order,
        [t for t in audit.transitions if t.at >= restarted.get(t.order_id, START)] if restarted else audit.transitions,
        [f for f in audit.remote_failures if f.at >= restarted.get(f.order_id, START)],
        windows,
        bound > timedelta(0),
        bound=bound,
        own_faults=[(o, at) for o, at in audit.own_faults if at >= restarted.get(o, START)],
    )
    invariants = {
        "lost": len(lost),
        "duplicate_side_effects": duplicates,
        "stale_writes": len(audit.stale_writes),
        "non_terminal": len(non_terminal),
        "unbalanced_compensations": len(unbalanced),
        "unmatched_notifications": len(unmatched),
        "misrouted_statuses": len(misrouted),
        "missing_statuses": len(missing_status) + len(unanswered),
        "rejected_after_accepted": len(contradicted),
        "statuses_before_received": len(early),
        "stale_final_statuses": len(stale_final),
        "kept_after_compensation": len(kept),
        "left_compensation": len(went_on),
        "silent_failures": len(silent),
        "stranded_messages": len(stranded),
        "discarded_payments_applied": len(discarded_taken),
        "operator_answers_broken": len(answers_broken),
        "unreleased_prepayments": len(unreleased),
        # orders an outage alone failed, not escalated by MAX_OUTAGE_WAIT_MINUTES by design (localrun/outages.py)
        "outage_only_failures": len(actions.unexpected),
    }
    report: dict[str, Any] = {
        "orders": len(valid),
        "seed": result.config.seed,
        "final_states": dict(sorted(final.items())),
        "invariants": invariants,
        "invariant_examples": {
            "lost": lost[:5],
            "stale_writes": audit.stale_writes[:5],
            "non_terminal": non_terminal[:5],
            "unbalanced_compensations": unbalanced[:5],
            "unmatched_notifications": unmatched[:5],
            "missing_statuses": [*missing_status, *unanswered][:5],
            "rejected_after_accepted": contradicted[:5],
            "statuses_before_received": early[:5],
            "stale_final_statuses": stale_final[:5],
            "kept_after_compensation": kept[:5],
            "left_compensation": went_on[:5],
            "silent_failures": silent[:5],
            "stranded_messages": stranded[:5],
            "discarded_payments_applied": discarded_taken[:5],
            "operator_answers_broken": answers_broken[:5],
            "unreleased_prepayments": unreleased[:5],
            "outage_only_failures": actions.unexpected[:5],
        },
        # orders ending Error/CompensationFailed whose cause was only an outage (incl. the bound's)
        "operator_actions_needed": len(actions.outage_only),
        # failure records still owing their alert and status when the run ended (the run waits for the
        # supervisor's owed sweep to send them, so only the horizon leaves one): counted in missing_statuses
        # and silent_failures too, and named here, told apart from a status nothing would send
        "owed_at_end": sorted(audit.owing),
        # statuses the app was still trying to deliver when the horizon cut the run, their give-up not due yet
        # (localrun/statuses_in_flight.py): not counted in missing_statuses, named here
        "statuses_in_flight_at_end": [f"{order_id}: {status}" for order_id, status in sorted(tried)],
        "preempted_messages": sorted(set(result.preempted_messages)),
        "given_up_messages": sorted(result.given_up_messages),
        "deferred": {
            "deferred": result.events.count("MessageDeferred"),
            "recovered_by_sequence": result.events.count("DeferredRecovered", via="sequence")
            + result.events.count("DeferredRecovered", via="retry"),
            "recovered_by_sweep": result.events.count("DeferredRecovered", via="sweep"),
            "recovered_by_retry": result.events.count("DeferredRecovered", via="retry"),
            "expired": result.events.count("DeferredExpired"),
        },
        "recoveries": {
            "supervisor_retries": events["RetryScheduled"],
            # attempts of prepaid orders released uncounted to wait for their payment notification, and
            # the orders PAYMENT_WAIT_MINUTES gave up (supervisor/payment_wait.py)
            "payment_waits": events["PaymentWait"],
            "payment_waits_given_up": result.events.count("SupervisorPaymentWaitExceeded"),
            # attempts and compensation rounds the Durable backend never had (their starts failed), released
            # uncounted (supervisor/recovery.py, supervisor/compensation_rounds.py)
            "starts_missed": events["StartMissed"] + events["CompensationStartMissed"],
            # claims whose start their run never tried (its time for starts spent), released at once by that run,
            # uncounted (orchestrators/starter.py, release_untried)
            "starts_released": events["StartNotTried"] + events["CompensationStartNotTried"],
            "escalations": events["Escalated"],
            "compensations": sum(
                1
                for t in audit.transitions
                if t.after is ProcessState.COMPENSATING and t.before is not ProcessState.COMPENSATING
            ),
            "host_restarts": result.restarts,
            "fenced_forward_calls": result.fenced_forward_calls,
        },
        "latency_s": {
            "submit_to_first_request_p50": _percentile(first_request, 50),
            "submit_to_first_request_p99": _percentile(first_request, 99),
            "expiry_to_retry_p50": _percentile(retry_latency, 50),
            "expiry_to_retry_p99": _percentile(retry_latency, 99),
            "submit_to_terminal_p50": _percentile(to_terminal, 50),
            "submit_to_terminal_p99": _percentile(to_terminal, 99),
        },
        "ops_per_order": {k: round(v, 2) for k, v in ops.items()},
        "cost_per_1m_orders_usd": cost_per_1m_orders(_usage(result)),
        "outages": outage_summary(
            result.events.events,
            audit.transitions,
            alert_bodies,
            windows,
            terminal_at,
            paged_outages(
                result.circuit_moves,
                _outage_settle(result),
                START + timedelta(seconds=result.simulated_s),
                skew_of(result.config.profile.clock_skew_s, "supervisor"),
            ),
        ),
        "injected_faults": dict(sorted(_injected(result, final).items())),
        "runtime": {
            # What crossed the host/worker boundary: every invocation is an InvocationRequest the
            # Functions runtime handled; settlements came over gRPC, durable-client calls over HTTP.
            "invocation_requests": result.host.invocation_requests,
            "function_executions": sum(result.host.executions.values()),
            "settlements_over_grpc": dict(sorted(result.host.settlement.calls.items())),
            "durable_http_requests": result.host.durable_api.requests,
            # clock sleeps on the worker's event loop: blocking calls in async functions (must be 0)
            "blocking_sleeps_on_worker_loop": result.host.clock.untracked_sleeps[LOOP_THREAD],
            "sdk_speed_ups": result.host.sdk_speed_ups,
            # the host's concurrency limits (None: none) and the most in flight at once under each, and the longest
            # wait of an activity work item for a slot (simulated seconds)
            "concurrency": {
                "worker_threads": result.host.worker_threads,
                "sync_invocations_peak": result.host.threads_peak,
                "blocking_threads": result.host.blocking_threads,
                "blocking_calls_peak": result.host.blocking_peak,
                "max_concurrent_activities": result.host.engine.max_activities,
                "activities_peak": result.host.engine.counters.activities_peak,
                "activity_wait_longest_s": round(result.host.engine.counters.activity_wait_longest_s, 1),
            },
            # the Durable instances at the end, per orchestrator and runtime status (an attempt's instance
            # left Running after its order ended is one the extension still waits on)
            "durable_instances": durable_instance_counts(result.host.engine.instances()),
        },
        "alerts": dict(sorted(Counter(_alert_kind(body) for body in _alert_bodies(result)).items())),
        # sends Service Bus refused for breaking its limits (MessageId, size, properties): 0 unless a bug
        "servicebus_limit_violations": result.broker.counters().limit_violations,
        "function_failures": len(result.task_failures),
        "function_failure_examples": [f"{name}: {error}" for name, error in result.task_failures[:5]],
        "status_messages": len(statuses),
        # Rejected statuses the status courier dropped: a later submission of the order was accepted meanwhile
        "statuses_superseded": result.events.count("StatusSuperseded"),
        "dead_letters": [
            {"queue": d.queue, "message_id": d.message_id, "reason": d.reason, "description": d.description}
            for d in dead
        ],
        "wall_s": round(result.wall_s, 2),
        "simulated_s": round(result.simulated_s, 1),
        "horizon_s": result.config.horizon.total_seconds(),
        "horizon_reached": result.horizon_reached,
        # what kept the run going when the horizon cut it (localrun/simulation.py's ``still_due``)
        "left_at_horizon": list(result.left_at_horizon),
        # status queues full to the end that keep the run from ever ending (``_full_for_good``): a longer horizon
        # would not end it
        "endless_for": _full_for_good(result, by_order),
    }
    if result.operator_actions is not None:  # the profile's operator: what it asked and what the app answered
        report["operator_actions"] = result.operator_actions
        # the answers whose promise ``operator_answers_broken`` checked, by action
        report["operator_answers_checked"] = checked_counts(result.operator_answers)
    return report


def _usage(result: SimulationResult) -> Usage:
    """The run's billable counts for the cost model (localrun/prices.py). Service Bus bills every
    API call: sends (the submitters' included), receives, settlements, lock renewals and peeks."""
    c = result.broker.counters()
    sizes = result.state_sizes_kb  # each state-container document's JSON size, taken as it was read
    return Usage(
        orders=len(result.workload.orders),
        cosmos_reads=result.audit.ops["cosmos_reads"],
        cosmos_writes=result.audit.ops["cosmos_writes"],
        cosmos_queries=result.audit.ops["cosmos_queries"],
        item_size_kb=statistics.fmean(sizes) if sizes else 1.0,
        servicebus_operations=c.send_operations
        + c.receive_operations
        + c.completed
        + c.abandoned
        + c.deferred
        + c.dead_lettered
        + c.lock_renewals
        + c.peeked,
        executions=sum(result.host.executions.values()),
        execution_seconds=result.host.execution_seconds,
        period_billed_seconds=result.host.activity_periods.billed_seconds(),
        activity_periods=result.host.activity_periods.periods(),
        episodes=result.host.engine.counters.episodes,
        activities=result.host.engine.counters.activity_executions,
        memory_mb=instance_memory_mb(),
    )


def _injected(result: SimulationResult, final: dict[str, int]) -> dict[str, int]:
    """The audit's fault counters, with the faults that are shapes of the workload rather than draws at run
    time: notifications sent together with their order, notifications for orders never submitted, and orders
    refused because the profile's admission cap was full."""
    injected = dict(result.audit.injected)
    if result.workload.concurrent_notifications:
        injected["concurrent_notifications"] = result.workload.concurrent_notifications
    if result.workload.orderless_notifications:  # orders.orderless_notification_rate
        injected["orderless_notifications"] = result.workload.orderless_notifications
    if result.config.profile.max_pending is not None and final.get("Rejected"):
        injected["orders_over_admission_cap"] = final["Rejected"]
    if result.host.engine.counters.activities_rerun_late:  # host.activity_rerun_rate
        injected["activities_rerun_late"] = result.host.engine.counters.activities_rerun_late
    if result.host.engine.counters.activities_crashed:  # host.last_try_crash_rate
        injected["activities_crashed"] = result.host.engine.counters.activities_crashed
    if result.host.engine.counters.deliveries_delayed:  # durable.delivery_delay_rate
        injected["durable_deliveries_delayed"] = result.host.engine.counters.deliveries_delayed
    if result.host.engine.counters.starts_recorded_late:  # durable.late_start_rate
        injected["durable_starts_recorded_late"] = result.host.engine.counters.starts_recorded_late
    return injected


def summary(report: dict[str, Any], *, served: bool = False) -> str:
    """The summary ``simulate`` and ``serve`` print. ``served``: the run was ``serve``'s (``verdict``)."""
    lines = [f"orders: {report['orders']}   wall: {report['wall_s']} s   simulated: {report['simulated_s']} s"]

    def table(title: str, values: dict[str, Any]) -> None:
        lines.append(f"\n{title}")
        width = max((len(k) for k in values), default=0)
        for key, value in values.items():
            lines.append(f"  {key:<{width}}  {value}")

    table("final states", report["final_states"])
    table("recoveries", report["recoveries"])
    table("deferred messages", report["deferred"])
    for dependency, row in report.get("outages", {}).items():
        table(f"outages of {dependency}", row)
    if "operator_actions_needed" in report:
        lines.append(f"\noperator actions needed because of an outage alone: {report['operator_actions_needed']}")
    if "operator_actions" in report:
        acted = {
            a: ", ".join(f"{o} {n}" for o, n in outcomes.items()) for a, outcomes in report["operator_actions"].items()
        }
        table("operator actions (profile operator)", acted or {"none": ""})
    bad = {k: ("OK" if v == 0 else f"{v}  <-- VIOLATED") for k, v in report["invariants"].items()}
    table("invariants (0 = holds)", bad)
    if report.get("endless_for"):
        lines.append(
            f"  (the run stopped at its horizon, {report['horizon_s'] / 3600:g} simulated hours, and would never end:"
            f" failure records owe their status to {', '.join(report['endless_for'])}, full to the end of the run;"
            " the supervisor's owed sweep sends it until acknowledged, once an hour, and NotificationsStuck pages for"
            " the queue, as designed: no longer horizon ends such a run)"
        )
    elif report.get("horizon_reached"):
        left = ", ".join(report.get("left_at_horizon", [])) or "work"
        lines.append(
            f"  (the run stopped at its horizon, {report['horizon_s'] / 3600:g} simulated hours, with {left} still due:"
            " raise --horizon-hours; MAX_IN_FLIGHT and STARTER_SCHEDULE bound how fast Pending orders are started,"
            " and each order paused for review holds one of MAX_IN_FLIGHT's places up to REVIEW_TIMEOUT_SECONDS)"
        )
    if report.get("owed_at_end"):
        owed = ", ".join(report["owed_at_end"][:5])
        lines.append(f"  (alert and status still owed at the end, due from the supervisor's owed sweep: {owed})")
    if report.get("statuses_in_flight_at_end"):
        tried = ", ".join(report["statuses_in_flight_at_end"][:5])
        lines.append(f"  (statuses still tried at the end, their give-up not due yet, not counted missing: {tried})")
    table("latency (simulated seconds)", report["latency_s"])
    table("operations per order", report["ops_per_order"])
    cost = report["cost_per_1m_orders_usd"]
    table(
        "cost per 1M orders (USD, modelled: localrun/prices.py; totals with GB-s per invocation, the upper bound; lower"
        " bounds with GB-s per activity period, function_gb_s_shared: docs/cost.md)",
        {
            "total (Durable on Azure Storage)": cost["total"],
            "total with Durable Task Scheduler": cost["total_with_dts"],
            "lower bound (Azure Storage)": cost["total_low"],
            "lower bound with DTS": cost["total_with_dts_low"],
        }
        | cost["parts"],
    )
    runtime = report["runtime"]
    table(
        "through the Functions runtime",
        {
            "invocation requests": runtime["invocation_requests"],
            "settlements over gRPC": sum(runtime["settlements_over_grpc"].values()),
            "durable client HTTP requests": runtime["durable_http_requests"],
        },
    )
    if report["injected_faults"]:
        table("faults injected", report["injected_faults"])
    reasons = Counter(d["reason"] for d in report["dead_letters"])
    if reasons:
        table("dead letters by reason", dict(reasons))
    lines.append("\n" + verdict(report, served=served))
    return "\n".join(lines)


def verdict(report: dict[str, Any], *, served: bool = False) -> str:
    """The summary's last line: whether the run kept every invariant, and how the orders ended, so that a
    reader of a chaos run's ``Error`` or ``DeadLettered`` counts need not scroll back to judge them. ``served``:
    ``serve``'s run, which writes no report, so the orders the report would name are named here, and which the
    developer stops when they like, orders still in flight then counting as ``non_terminal``."""
    invariants = report["invariants"]
    violated = {name: count for name, count in invariants.items() if count}
    if violated:
        named = ", ".join(f"{name} {count}" for name, count in violated.items())
        head = f"verdict: {len(violated)} of {len(invariants)} invariants VIOLATED ({named})"
        if not served:
            return f"{head}: the report's invariant_examples name orders (docs/design.md#invariants)"
        examples = report["invariant_examples"]
        shown = "; ".join(
            f"{name} {', '.join(str(e) for e in examples[name])}" for name in violated if examples.get(name)
        )
        in_flight = " (an order still in flight when serve stopped counts as non_terminal)"
        stopped = in_flight if "non_terminal" in violated else ""
        return f"{head}{': e.g. ' + shown if shown else ''}{stopped} (docs/design.md#invariants)"
    final = report["final_states"]
    # DeadLettered counts messages on `orders` (malformed or unusable submissions), not orders of the run
    others = [
        f"{state} {count}" for state, count in final.items() if count and state not in ("Processed", "DeadLettered")
    ]
    ended = f"{final.get('Processed', 0)} of {report['orders']} orders Processed"
    if others:
        ended += f", {', '.join(others)}: how the app ended them under the injected faults, not losses"
    if final.get("DeadLettered"):
        messages = "message" if final["DeadLettered"] == 1 else "messages"
        ended += f"; {final['DeadLettered']} {messages} on orders dead-lettered (reasons above)"
    return (
        f"verdict: all {len(invariants)} invariants hold (docs/design.md#invariants): no order lost, stuck "
        f"or charged twice; {ended}"
    )


def _orchestrator_episodes(host: LocalHost) -> int:
    return sum(
        count
        for name, count in host.executions.items()
        if name in host.functions and host.functions[name].trigger_type == "orchestrationTrigger"
    )
