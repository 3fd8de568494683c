"""An attempt the Durable backend still has in hand is not the order's failure: the supervisor leaves it.

The scheduler races every step's agent against a durable timer at the step's deadline (the record's
``completeBy``), and ends the attempt itself when the timer wins. So an attempt whose deadline passed while its
instance is still ``Pending`` (its start not delivered) or ``Running`` (its timer, its ``begin_step``, its
agent's reply not delivered yet) is one the backend is late with, not one the remote service failed: Azure
Storage's workers poll their queues with a back-off, a partition's lease moves when the app scales, the Durable
Task Scheduler throttles. Taking it then counted a failure towards ``MAX_FAILURES`` for the backend's delay (a
tenth of the messages 10-300 s late: 18 of 150 orders ``Error`` or compensated, seed 18).

The supervisor reads the instance's runtime status first (``read_statuses``, one bounded read per expired record,
all at once) and leaves such a record alone, unwritten, up to ``SUPERVISOR_BACKEND_WAIT_SECONDS`` past its
deadline and grace (``left_to_backend``): the instance then ends the step itself (the reply came: it goes on, its
writes fenced by ``lockedBy`` as ever; or its timer won: ``Completed``, and the next run counts it as before).
Nothing is ever not counted that would have been: a leave only defers the supervisor's decision to when the
backend has caught up. Past the bound the record is recovered and counted as before, saying that the backend kept
it (``backend_wait_reason``): a backend that never delivers still escalates, ``MAX_FAILURES`` bounds later. A
status that cannot be read decides nothing either: the record is recovered as before, but for an attempt that never
began (``transitions.never_began``: its last move is its claim), left as one in hand up to the same bound, because
the one read that tells whether its start was missed (``ABSENT``) failed, on the same Durable outage that may have
failed its start (``supervisor.recovery``: a missed start is released uncounted).

A held record whose ``completeBy`` was removed by hand (``unknown_deadline``) is due at once (``transitions.due_at``),
but its instance may be live, its own durable timer keeping the deadline the record lost: it is left while that
instance is ``Pending`` or ``Running`` or its status was not read, whatever ``SUPERVISOR_BACKEND_WAIT_SECONDS`` (0
too), up to its ``updatedAt`` plus the grace, the deadline horizon (``supervisor/horizon.py``) and that wait; one
whose instance ended or is unknown to the backend is taken at once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from domain.compensation import ROUND_CLAIMED, UNDO_DEPENDENCY_OPEN, UNDONE, round_never_began
from domain.records import StateRecord, last_move
from domain.states import ProcessState
from domain.timefmt import text_or_none, to_text
from domain.transitions import due_at, never_began
from observability.events import app_event
from orchestrators.raise_events import read_status
from settings import DURABLE_CALL_TIMEOUT

# Runtime statuses of an instance the backend still has to run: not started yet, or not ended.
IN_HAND = frozenset({"Pending", "Running"})
# The attempt's or round's own last move handed the record to the supervisor (``release_for_retry``,
# ``release_undo``): it ends there whatever its instance's status says, so there is nothing to wait for.
HANDED_OVER = frozenset({"StepTransientFailure", UNDO_DEPENDENCY_OPEN})
# How many status reads are in flight at once.
PARALLEL_READS = 8

# What ``read_statuses`` says of an instance besides its runtime status names: the backend answered that it does not
# know it (a 404: never created, or its start not recorded), or the read failed (an error answered, an empty 500 too;
# no answer in time). Neither is a runtime status name (``OrchestrationRuntimeStatus``).
ABSENT = "Absent"
UNREAD = "Unread"

# instance id -> its runtime status name, ``ABSENT`` or ``UNREAD``; None: not read
InstanceStatuses = Mapping[str, str | None]


def status_name(status: Any) -> str | None:
    """The runtime status name of a ``DurableOrchestrationStatus`` (None: no instance)."""
    runtime = getattr(status, "runtime_status", None)
    if runtime is None:
        return None
    return str(getattr(runtime, "name", runtime))


def wait_ends(
    record: StateRecord, grace: timedelta, wait: timedelta, unknown: timedelta = timedelta(0)
) -> datetime | None:
    """When the supervisor stops waiting for ``record``'s attempt (None: it has no deadline). One whose deadline was
    removed by hand (``unknown_deadline``): ``unknown`` after its last write, then the grace and the wait; the
    supervisor passes ``supervisor.horizon.deadline_horizon``, beyond any deadline its instance can hold."""
    due = due_at(record, grace)
    if due is not None and unknown_deadline(record):
        due += unknown
    return None if due is None else due + wait


def unknown_deadline(record: StateRecord) -> bool:
    """``record`` is held (an attempt's or a round's) and has no ``completeBy``: no writer of the app leaves one so, a
    hand edit removed it. Due at once (``transitions.due_at``), but the instance holding it may be live: its own
    durable timer keeps the deadline the record lost, and ends the step at it."""
    return record.locked_by is not None and record.complete_by is None


def in_backends_hands(record: StateRecord, status: str | None) -> bool:
    """``record``'s attempt is one its Durable instance has still to run: ``Pending`` or ``Running``, and its
    last move not a release by the attempt itself."""
    if status not in IN_HAND or record.locked_by is None:
        return False
    move = last_move(record)
    return move is None or move.event not in HANDED_OVER


def start_unknown(record: StateRecord, status: str | None) -> bool:
    """``record``'s attempt or round never began and its instance's status could not be read: whether its start was
    missed (``ABSENT``) or is still in the backend's hands is not known yet."""
    return status == UNREAD and (never_began(record) or round_never_began(record))


