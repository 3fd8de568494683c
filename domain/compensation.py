"""The compensation log and the compensation moves of a state record. Pure: no I/O, no clock.

The log (``StateRecord.compensation``) is appended by the same fenced write that records a
compensable step's result (``complete_step_logged``): a step's result and its undo information are
one document replace, never two. Each entry carries references only (reservation id; charge id and
amount), never card data.

Moves (the state machine of ``docs/design.md``, with its two additions to the plain pattern:
``Pending -> Compensating`` for a cancellation between two attempts, when earlier attempts may already
have completed compensable steps, and ``CompensationFailed -> Compensating`` when an operator runs
compensation again after a fix)::

    Pending | Processing | Error | CompensationFailed --enter_compensation--> Compensating (unowned, due)
    Compensating (due) --claim_compensation--> Compensating, lockedBy = "<order>:compensate:<round>"
    Compensating (stuck round, due) --back_off_stuck_round--> Compensating (unowned, due after a backoff)
    Compensating (an undo met an open circuit) --release_undo--> Compensating, due to the supervisor now
    Compensating --finish_compensation--> Compensated
    Compensating --fail_compensation / rounds exhausted--> CompensationFailed
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from domain import review, transitions
from domain.circuit import is_waiting_reason
from domain.compensation_policy import Action, ReviewPolicy, Situation, Trigger, decide_compensation, review_outcome
from domain.errors import FencingLost, IllegalTransition
from domain.ids import COMPENSATION_MARKER, idempotency_key
from domain.records import CompensationEntry, HistoryEntry, PaymentReceived, StateRecord, inexact_integer
from domain.states import ProcessState, StepStatus
from domain.timefmt import to_text
from domain.workflow import STEPS, WORKFLOW, Step, StepKind, step

UNDONE = "Undone"
# The history event of a stuck round released to wait out its backoff (``back_off_stuck_round``).
ROUND_BACKED_OFF = "CompensationRetryScheduled"
ROUND_CLAIMED = "CompensationClaimed"
# history event: the supervisor released a round the Durable backend never had (``release_missed_round``)
ROUND_START_MISSED = "CompensationStartMissed"
# history event: the run that claimed a round released it, its start never tried (``release_untried_round``)
ROUND_NOT_TRIED = "CompensationStartNotTried"
FAILED = "Failed"

# CompensationFailed is re-entered only by an operator, after fixing what made the undo fail.
ENTERABLE_FROM = frozenset(
    {ProcessState.PENDING, ProcessState.PROCESSING, ProcessState.ERROR, ProcessState.COMPENSATION_FAILED}
)


# --- identifiers ----------------------------------------------------------------------------------


COMPENSATION_REQUESTED = "CompensationRequested"  # the history event of ``enter_compensation``


def compensation_instance_id(order_id: str, round_number: int) -> str:
    """One compensation orchestration per order and round (a round is the record's ``attempt``).
    ``domain.ids.instance_order_id`` recognises it (keep the two in step)."""
    return f"{order_id}:{COMPENSATION_MARKER}:{round_number}"


def undo_idempotency_key(order_id: str, step_name: str) -> str:
    """Differs from the forward key and is the same in every round: an undo is never done twice."""
    return f"{idempotency_key(order_id, step_name)}:undo"


def undo_request_id(instance: str, step_name: str, agent: str, try_number: int) -> str:
    return f"{instance}:{step_name}:{agent}:undo:{try_number}"


# --- facts the decision function needs -------------------------------------------------------------


def failed_under_review(record: StateRecord) -> str | None:
    """Returns the step the attempt paused on for an operator's review, or None.

    Paused means its ``ReviewRequested`` is the last write, or a decision on it is left
    (``review.decision_left``). The step still says in progress, since it may run again, but its outcome is
    known: its agent refused it, so there is nothing to undo and nothing in flight."""
    pending = review.pending_review(record)
    if pending is not None:
        return pending.step
    left = review.decision_left(record)
    return left.step if left is not None else None


def _outcome_unknown(record: StateRecord, name: str, reviewed: str | None) -> bool:
    state = record.steps.get(name)
    return state is not None and state.status is StepStatus.IN_PROGRESS and name != reviewed


def pivot_passed(record: StateRecord) -> bool:
    """The pivot step succeeded, or was started and its outcome is unknown (assume it happened)."""
    reviewed = failed_under_review(record)
    for s in WORKFLOW:
        if s.kind is StepKind.PIVOT:
            state = record.steps.get(s.name)
            if state is not None and state.status is StepStatus.SUCCEEDED:
                return True
            if _outcome_unknown(record, s.name, reviewed):
                return True
    return False


def unknown_outcome_steps(record: StateRecord) -> list[str]:
    """Compensable steps that were started and neither succeeded nor failed (no log entry). A step
    paused for review after its agent refused it (``failed_under_review``) has a known outcome."""
    logged = {e.step for e in record.compensation}
    reviewed = failed_under_review(record)
    return [
        s.name
        for s in WORKFLOW
        if s.kind is StepKind.COMPENSABLE and s.name not in logged and _outcome_unknown(record, s.name, reviewed)
    ]


def undo_pending(record: StateRecord) -> bool:
    """True if some logged entry is not undone, or some compensable step's outcome is unknown."""
    return any(e.outcome != UNDONE for e in record.compensation) or bool(unknown_outcome_steps(record))


# --- the log ----------------------------------------------------------------------------------------


def _undo_action(the_step: Step) -> str:
    if the_step.undo_action is None:
        raise ValueError(f"step {the_step.name} is not compensable: it has no undo action")
    return the_step.undo_action


def log_entry(record: StateRecord, step_name: str, result: dict[str, Any], now: datetime) -> CompensationEntry:
    the_step = step(step_name)
    state = record.steps[step_name]
    return CompensationEntry(
        seq=len(record.compensation) + 1,
        step=step_name,
        agent=state.agent,
        undo_action=_undo_action(the_step),
        data={k: result[k] for k in the_step.undo_data if k in result},
        attempt=record.attempt,
        at=now,
    )


def complete_step_logged(
    record: StateRecord, owner: str, step_name: str, result: dict[str, Any], next_deadline: datetime, now: datetime
) -> StateRecord:
    """``transitions.complete_step`` plus, for a compensable step, its log entry: one new record,
    so one fenced write. A re-run of the same completion does not append a second entry."""
    done = transitions.complete_step(record, owner, step_name, result, next_deadline, now)
    if step(step_name).kind is not StepKind.COMPENSABLE or any(e.step == step_name for e in done.compensation):
        return done
    return replace(done, compensation=[*done.compensation, log_entry(done, step_name, result, now)])


def _unknown_outcome_entries(record: StateRecord, now: datetime) -> list[CompensationEntry]:
    """Returns the log plus an undo entry per agent of each compensable step whose outcome is unknown.

    The undo names the forward idempotency key, and the service undoes whatever that key did (nothing, if
    nothing). Any agent the step was started with (``StepState.agents``) may have done it, so each is asked, the
    one that last had the step first (its entry the newest); an agent the step never went to is not, so its outage
    cannot fail the compensation. A record without ``agents`` asks every agent the step can use."""
    entries = list(record.compensation)
    for name in unknown_outcome_steps(record):
        the_step = step(name)
        undo_action = _undo_action(the_step)
        state = record.steps[name]
        last = state.agent
        usable = [last, *(a for a in (the_step.agent, the_step.fallback_agent) if a and a != last)]
        candidates = usable if state.agents is None else [a for a in usable if a in state.agents] or usable
        # the agent that last had the step is logged last: the walk (newest first) undoes it first, as the reverse of
        # the forward actions; it is the likeliest to have acted (logged first, an earlier agent's undo refused for
        # good stopped the round before it, the customer's money held at the provider that took it)
        for agent_name in [*(a for a in candidates if a != last), *(a for a in candidates if a == last)]:
            entries.append(
                CompensationEntry(
                    seq=len(entries) + 1,
                    step=name,
                    agent=agent_name,
                    undo_action=undo_action,
                    data={"outcomeUnknown": True, "forwardIdempotencyKey": idempotency_key(record.order_id, name)},
                    attempt=record.attempt,
                    at=now,
                )
            )
    return entries


# --- moves -----------------------------------------------------------------------------------------


def enter_compensation(
    record: StateRecord,
    by: str,
    reason: str,
    now: datetime,
    *,
    owner: str | None = None,
    failed_step: str | None = None,
    not_before: datetime | None = None,
) -> StateRecord:
    """Pending | Processing | Error -> Compensating, unowned and due at ``not_before`` (default now):
    whoever claims it next (``claim_compensation``) starts round ``attempt + 1``. ``owner``: the
    forward attempt asking for it (fenced). The forward attempt loses the record here."""
    if owner is not None:
        transitions.ensure_owner(record, owner)
    if record.process_state not in ENTERABLE_FROM:
        raise IllegalTransition(f"order {record.order_id}: {record.process_state} cannot start compensation")
    steps = dict(record.steps)
    error = reason
    if failed_step is None:  # a cancel during a review pause: the reviewed step failed for good too
        failed_step = failed_under_review(record)
        error = f"refused by its agent, paused for review; then {reason}"
    if failed_step is not None and failed_step in steps:  # failed for good: no side effect to undo
        steps[failed_step] = replace(steps[failed_step], status=StepStatus.FAILED, finished_at=now, error=error)
    marked = replace(record, steps=steps)
    if pivot_passed(marked):
        raise IllegalTransition(f"order {record.order_id}: past the pivot, nothing may be undone")
    due = max(now, not_before) if not_before is not None else now
    return marked.with_changes(
        now,
        COMPENSATION_REQUESTED,
        by,
        reason,
        process_state=ProcessState.COMPENSATING,
        locked_by=None,
        complete_by=due,
        current_step=None,
        failure_count=0,
        last_error=reason,
        compensation=_unknown_outcome_entries(marked, now),
        outage_wait_since=None,  # a forward wait ends here: the rounds' waits have their own bound
        payment_wait_since=None,
        starts_missed=0,  # and the rounds' missed starts their own run, as their failures (failureCount 0)
    )


def cancellation_not_before(record: StateRecord) -> datetime | None:
    """Returns when a cancellation's compensation is due (``enter_compensation``'s ``not_before``; None: now).

    With a step in flight, at its deadline, since its agent starts no call after it. An attempt paused for
    review, or with a review decided but not acted on, has no call in flight: due now, not at its ``completeBy``
    (the review deadline, up to a day away). Used by a client's ``CancelOrder`` and an operator's cancel."""
    in_flight = (
        record.process_state is ProcessState.PROCESSING
        and record.current_step is not None
        and review.pending_review(record) is None
        and review.decision_left(record) is None  # decided, not acted on yet: no call in flight either
    )
    return record.complete_by if in_flight else None


def is_compensation_due(record: StateRecord, now: datetime, grace: timedelta = transitions.NO_GRACE) -> bool:
    """True if a Compensating record's next round is due.

    Unowned: at its ``completeBy``. Held by a round: once ``completeBy`` passed ``grace`` ago
    (``transitions.past_due``)."""
    return record.process_state is ProcessState.COMPENSATING and (
        record.complete_by is None or transitions.past_due(record, now, grace)
    )


def is_stuck_round(record: StateRecord, now: datetime, grace: timedelta = transitions.NO_GRACE) -> bool:
    """True if a round still holds the Compensating record ``grace`` past its deadline.

    The round's orchestration died, an undo missed its deadline, or its start was never made. The supervisor
    backs it off (``back_off_stuck_round``) or releases it to wait out an outage. A released round
    (``lockedBy`` null) is not stuck."""
    return record.locked_by is not None and is_compensation_due(record, now, grace)


def _round_error(record: StateRecord) -> str | None:
    """Returns what a round met (``lastError``), or None when it only repeats why the order is compensated.

    Rounds that died without writing an error leave ``compensation_cause`` there. The test is equality, not a
    prefix: a round's error may begin with a short cause ("payment"). Both are cut to the same limit
    (``ERROR_LIMIT`` = ``DETAIL_LIMIT``), so equal text compares equal."""
    error, cause = record.last_error, compensation_cause(record)
    if error is None or error == cause:
        return None
    return error


def claim_compensation(
    record: StateRecord,
    now: datetime,
    start_grace: timedelta,
    max_rounds: int,
    by: str,
    grace: timedelta = transitions.NO_GRACE,
) -> StateRecord:
    """A due Compensating record gets the next round: ``lockedBy`` = that round's instance id,
    ``completeBy`` = now + start grace. A round that was owned and missed its deadline counts as a
    failure; at ``max_rounds`` failures the record is CompensationFailed (an operator must act)."""
    if not is_compensation_due(record, now, grace):
        raise IllegalTransition(f"order {record.order_id}: no compensation due (lockedBy={record.locked_by!r})")
    failures = record.failure_count + (1 if record.locked_by is not None else 0)
    if failures >= max_rounds:
        reason = f"compensation did not finish in {failures} rounds; last: {_round_error(record) or 'deadline missed'}"
        return record.with_changes(
            now,
            "CompensationFailed",
            by,
            reason,
            process_state=ProcessState.COMPENSATION_FAILED,
            locked_by=None,
            complete_by=None,
            failure_count=failures,
            last_error=reason,
        )
    round_number = record.attempt + 1
    owner = compensation_instance_id(record.order_id, round_number)
    return record.with_changes(
        now,
        ROUND_CLAIMED,
        by,
        owner,
        locked_by=owner,
        attempt=round_number,
        complete_by=now + start_grace,
        failure_count=failures,
        # a stuck round counted as a failure ends the wait (a released, waiting one keeps it)
        outage_wait_since=None if record.locked_by is not None else record.outage_wait_since,
        last_error=_round_start_error(record),
    )


def _round_start_error(record: StateRecord) -> str | None:
    """The ``lastError`` a claimed round starts with: why the order is compensated (``compensation_cause``).

    What an earlier round met is not this round's: kept, it was named "last" when this round then died without a
    word ("did not finish in N rounds; last: <an earlier round's open circuit>", the last round's undo perhaps done).
    Nor is a wait's reason (a round that then gets stuck is not failed "waiting for ..."). A history that no longer
    holds the cause keeps what the record says, a wait's reason aside."""
    cause = compensation_cause(record)
    if cause is not None:
        return cause
    return None if is_waiting_reason(record.last_error) else record.last_error


def back_off_stuck_round(
    record: StateRecord,
    now: datetime,
    backoff: timedelta,
    max_rounds: int,
    by: str,
    grace: timedelta = transitions.NO_GRACE,
) -> StateRecord:
    """Counts a stuck round as a failure and releases it until ``now + backoff``.

    The next round waits as a forward retry does, instead of calling the failing service again at once; the claim
    after it does not count the round again. At ``max_rounds`` failures the record is CompensationFailed."""
    if not is_stuck_round(record, now, grace):
        raise IllegalTransition(f"order {record.order_id}: no stuck compensation round to back off")
    failures = record.failure_count + 1
    if failures >= max_rounds:
        return claim_compensation(record, now, timedelta(0), max_rounds, by, grace)  # CompensationFailed
    until = now + backoff
    return record.with_changes(
        now,
        ROUND_BACKED_OFF,
        by,
        f"round {record.attempt} did not finish (failure {failures} of {max_rounds}); "
        f"next round not before {to_text(until)}",
        locked_by=None,
        complete_by=until,
        failure_count=failures,
        outage_wait_since=None,
    )


def round_never_began(record: StateRecord) -> bool:
    """The round holding ``record`` made no move of its own: its last move (side notes aside) is its claim
    (``claim_compensation``, whose detail names the round's instance). It began no undo."""
    return transitions.last_move_is_own_claim(record, ProcessState.COMPENSATING, ROUND_CLAIMED)


def round_start_missable(record: StateRecord) -> bool:
    """Whether a round whose instance the Durable backend does not know may be released uncounted
    (``release_missed_round``): it never began, and fewer than ``MAX_STARTS_MISSED`` starts were missed in a row."""
    return round_never_began(record) and record.starts_missed < transitions.MAX_STARTS_MISSED


def release_missed_round(
    record: StateRecord, now: datetime, backoff: timedelta, by: str, grace: timedelta = transitions.NO_GRACE
) -> StateRecord:
    """Releases, uncounted, a stuck round the Durable backend never had (a 404 for its instance).

    The round began no undo, so ``failureCount`` is unchanged; ``startsMissed`` + 1 and it is due after
    ``backoff``. The next claim uses a new instance id, so the failed start, should it land after all, is
    fenced. Refused past ``MAX_STARTS_MISSED`` in a row (then ``back_off_stuck_round`` counts it), as
    ``transitions.start_missed`` for a forward attempt."""
    if not is_stuck_round(record, now, grace) or not round_start_missable(record):
        raise IllegalTransition(f"order {record.order_id}: no round start missed to release ({record.locked_by!r})")
    until = now + backoff
    starts = record.starts_missed + 1
    return record.with_changes(
        now,
        ROUND_START_MISSED,
        by,
        f"round {record.attempt}: the Durable backend never had {record.locked_by}: its start failed "
        f"({starts} in a row); next round not before {to_text(until)}",
        locked_by=None,
        complete_by=until,
        starts_missed=starts,
    )


def release_untried_round(record: StateRecord, owner: str, now: datetime, by: str, reason: str) -> StateRecord:
    """Releases a round whose start the claiming run never tried, due again at once and uncounted.

    Nothing failed, so no backoff and no counter moves; the next claim uses a new instance id. Raises
    ``FencingLost`` unless ``owner`` holds the record, and ``IllegalTransition`` if it began an undo
    (``round_never_began``). The attempt's equivalent is ``transitions.release_untried``."""
    ensure_compensation_owner(record, owner)
    if not round_never_began(record):
        raise IllegalTransition(f"order {record.order_id}: {owner} moved since its claim, not released")
    return record.with_changes(
        now,
        ROUND_NOT_TRIED,
        by,
        f"round {record.attempt}: {owner} was never started ({reason}); due again now, not counted",
        locked_by=None,
        complete_by=now,
    )


def ensure_compensation_owner(record: StateRecord, owner: str) -> None:
    """Raises ``FencingLost`` unless ``owner``'s round holds the Compensating record."""
    if record.locked_by != owner or record.process_state is not ProcessState.COMPENSATING:
        raise FencingLost(record.order_id, owner, record.locked_by)


def _entry(record: StateRecord, seq: int) -> CompensationEntry:
    for e in record.compensation:
        if e.seq == seq:
            return e
    raise IllegalTransition(f"order {record.order_id}: no compensation entry {seq}")


def _with_entry(record: StateRecord, entry: CompensationEntry) -> list[CompensationEntry]:
    return [entry if e.seq == entry.seq else e for e in record.compensation]


def begin_undo(
    record: StateRecord, owner: str, seq: int, request: str, deadline: datetime, now: datetime
) -> StateRecord:
    """Records the undo in flight and its deadline (the supervisor restarts a round that misses it)."""
    ensure_compensation_owner(record, owner)
    entry = _entry(record, seq)
    return record.with_changes(
        now,
        "UndoStarted",
        owner,
        f"entry {seq}: {entry.undo_action} {entry.step} via {entry.agent} ({request}), deadline {to_text(deadline)}",
        complete_by=deadline,
        starts_missed=0,  # the round began: its start was not missed
    )


# The history event of a round holding its record through the backoff after an undo's transient failure
UNDO_RETRY_SCHEDULED = "UndoRetryScheduled"


def hold_undo(
    record: StateRecord, owner: str, seq: int, next_try: datetime, complete_by: datetime, now: datetime
) -> StateRecord:
    """Holds the record while the round backs off after a transient failure of entry ``seq``'s undo.

    ``completeBy`` moves to ``complete_by``, past ``next_try``, so the supervisor does not take the waiting round
    for a stuck one, yet still finds it if it dies in the wait."""
    ensure_compensation_owner(record, owner)
    entry = _entry(record, seq)
    return record.with_changes(
        now,
        UNDO_RETRY_SCHEDULED,
        owner,
        f"entry {seq}: {entry.undo_action} {entry.step} via {entry.agent} failed transiently; "
        f"next try not before {to_text(next_try)}",
        complete_by=complete_by,
    )


# The history event of a round whose undo met an open circuit (no call made), releasing its record to the supervisor
UNDO_DEPENDENCY_OPEN = "UndoDependencyOpen"


def release_undo(
    record: StateRecord, owner: str, seq: int, reason: str, now: datetime, grace: timedelta = transitions.NO_GRACE
) -> StateRecord:
    """Ends the round after entry ``seq``'s undo met an open circuit (no call made), due to the supervisor now.

    ``completeBy`` is now less ``grace``, as ``transitions.release_for_retry`` for an attempt. ``lockedBy`` stays
    the round's, so the supervisor sees a round stuck on that dependency (``domain.outage.undo_in_flight``) and
    lets it wait out the outage uncounted (``wait_compensation_out``). ``lastError`` says why, in case it is
    counted after all."""
    ensure_compensation_owner(record, owner)
    entry = _entry(record, seq)
    return record.with_changes(
        now,
        UNDO_DEPENDENCY_OPEN,
        owner,
        f"entry {seq}: {entry.undo_action} {entry.step} via {entry.agent}: {reason}",
        complete_by=now - grace,
        last_error=reason,
    )


# The longest reference an undo's answer may leave on the record (a provider's refund or release id).
UNDO_REFERENCE_MAX = 128


def undo_result(step_name: str, result: Any) -> dict[str, Any] | None:
    """Returns the part of an undo's answer its log entry keeps; None if the answer is not an object.

    Only the step's ``undo_result_data`` fields (e.g. ``refundId``, ``amountCents``), each as text of at most
    ``UNDO_REFERENCE_MAX`` characters or an exactly stored integer (never a bool), else null. Anything else is
    dropped, so an answer cannot grow the record."""
    if not isinstance(result, dict):
        return None
    return {k: _kept(result[k]) for k in step(step_name).undo_result_data if k in result}


def _kept(value: Any) -> str | int | None:
    if isinstance(value, str):
        return value[:UNDO_REFERENCE_MAX]
    if isinstance(value, int) and not isinstance(value, bool) and inexact_integer(value) is None:
        return value  # a count the store keeps exactly (one past 2**53 would be rounded, or kept as null)
    return None


def record_undo(
    record: StateRecord,
    owner: str,
    seq: int,
    next_deadline: datetime,
    now: datetime,
    result: Any = None,
) -> StateRecord:
    """Marks an entry undone with what the undo answered (``result``, kept as ``undo_result``: what it
    actually did, e.g. a refund of nothing). Idempotent: an entry already undone keeps its first time
    and answer."""
    ensure_compensation_owner(record, owner)
    entry = _entry(record, seq)
    if entry.outcome != UNDONE:
        entry = replace(entry, outcome=UNDONE, outcome_at=now, error=None, undo_result=undo_result(entry.step, result))
    return record.with_changes(
        now,
        "UndoSucceeded",
        owner,
        f"entry {seq}: {entry.undo_action} {entry.step}",
        complete_by=next_deadline,
        compensation=_with_entry(record, entry),
        outage_wait_since=None,  # the round moved on: a later wait is a new one
    )


# The history event of an operator's word that entries whose undo failed were undone by hand (``settle_by_hand``)
UNDONE_BY_HAND = "UndoneByHand"


def settle_by_hand(
    record: StateRecord, seqs: tuple[int, ...], operator: str, reason: str, now: datetime
) -> StateRecord:
    """Marks entries ``seqs`` undone by ``operator`` (``undoneBy``), keeping each entry's error.

    The next round then skips them and undoes the rest. This is the way past an undo that can never succeed: a
    provider's refusal is recorded against the undo key, the same in every round, or the rounds keep dying. Only
    for a ``CompensationFailed`` order and entries not yet undone (else ``IllegalTransition``, nothing written).
    Applied in the same write as the compensate that hands the order back
    (``supervisor.operator.compensate_action``)."""
    if not seqs:
        return record
    if record.process_state is not ProcessState.COMPENSATION_FAILED:
        raise IllegalTransition(
            f"order {record.order_id} is {record.process_state}: only the entries of a CompensationFailed order can "
            "be undone by hand"
        )
    entries = {e.seq: e for e in record.compensation}
    settled: list[CompensationEntry] = []
    for seq in sorted(set(seqs)):
        entry = entries.get(seq)
        if entry is None:
            raise IllegalTransition(f"order {record.order_id}: no compensation entry {seq}")
        if entry.outcome == UNDONE:
            raise IllegalTransition(
                f"order {record.order_id}: entry {seq} ({entry.undo_action} of {entry.step}) is already undone"
            )
        settled.append(replace(entry, outcome=UNDONE, outcome_at=now, undone_by=operator))
    log = record.compensation
    for entry in settled:
        log = [entry if e.seq == entry.seq else e for e in log]
    named = ", ".join(f"{e.seq} ({e.undo_action} of {e.step} via {e.agent})" for e in settled)
    detail = f"entries {named} undone by hand: {reason}"
    return record.with_changes(now, UNDONE_BY_HAND, operator, detail, compensation=log)


def not_undone(record: StateRecord) -> list[int]:
    """The entries of the log not undone yet (failed, or not tried), oldest first: what is still held."""
    return [e.seq for e in record.compensation if e.outcome != UNDONE]


# The CompensationFailed alert's next step (``nextStep``), and the warning put before it when the undo may have been
# done after all (``undoOutcomeUnknown``: transient failures or no reply, never a refusal). Undoing it by hand then
# would refund twice; compensating again asks under the same undo key, and the provider answers what it did.
FAILED_NEXT_STEP = (
    "fix the service and run the operator's compensate again, or undo the named entry by hand and run "
    "compensate with it in undoneByHand (its provider refuses the same undo key again)"
)
OUTCOME_UNKNOWN_WARNING = (
    "no answer said this undo was refused, and it may have been done (a call timed out while the provider went on "
    "with it, an agent died after its call, a reply never came): ask the provider whether it was done before undoing "
    "it by hand, or compensate again (the same undo key: the provider answers what it did)"
)
# what tries_used_up (contracts.activities) appends to an undo's error: its tries failed transiently
_TRANSIENT_TRIES = "(transient; "


def undo_outcome_unknown(record: StateRecord, failure: HistoryEntry) -> bool:
    """True if the CompensationFailed ``failure`` entry left an undo that may have been done.

    That is when the rounds ran out (the supervisor's failure) or the entry's tries failed transiently; an undo
    its provider refused was not done."""
    if failure.by == transitions.SUPERVISOR:
        return True
    failed = [e for e in record.compensation if e.outcome == FAILED and e.outcome_at == failure.at]
    return any(_TRANSIENT_TRIES in (e.error or "") for e in failed)


def compensation_cause(record: StateRecord) -> str | None:
    """Why the order is being compensated: the reason its newest ``CompensationRequested`` entry gave
    (``enter_compensation``), or None once the record's bounded history no longer holds it."""
    for entry in reversed(record.history):
        if entry.event == COMPENSATION_REQUESTED:
            return entry.detail
    return None


def finish_compensation(record: StateRecord, owner: str, now: datetime) -> StateRecord:
    """Every entry undone: Compensated. ``lastError`` goes back to why the order was compensated, so a
    settled order does not show what a round met on the way (a wait for an open circuit, say)."""
    ensure_compensation_owner(record, owner)
    left = [e.seq for e in record.compensation if e.outcome != UNDONE]
    if left:
        raise IllegalTransition(f"order {record.order_id}: entries {left} are not undone yet")
    return record.with_changes(
        now,
        "Compensated",
        owner,
        f"{len(record.compensation)} entries undone",
        process_state=ProcessState.COMPENSATED,
        locked_by=None,
        complete_by=None,
        current_step=None,
        last_error=compensation_cause(record),
        outage_wait_since=None,
    )


def undo_refunded(entry: CompensationEntry) -> bool:
    """True if the undo of a payment entry returned money, by its own answer.

    Money means a non-blank ``refundId`` or an ``amountCents`` above 0; a refund by key that found nothing answers
    ``refundId: null`` and 0. Without an ``undo_result`` (older entries), only an entry with a ``chargeId``
    counts: an unknown-outcome entry proves nothing."""
    if entry.outcome != UNDONE:
        return False
    if entry.undone_by is not None:
        return True  # undone by hand after its undo failed: the operator returned what it took
    answer = entry.undo_result
    if answer is None:
        return bool(entry.data.get("chargeId"))
    refund, amount = answer.get("refundId"), answer.get("amountCents")
    # a reference that names something, or an amount: "", false, {} or True say nothing was refunded
    named = isinstance(refund, str) and refund.strip() != ""
    return named or (isinstance(amount, int) and not isinstance(amount, bool) and amount > 0)


def uncaptured_prepayment(record: StateRecord) -> PaymentReceived | None:
    """Returns a prepaid order's applied payment if no undo returned it, for an operator to release or refund.

    Decided by what each undo answered (``undo_refunded``), not by whether entries exist:
    ``enter_compensation`` logs unknown-outcome entries for any started payment step, captured or not."""
    if record.payment is None:
        return None
    prepaid_steps = {s.name for s in WORKFLOW if s.prepaid_action is not None}
    if any(undo_refunded(entry) for entry in record.compensation if entry.step in prepaid_steps):
        return None  # the capture took effect and its undo (refund by key) returned the money
    return record.payment


def describe_failure(entry: CompensationEntry, error: str) -> str:
    return f"entry {entry.seq} ({entry.undo_action} of {entry.step} via {entry.agent}) failed: {error}"


def fail_compensation(record: StateRecord, owner: str, seq: int, error: str, now: datetime) -> StateRecord:
    """An undo failed for good or used up its tries: CompensationFailed, naming the entry and why."""
    ensure_compensation_owner(record, owner)
    entry = _entry(record, seq)
    reason = describe_failure(entry, error)
    failed = replace(entry, outcome=FAILED, outcome_at=now, error=error)
    return record.with_changes(
        now,
        "CompensationFailed",
        owner,
        reason,
        process_state=ProcessState.COMPENSATION_FAILED,
        locked_by=None,
        complete_by=None,
        last_error=reason,
        compensation=_with_entry(record, failed),
    )


def await_review(
    record: StateRecord,
    owner: str,
    step_name: str,
    review_id: str,
    until: datetime,
    now: datetime,
    *,
    keep_until: datetime | None = None,
    error: str | None = None,
    default_action: str | None = None,
) -> StateRecord:
    """Pauses the forward attempt for an operator's review until ``until``.

    ``until`` is the "decide by" the ops API shows and checks answers against. ``completeBy`` moves to
    ``keep_until``, past it, so the supervisor leaves the paused attempt alone. ``error`` (why the agents refused
    the step) is kept as ``lastError`` so the operator sees it on the order. ``default_action`` is kept as
    ``reviewDefault``: what the attempt does at the deadline without an answer."""
    transitions.ensure_owner(record, owner)
    return record.with_changes(
        now,
        review.REVIEW_REQUESTED,
        owner,
        review.review_detail(step_name, review_id, until),
        complete_by=keep_until if keep_until is not None else until,
        last_error=f"{step_name}: {error}" if error else record.last_error,
        review_default=(
            review.review_default(review_id, default_action) if default_action is not None else record.review_default
        ),
    )


def _left_outcome(left: review.LeftDecision, prepaid: bool) -> str:
    the_step = STEPS.get(left.step)
    return review_outcome(left.action, the_step.fallback_for(prepaid) if the_step is not None else None)


def settled_by_decision(left: review.LeftDecision, *, prepaid: bool) -> bool:
    """True if carrying out ``left`` ends the forward path (compensate, or fail) instead of a retry.

    ``prepaid``: the order is prepaid, so its payment step has no fallback (``Step.fallback_for``)."""
    return _left_outcome(left, prepaid) in ("compensate", "fail")


def act_on_left_decision(
    record: StateRecord,
    expired_owner: str,
    left: review.LeftDecision,
    now: datetime,
    grace: timedelta = transitions.NO_GRACE,
    *,
    prepaid: bool,
) -> StateRecord:
    """Carries out the review decision an expired attempt left unacted (``review.decision_left``).

    The supervisor acts as the attempt would have (``compensation_policy.review_outcome``), not a blind retry.
    In one write the review is closed (unless the attempt closed it), then:

    - ``compensate``: the order goes to compensation, or to Error if it can no longer be compensated;
    - ``fail``, or ``alternative`` with no fallback (``Step.fallback_for``): Error;
    - ``retry`` and ``alternative``: still Processing, with the step's agent set to the one the decision names.
      The caller retries it as any expired attempt and the next attempt resumes the step with that agent
      (``orchestrators.attempt_plan``).

    ``grace``: the supervisor's (``transitions.past_due``)."""
    if not transitions.is_expired(record, now, grace) or record.locked_by != expired_owner:
        raise IllegalTransition(f"order {record.order_id}: no longer the expired attempt {expired_owner!r}")
    closed = record
    if not left.closed:
        detail = review.ClosedReview(left.review_id, left.action, left.operator).detail
        closed = record.with_changes(now, review.REVIEW_CLOSED, transitions.SUPERVISOR, detail)
    chosen = (
        f"operator review chose {left.action} ({left.operator})"
        if left.operator is not None
        else f"review not answered in time: default {left.action}"
    )
    reason = f"{left.step}: {chosen}; attempt {expired_owner} ended before acting on it"
    the_step = STEPS.get(left.step)
    outcome = _left_outcome(left, prepaid)
    if outcome == "compensate":
        try:
            return enter_compensation(closed, transitions.SUPERVISOR, reason, now, failed_step=left.step)
        except IllegalTransition as exc:
            reason = f"{reason}; it cannot be compensated ({exc})"
    elif outcome in ("retry", "alternative"):
        state = closed.steps.get(left.step)
        if the_step is None or state is None or state.status is not StepStatus.IN_PROGRESS:
            return closed
        agent = the_step.agent if outcome == "retry" else the_step.fallback_for(prepaid) or the_step.agent
        return replace(closed, steps={**closed.steps, left.step: replace(state, agent=agent)})
    return transitions.fail(closed, expired_owner, left.step, reason, now, by=transitions.SUPERVISOR)


def escalate_or_compensate(
    record: StateRecord,
    expired_owner: str | None,
    now: datetime,
    max_failures: int,
    backoff: timedelta,
    policy: ReviewPolicy,
    amount_cents: int,
    *,
    gave_up: str | None = None,
    grace: timedelta = transitions.NO_GRACE,
) -> StateRecord:
    """Recovers an expired attempt (``transitions.supervisor_retry``), compensating instead of escalating if allowed.

    When the retry escalates (retries exhausted, or ``gave_up``: a wait's bound passed), the decision function
    may send the order to compensation instead of Error in the same write. Review (high impact) and refusal
    (past the pivot) stay Error for an operator (``supervisor.operator.compensate_order`` or resubmit)."""
    moved = transitions.supervisor_retry(
        record, expired_owner, now, max_failures, backoff, gave_up=gave_up, grace=grace
    )
    if moved.process_state is not ProcessState.ERROR:
        return moved
    decision = decide_compensation(
        Situation(
            trigger=Trigger.TRANSIENT_FAILURE,
            passed_pivot=pivot_passed(moved),
            undo_pending=undo_pending(moved),
            amount_cents=amount_cents,
            retries_left=False,
        ),
        policy,
    )
    if decision.action is not Action.COMPENSATE:
        return moved
    return enter_compensation(moved, transitions.SUPERVISOR, f"{moved.last_error}; {decision.reason}", now)
