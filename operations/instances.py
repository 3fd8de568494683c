"""The Durable side of an order, through the app's own durable client: each attempt's and
compensation round's runtime status and last history event, and the status updates its history shows
it sent: ``publish_status`` activities that completed answering None (not ``StatusRefused``, its reply queue refused
the app, nor ``ReceivedUnsent``, the ``Received`` owed before it failed), and the statuses the scheduler's activities
answered ``statusSent: true`` for: ``begin_step`` (``Processing``, the attempt's first;
``load_order`` in a ``process_order_v2`` history) and ``mark_processed`` (``Completed``)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from adapters.durable_client import bounded
from domain import timefmt
from orchestrators.names import BEGIN_STEP, MARK_PROCESSED, PUBLISH_STATUS
from orchestrators.raise_events import read_status, said_gone

log = logging.getLogger(__name__)

# ``process_order_v2``'s first activity, gone with it; its answers are still in that version's histories.
V2_LOAD_ORDER = "load_order"
# Activities that send a status themselves after their read or write, and which status.
SENT_BY_THE_ACTIVITY = {BEGIN_STEP: "Processing", V2_LOAD_ORDER: "Processing", MARK_PROCESSED: "Completed"}


def _last_event(history: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not history:
        return None
    last = history[-1]
    return {
        "type": last.get("EventType"),
        "at": history_time(last.get("Timestamp")),
        "name": last.get("FunctionName") or last.get("Name"),
    }


def history_time(text: Any) -> Any:
    """A history event's ``Timestamp`` in ``timefmt``'s form. The extension writes up to seven fractional digits and
    drops trailing zeros (``...:05Z``, ``...:05.5Z``, ``...:05.1234567Z``): shown as it is, the page held two forms
    of one kind of value (``createdTime`` is ``timefmt``'s), and a client comparing the texts put ``...:05Z`` after
    ``...:05.3Z``. One that does not read as a moment is shown as it is."""
    if not isinstance(text, str):
        return text
    try:
        return timefmt.to_text(timefmt.parse(text))
    except ValueError:
        return text


def _durable_time(moment: datetime | None) -> str | None:
    """A time of the Durable status (the SDK's reading of the extension's text) in ``timefmt``'s form. The
    extension's times are UTC: one read without an offset is taken as UTC, not refused."""
    if moment is None:
        return None
    return timefmt.to_text(moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC))


def _json(raw: Any) -> Any:
    try:
        return json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return None


def _sent(event: dict[str, Any]) -> dict[str, Any] | None:
    """The status update a completed activity shows it sent, if any."""
    name = event.get("FunctionName")
    payload = _json(event.get("Input"))
    if not isinstance(payload, dict):
        return None
    if name == PUBLISH_STATUS:
        if _json(event.get("Result")) is not None:  # its queue refused it, or the Received owed before it failed
            return None
        return {"status": payload.get("status"), "attempt": payload.get("attempt"), "reason": payload.get("reason")}
    result = _json(event.get("Result"))
    if name in SENT_BY_THE_ACTIVITY and isinstance(result, dict) and result.get("statusSent") is True:
        return {"status": SENT_BY_THE_ACTIVITY[name], "attempt": _attempt(payload), "reason": None}
    return None


def _attempt(payload: dict[str, Any]) -> Any:
    """The attempt an activity's input names: its own ``attempt``, or its agent request's (``begin_step``)."""
    request = payload.get("request")
    if "attempt" not in payload and isinstance(request, dict):
        return request.get("attempt")
    return payload.get("attempt")


