"""Which dependency an expired attempt or compensation round was waiting on, and the compensation
side's move for waiting an outage out. Pure: no I/O, no clock (``supervisor/outage.py`` reads the
health documents and decides)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from domain.circuit import waiting_reason
from domain.compensation import UNDO_DEPENDENCY_OPEN, UNDONE, ensure_compensation_owner, is_stuck_round
from domain.errors import IllegalTransition
from domain.records import StateRecord, last_move
from domain.states import ProcessState
from domain.timefmt import to_text
from domain.transitions import CIRCUIT_OPEN_MARK, NO_GRACE, STILL_WORKING, SUPERVISOR
from domain.workflow import agent


@dataclass(frozen=True)
class InFlight:
    """The remote service an attempt or round was calling, and since when.

    ``met_open``: the record itself says that the call was refused by the service's open circuit after ``since`` (a
    round's own ``UndoDependencyOpen``): the circuit was open during it, whatever clock dated its closing in the health
    document (the closing agent's, seconds behind the supervisor's that dated the claim)."""

    dependency: str
    since: datetime
    met_open: bool = False


def forward_in_flight(record: StateRecord) -> InFlight | None:
    """The service of the step the expired attempt was running (None: between steps); ``met_open`` when the attempt
    released the record on its agent's refusal by the service's open circuit (``transitions.CIRCUIT_OPEN_MARK``)."""
    if record.current_step is None or record.current_step not in record.steps:
        return None
    state = record.steps[record.current_step]
    return InFlight(agent(state.agent).service, state.started_at, _released_marked(record, CIRCUIT_OPEN_MARK))


def failed_transiently(record: StateRecord) -> bool:
    """Whether the expired attempt ended on a transient failure of its step: its agent's calls failed until its
    tries ran out (``StepTransientFailure``, the attempt's own last move), not a deadline or a lost reply."""
    move = last_move(record)
    return move is not None and move.event == "StepTransientFailure" and move.by == record.locked_by


def still_working(record: StateRecord) -> bool:
    """Whether the expired attempt ended so (``failed_transiently``) with its last try answered "still working on an
    earlier call with this key" by the step's service (``transitions.STILL_WORKING`` in the detail's step part): the
    step is being done there, whatever other orders' calls did meanwhile."""
    return _released_marked(record, STILL_WORKING)


def _released_marked(record: StateRecord, mark: str) -> bool:
    """Whether the expired attempt ended on a transient failure (``failed_transiently``) whose detail's step part
    carries ``mark`` (``transitions.release_for_retry``: ``<step><marks>: <error>``)."""
    move = last_move(record)
    return failed_transiently(record) and move is not None and mark in move.detail.partition(": ")[0]


def undo_in_flight(record: StateRecord) -> InFlight | None:
    """The service of the undo a stuck round was running: the newest entry not undone yet (rounds
    walk the log newest first), since the round was claimed."""
    pending = [e for e in record.compensation if e.outcome != UNDONE]
    if record.locked_by is None or not pending:
        return None
    entry = max(pending, key=lambda e: e.seq)
    claimed = [h.at for h in record.history if h.event == "CompensationClaimed"]
    move = last_move(record)
    # the round released its record on its undo's refusal by the open circuit (``release_undo``): proof of the outage
    met_open = move is not None and (move.event, move.by) == (UNDO_DEPENDENCY_OPEN, record.locked_by)
    return InFlight(agent(entry.agent).service, claimed[-1] if claimed else record.updated_at, met_open)


def is_waiting_out_outage(record: StateRecord) -> bool:
    """A Compensating record released to wait an outage out (``wait_compensation_out``, ``release_round_to_wait``): no
    round holds it, and its wait (bounded by ``MAX_OUTAGE_WAIT_MINUTES`` from ``outageWaitSince``) lasts until a
    round is claimed and moves on or counts a failure. Not a stuck round (``compensation.is_stuck_round``)."""
    return (
        record.process_state is ProcessState.COMPENSATING
        and record.locked_by is None
        and record.outage_wait_since is not None
    )


def wait_compensation_out(
    record: StateRecord,
    now: datetime,
    until: datetime,
    dependency: str,
    since: datetime,
    grace: timedelta = NO_GRACE,
    *,
    still_working: bool = False,
) -> StateRecord:
    """A round stuck on an open dependency: released (``lockedBy`` null, so the next claim does not
    count it as a failed round), not claimed again before ``until``. ``grace``: the supervisor's
    (``transitions.past_due``)."""
    if not is_stuck_round(record, now, grace):
        raise IllegalTransition(f"order {record.order_id}: no stuck compensation round to release")
    reason = waiting_reason(dependency, still_working=still_working)
    return record.with_changes(
        now,
        "OutageWait",
        SUPERVISOR,
        f"round {record.attempt}: {reason}; next round not before {to_text(until)}",
        locked_by=None,
        complete_by=until,
        last_error=reason,
        outage_wait_since=since,
    )


def release_round_to_wait(
    record: StateRecord,
    owner: str,
    now: datetime,
    until: datetime,
    dependency: str,
    since: datetime,
    *,
    still_working: bool = False,
) -> StateRecord:
    """A round whose undo used up its tries on transient failures while the undo's service had an outage:
    the round itself (``owner``) releases the record to wait it out, as the supervisor releases a stuck one
    (``wait_compensation_out``): ``lockedBy`` null, not counted as a failed round, no round before ``until``."""
    ensure_compensation_owner(record, owner)
    reason = waiting_reason(dependency, still_working=still_working)
    return record.with_changes(
        now,
        "OutageWait",
        owner,
        f"round {record.attempt}: {reason}; next round not before {to_text(until)}",
        locked_by=None,
        complete_by=until,
        last_error=reason,
        outage_wait_since=since,
    )