def left_to_backend(
    record: StateRecord,
    status: str | None,
    now: datetime,
    grace: timedelta,
    wait: timedelta,
    unknown: timedelta = timedelta(0),
) -> bool:
    """Whether the supervisor leaves ``record`` (past due) alone this run: its instance still in the backend's
    hands (``in_backends_hands``), or an attempt that never began whose status could not be read
    (``start_unknown``), and ``SUPERVISOR_BACKEND_WAIT_SECONDS`` not over. One whose deadline was removed by hand
    (``unknown_deadline``) is left while its instance is in the backend's hands or its status was not read, even
    with no backend wait (its deadline may be a day away, a review's), up to ``unknown`` past its last write
    (``wait_ends``): taken at once only when its instance is gone (ended, or unknown to the backend)."""
    if unknown_deadline(record):
        if not (in_backends_hands(record, status) or status == UNREAD):
            return False
    elif wait <= timedelta(0) or not (in_backends_hands(record, status) or start_unknown(record, status)):
        return False
    ends = wait_ends(record, grace, wait, unknown)
    return ends is not None and now < ends


def note_left(
    record: StateRecord,
    status: str | None,
    now: datetime,
    grace: timedelta,
    wait: timedelta,
    unknown: timedelta = timedelta(0),
) -> None:
    """Logs that the supervisor left ``record``'s attempt or round to its instance this run."""
    ends = wait_ends(record, grace, wait, unknown)
    app_event(
        "SupervisorLeftToBackend",
        f"order {record.order_id}: {record.locked_by} is past its deadline and its instance is still {status}: "
        f"left to it, not counted (until {to_text(ends) if ends else '?'})",
        orderId=record.order_id,
        instanceId=record.locked_by,
        attempt=record.attempt,
        runtimeStatus=status,
        overdueSeconds=(now - record.complete_by).total_seconds() if record.complete_by else None,
        waitEnds=text_or_none(ends),
    )


def _at(record: StateRecord) -> str:
    """Where the attempt or round was when the backend kept it: its step; for a round past its claim (a round's
    record has no current step), the undo it was at (its newest entry not undone: rounds walk the log newest
    first), or its end when every entry is undone; else its start."""
    if record.current_step:
        return record.current_step
    move = last_move(record)
    if record.process_state is ProcessState.COMPENSATING and move is not None and move.event != ROUND_CLAIMED:
        pending = [e for e in record.compensation if e.outcome != UNDONE]
        return f"the undo of {max(pending, key=lambda e: e.seq).step}" if pending else "its end"
    return "its start"


def backend_wait_reason(record: StateRecord, status: str | None, now: datetime) -> str:
    """``lastError`` of an attempt or round taken past the wait: the backend kept it, not a remote service."""
    late = (now - record.complete_by).total_seconds() if record.complete_by is not None else 0.0
    where = _at(record)
    return (
        f"the Durable backend had not run {record.locked_by} ({where}) {late:.0f} s past its deadline "
        f"(instance {status}): taken after SUPERVISOR_BACKEND_WAIT_SECONDS"
    )


async def read_statuses(client: Any, instance_ids: Iterable[str]) -> dict[str, str | None]:
    """The runtime status of each instance, read all at once (``PARALLEL_READS`` in flight), within
    ``DURABLE_CALL_TIMEOUT`` in all: ``ABSENT`` for an instance the backend does not know (a 404, ``read_status``),
    ``UNREAD`` for one whose read failed (any other error, whatever its body: ``StatusUnreadable``) or did not answer
    in time."""
    wanted = list(dict.fromkeys(instance_ids))
    if not wanted:
        return {}
    gate = asyncio.Semaphore(PARALLEL_READS)

    async def read(instance: str) -> str:
        async with gate:
            return status_name(await read_status(client, instance)) or ABSENT

    tasks = {instance: asyncio.ensure_future(read(instance)) for instance in wanted}
    done, pending = await asyncio.wait(tasks.values(), timeout=DURABLE_CALL_TIMEOUT.total_seconds())
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending)  # cancelled: nothing left running after the run
    statuses: dict[str, str | None] = {}
    unread = 0
    for instance, task in tasks.items():
        if task in done and task.exception() is None:
            statuses[instance] = task.result()
        else:
            statuses[instance] = UNREAD
            unread += 1
    if unread:
        app_event(
            "SupervisorStatusUnread",
            f"{unread} of {len(wanted)} instance statuses not read: their records are recovered as at their deadline "
            "(an attempt that never began: left to a later run, up to SUPERVISOR_BACKEND_WAIT_SECONDS)",
            logging.WARNING,
            unread=unread,
            read=len(wanted) - unread,
        )
    return statuses