def statuses_sent(instance: str, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    for event in history:
        if event.get("EventType") != "TaskCompleted":
            continue
        update = _sent(event)
        if update is not None:
            sent.append({**update, "at": history_time(event.get("Timestamp")), "instanceId": instance})
    return sent


def purgeable(instances: list[dict[str, Any]], cutoff: datetime | None) -> frozenset[str]:
    """The instances (``views.order_detail``'s ``instances``) whose history the retention timer may have purged:
    claimed before ``cutoff`` (now - ``DURABLE_HISTORY_RETENTION_DAYS``; None: never purged). Their instance is
    created at the claim, and the timer purges finished instances created before the cutoff
    (``retention.purge``). One the record shows never ran (``neverRan``: its start failed) was never the backend's
    to purge: it stays unknown to it."""
    if cutoff is None:
        return frozenset()
    found: set[str] = set()
    for entry in instances:
        claimed = entry.get("claimedBy")
        if isinstance(claimed, str) and not entry.get("neverRan") and timefmt.parse(claimed) < cutoff:
            found.add(str(entry["instanceId"]))
    return frozenset(found)


async def describe(
    client: Any, instances: list[tuple[str, str]], purged: frozenset[str] = frozenset()
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(attempts, statuses sent) for these (kind, instance id) pairs. An instance the Durable
    backend does not know is listed with ``runtimeStatus`` None: ``historyPurged`` when it is one of ``purged``
    (claimed before the retention's cutoff: finished and purged, ``retention.purge``), else never started (or
    gone another way); a status the extension answered with an error raises (``StatusUnreadable``: any code but 404
    without a status, whatever its body, an empty 500 too)."""
    attempts: list[dict[str, Any]] = []
    statuses: list[dict[str, Any]] = []
    for kind, instance in instances:
        status = await read_status(client, instance, show_history=True, show_history_output=True, show_input=True)
        if not status:
            attempts.append(
                {
                    "kind": kind,
                    "instanceId": instance,
                    "runtimeStatus": None,
                    "lastEvent": None,
                    "historyPurged": instance in purged,
                }
            )
            continue
        history = list(getattr(status, "historyEvents", None) or [])
        runtime = status.runtime_status
        attempts.append(
            {
                "kind": kind,
                "instanceId": instance,
                "runtimeStatus": getattr(runtime, "value", runtime),
                "createdTime": _durable_time(status.created_time),
                "lastUpdatedTime": _durable_time(status.last_updated_time),
                "historyEvents": len(history),
                "lastEvent": _last_event(history),
            }
        )
        statuses.extend(statuses_sent(instance, history))
    return attempts, in_time_order(statuses)


def in_time_order(statuses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The statuses sent, oldest first, by the moment their ``at`` names, not by its text: the Durable
    extension writes history timestamps with up to seven fractional digits and drops trailing zeros
    (``...:05Z``, ``...:05.5Z``), so the text sorts ``:05.5Z`` before ``:05Z``. A missing or unreadable
    ``at`` sorts last, in its text's order."""

    def moment(status: dict[str, Any]) -> tuple[int, datetime, str]:
        text = str(status.get("at") or "")
        try:
            return (0, timefmt.parse(text), text)
        except ValueError:
            return (1, timefmt.EARLIEST, text)

    return sorted(statuses, key=moment)


async def describe_or_why_not(
    client: Any, instances: list[tuple[str, str]], purged: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """``attempts`` and ``statusesSent`` (``describe``); when the Durable backend cannot be read (the
    SDK raises a plain Exception for a status it does not expect, aiohttp's errors pass through), both
    empty and ``attemptsError`` saying why: the rest of the order's page, read from Cosmos DB, is what
    the operator acts on, and is still worth showing."""
    try:
        attempts, statuses = await bounded(describe(client, instances, purged))  # all its reads: one bound
    except Exception as exc:  # any failure of the durable client: the page goes on without it
        log.warning("ops order: the Durable backend not read: %s: %s", type(exc).__name__, exc)
        return {
            "attempts": [],
            "statusesSent": [],
            "attemptsError": f"the Durable backend could not be read ({type(exc).__name__}: {exc})",
        }
    return {
        "attempts": attempts,
        "statusesSent": statuses,
        # attempts whose history the retention timer purged: the statuses they sent are not known any more
        "historiesPurged": sum(1 for attempt in attempts if attempt.get("historyPurged")),
    }


# A raised event is queued for an instance in these states (a Suspended one gets it when resumed; a
# ContinuedAsNew one, between an execution's ``continue_as_new`` and the next one's start, for its new
# execution: the extension answers 410 only for Completed, Failed, Terminated and Canceled).
_TAKES_EVENTS = frozenset({"Running", "Pending", "Suspended", "ContinuedAsNew"})


@dataclass(frozen=True)
class AttemptState:
    takes_events: bool  # the backend queues an event raised on it
    name: str | None  # its orchestrator function: the scheduler's version


async def attempt_state(client: Any, instance: str) -> AttemptState:
    """What the Durable backend says of ``instance``: whether an event raised on it is queued for it (a
    paused attempt waiting for one is Running), and which scheduler version runs it. An instance it does not
    know (a 404) takes none; a status it answered with an error (an empty 500 too) raises ``StatusUnreadable``: the
    caller cannot tell."""
    status = await bounded(read_status(client, instance))
    runtime = getattr(status, "runtime_status", None) if status else None
    name = getattr(status, "name", None) if status else None
    return AttemptState(getattr(runtime, "value", runtime) in _TAKES_EVENTS, str(name) if name else None)


_FINISHED = frozenset({"Completed", "Failed", "Terminated", "Canceled"})


async def gone_after_failed_raise(client: Any, instance: str, failure: Exception) -> bool:
    """Whether a ``raise_event`` that failed with ``failure`` definitely did not reach ``instance``: the
    extension answered 404/410, or the backend now reports it finished (Completed, Failed, Terminated).
    Anything else (a timeout, a 5xx, a reset connection, a status that cannot be read: ``StatusUnreadable``, an
    empty 500 too; or an empty one, a 404 now) is ambiguous: the extension may have queued the event, and the
    attempt may act on it."""
    if said_gone(failure):
        return True
    try:
        status = await bounded(read_status(client, instance))
    except Exception:  # the SDK raises plain Exceptions: the answer stays ambiguous
        return False
    runtime = getattr(status, "runtime_status", None) if status else None
    return getattr(runtime, "value", runtime) in _FINISHED
