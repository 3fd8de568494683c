"""The supervisor starts compensation rounds: a ``Compensating`` record whose ``completeBy`` has passed
(``SUPERVISOR_GRACE_SECONDS`` ago when a round holds it: ``transitions.past_due``) is either newly handed over
(unowned: by the scheduler, a cancellation, an escalation or an operator) or a round that got stuck (its
orchestration died or missed an undo deadline). A new one is claimed for its next round by one conditional
update (``lockedBy`` = ``<order>:compensate:<round>``), and the timer trigger starts that orchestration with its
durable client. A stuck round counts as a failure and is released until a backoff has passed
(``RETRY_BACKOFF_*``, as a forward retry waits), so the failing service is not called again at once; the run
after that claims the next round. After ``MAX_FAILURES`` failed rounds the record is ``CompensationFailed`` and
an operator is alerted. A stuck round waiting on an open dependency is released without counting
(``supervisor/outage.py``), and so is one the Durable backend never had (its start failed, no undo begun:
``release_missed_round``, up to ``MAX_STARTS_MISSED`` in a row). A forward attempt is never started from here.

A round whose start the run never tried (the batch's time for starts spent) is released by that run, on its own
thread once the trigger's wait for the batch's starts is over (``release_untried_rounds``): unowned, due again at
once, not counted. A fresh catch-up's page first takes the records whose ``completeBy`` was removed by hand
(``due_compensations``, ``undated``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from adapters.cosmos.errors import EtagMismatch, StoreUnavailable
from adapters.cosmos.state_store import Page
from adapters.durable_client import claims_close, grace_left
from dependencies import AppContext
from domain.compensation import (
    ROUND_BACKED_OFF,
    ROUND_START_MISSED,
    back_off_stuck_round,
    claim_compensation,
    release_missed_round,
    round_never_began,
    round_start_missable,
)
from domain.errors import IllegalTransition
from domain.outage import undo_in_flight, wait_compensation_out
from domain.records import StateRecord
from domain.retry import exponential_backoff
from domain.states import ProcessState
from domain.text import carriable
from domain.timefmt import text_or_none, to_text
from domain.transitions import MAX_STARTS_MISSED, SUPERVISOR
from notifications.received import say_owed_received
from observability.events import app_event
from orchestrators.names import COMPENSATION
from orchestrators.starter import (
    OrchestrationClient,
    Startable,
    StartsMade,
    release_untried,
    start_orchestrations,
    try_starts,
)
from orchestrators.status import ANSWERS_GIVE_UP_INPUT
from orchestrators.timers import (
    DEADLINE_AT_BEGIN_INPUT,
    HOLDS_BACKOFF_INPUT,
    RELEASES_OPEN_CIRCUIT_INPUT,
    TIMER_PER_ROUND_INPUT,
)
from supervisor.backend_wait import (
    ABSENT,
    UNREAD,
    InstanceStatuses,
    backend_wait_reason,
    in_backends_hands,
    left_to_backend,
    note_left,
)
from supervisor.budget import RunBudget
from supervisor.horizon import deadline_horizon
from supervisor.outage import OutageVerdict, outage_verdict, tell_waiting
from supervisor.owed import deliver_owed, owe_notifications, write_or_reread
from supervisor.unmapped import alert_unmapped


@dataclass(frozen=True)
class CompensationStart:
    order_id: str
    instance_id: str
    round: int
    start_by: datetime | None = None  # its claim's completeBy: the round's write time plus the start grace

    def orchestration_input(self) -> dict[str, Any]:
        return {
            "orderId": self.order_id,
            "round": self.round,
            TIMER_PER_ROUND_INPUT: True,
            HOLDS_BACKOFF_INPUT: True,
            DEADLINE_AT_BEGIN_INPUT: True,
            RELEASES_OPEN_CIRCUIT_INPUT: True,
            ANSWERS_GIVE_UP_INPUT: True,
        }


@dataclass(frozen=True)
class CompensationClaims:
    starts: list[CompensationStart]
    stale_instances: list[str]  # rounds that got stuck: best-effort terminate
    failed: int  # records that went to CompensationFailed
    request_charge: float = 0.0  # RU of the query page
    pages: int = 0
    left: int = 0  # stuck rounds whose instance the Durable backend has still to run: left to it


# Starts a batch of claimed rounds within ``timedelta`` (what is left of the first one's start grace), returning
# once they are made: the timer trigger's, on its event loop (``supervisor/blueprint.py``). Never raises.
StartRounds = Callable[[list[CompensationStart], timedelta], None]


def due_compensations(ctx: AppContext, undated: bool = False) -> Page:
    """One bounded page of due Compensating records, oldest deadline first. ``undated`` (a catch-up run's): first
    those whose ``completeBy`` is not text (a hand edit removed it: due at once, ``transitions.due_at``; the query of
    deadlines leaves them out), at most half the page (``state_store.undated_page``)."""
    grace = ctx.settings.supervisor_grace  # a round that holds its record is taken only this long past its deadline
    most = ctx.settings.supervisor_max_records
    size = min(ctx.settings.supervisor_page_size, most // 2) if undated else 0
    first = ctx.states.undated_page(ProcessState.COMPENSATING, size) if size else Page([], None, 0.0)
    taken = len(first.records) + len(first.unmapped)
    dated = ctx.states.expired_page(ProcessState.COMPENSATING, ctx.clock.now(), None, most - taken, None, grace)
    page = Page(
        first.records + dated.records,
        dated.after,
        first.request_charge + dated.request_charge,
        first.unmapped + dated.unmapped,
    )
    alert_unmapped(ctx, page.unmapped, "due compensations")  # skipped, not silent; never raises
    app_event(
        "SupervisorScanPage",
        f"supervisor compensation page: {len(page.records)} records, {page.request_charge:.2f} RU",
        query=ProcessState.COMPENSATING.value,
        page=1,
        items=len(page.records),
        requestCharge=page.request_charge,
    )
    return page


def claim_due_compensations(
    ctx: AppContext,
    page: Page | None = None,
    statuses: InstanceStatuses | None = None,
    budget: RunBudget | None = None,
    start: StartRounds | None = None,
    undated: bool = False,
) -> CompensationClaims:
    """One bounded page of due Compensating records (``page``, read by ``due_compensations`` if not given, with
    ``undated``: a fresh catch-up's, the records without a deadline too), each
    claimed for its next round by a conditional update; a record another writer moved first is skipped. A stuck
    round whose instance the Durable backend has still to run (``statuses``: ``supervisor/backend_wait.py``) is
    left to it, up to ``SUPERVISOR_BACKEND_WAIT_SECONDS``. Once ``budget`` is spent no record is taken further (a
    claim under way ends, and is returned): those left are still due, the next run's page holds them.

    Each claim's ``completeBy`` is its own write time plus ``START_GRACE_SECONDS``, and a batch of claims ends once
    a wave of starts would no longer end within its first claim's grace (``claims_close``): with ``start`` (the
    trigger's), the batch is started then and the claims go on with a new batch; without it the claims stop there,
    the records left still due for the next run (``SupervisorPhaseStopped``, reason ``start grace``), and the
    rounds claimed are returned for the caller to start at once. So every round claimed can be started within its
    grace. Under a Cosmos DB answering in 8-10 s a request, claims dated from the claims' start and started after
    all of them (and after the owed sweep) were past their ``completeBy`` when written or when their orchestration
    began: each was counted as a failed round by the next run, never having run."""
    if budget is not None and budget.spent():
        budget.stopped("compensation claims", claimed=0, unread="due compensations")
        return CompensationClaims([], [], 0)
    if page is None:
        page = due_compensations(ctx, undated=undated)
    grace = ctx.settings.supervisor_grace
    wait = ctx.settings.supervisor_backend_wait
    unknown = deadline_horizon(ctx.settings)  # how long a round whose deadline was removed by hand is left at most
    starts: list[CompensationStart] = []
    stale: list[str] = []
    failed = 0
    left = 0
    batch: list[CompensationStart] = []  # claimed, not started yet
    closes: datetime | None = None  # once a round of the batch is claimed: when its start grace lets no more in
    for done, record in enumerate(page.records):
        if budget is not None and budget.spent():
            budget.stopped("compensation claims", done=done, claimed=len(starts), left=len(page.records) - done)
            break
        if closes is not None and ctx.clock.now() >= closes:
            if start is None:
                RunBudget(ctx.clock, closes, ctx.settings.start_grace).stopped(
                    "compensation claims",
                    done=done,
                    claimed=len(starts),
                    left=len(page.records) - done,
                    reason="start grace",
                )
                break
            _start_batch(ctx, start, batch)
            batch, closes = [], None
        now = ctx.clock.now()
        status = _status(record, statuses)
        if left_to_backend(record, status, now, grace, wait, unknown):
            note_left(record, status, now, grace, wait, unknown)
            left += 1
            continue
        # still in the backend's hands past the wait: counted as before, saying so
        kept = wait > timedelta(0) and in_backends_hands(record, status)
        # the backend never had the round (its start failed) and it began no undo: released uncounted
        missed = status == ABSENT and round_never_began(record)
        try:
            # A round stuck on an open dependency is released to wait the outage out (not counted).
            outage = None if missed else outage_verdict(ctx, record, undo_in_flight(record), now)
            # A lost response is re-read; a failure on one record never drops the claims already
            # made in this batch (they are returned and started).
            written = write_or_reread(
                ctx,
                record,
                _claim_or_wait(ctx, outage, backend_wait_reason(record, status, now) if kept else None, missed=missed),
            )
        except (EtagMismatch, IllegalTransition) as exc:
            app_event(
                "CompensationClaimSkipped",
                f"order {record.order_id}: another writer moved it first ({type(exc).__name__})",
                orderId=record.order_id,
            )
            continue
        except StoreUnavailable as exc:
            app_event(
                "SupervisorRecoveryFailed",
                f"order {record.order_id}: compensation round not claimed, store unavailable: {exc}",
                logging.WARNING,
                orderId=record.order_id,
            )
            continue
        except Exception as exc:  # isolation: whatever one record does, the others are claimed
            app_event(
                "SupervisorRecoveryFailed",
                f"order {record.order_id}: compensation round not claimed, left for the next run: "
                f"{carriable(f'{type(exc).__name__}: {exc}')[:500]}",
                logging.ERROR,
                orderId=record.order_id,
                error=type(exc).__name__,
            )
            continue
        if record.locked_by is not None:
            stale.append(record.locked_by)
        if outage is not None and not outage.exceeded:
            app_event(
                "SupervisorOutageWait",
                f"order {written.order_id}: compensation round waits for {outage.dependency}; "
                f"next round not before {text_or_none(written.complete_by)}, not counted as a failure",
                orderId=written.order_id,
                dependency=outage.dependency,
                failureCount=written.failure_count,
                notBefore=to_text(outage.until),
                waitingSince=to_text(outage.since),
            )
            try:
                # once per wait
                tell_waiting(
                    ctx, record, written, outage.dependency, "Compensating", still_working=outage.still_working
                )
            except Exception as exc:  # a progress status only: the wait is written
                app_event(
                    "SupervisorRecoveryFailed",
                    f"order {record.order_id}: waiting status not sent: {type(exc).__name__}",
                    logging.WARNING,
                    orderId=record.order_id,
                )
            continue
        if written.locked_by is None and written.history and written.history[-1].event == ROUND_BACKED_OFF:
            app_event(
                "SupervisorCompensationBackoff",
                f"order {written.order_id}: compensation round {record.attempt} did not finish "
                f"(failure {written.failure_count}); next round not before {text_or_none(written.complete_by)}",
                logging.WARNING,
                orderId=written.order_id,
                round=record.attempt,
                failureCount=written.failure_count,
                notBefore=text_or_none(written.complete_by),
            )
            continue
        if written.locked_by is None and written.history and written.history[-1].event == ROUND_START_MISSED:
            app_event(
                "SupervisorCompensationStartMissed",
                f"order {written.order_id}: the Durable backend never had compensation round {record.attempt} "
                f"({record.locked_by}: its start failed); next round not before "
                f"{text_or_none(written.complete_by)}, not counted "
                f"({written.starts_missed} of {MAX_STARTS_MISSED} in a row)",
                logging.WARNING,
                orderId=written.order_id,
                instanceId=record.locked_by,
                round=record.attempt,
                startsMissed=written.starts_missed,
                failureCount=written.failure_count,
                notBefore=text_or_none(written.complete_by),
            )
            continue
        if written.process_state is ProcessState.COMPENSATION_FAILED:
            failed += 1
            deliver_owed(ctx, written)  # never raises: sent, or left owed for the next sweep
            continue
        if written.locked_by is None or written.process_state is not ProcessState.COMPENSATING:
            continue  # landed, then another writer moved it on: nothing of this round to start
        claimed = CompensationStart(written.order_id, written.locked_by, written.attempt, written.complete_by)
        starts.append(claimed)
        batch.append(claimed)
        if closes is None and written.complete_by is not None:
            closes = claims_close(written.complete_by, ctx.settings.start_grace)
    if start is not None and batch:
        _start_batch(ctx, start, batch)
    return CompensationClaims(starts, stale, failed, page.request_charge, 1, left)


def _status(record: StateRecord, statuses: InstanceStatuses | None) -> str | None:
    """The status of the round holding ``record`` as the run read it; ``UNREAD`` for one the run did not read although
    it read statuses (a round due since: the page read again after recoveries that handed orders to compensation, or
    read only now, its first query having failed), as for one whose read failed: a round that never began is left up
    to the backend wait, a later run reading its status, where it was counted as stuck though its start may only have
    failed. None: no statuses read (every round taken at its deadline), or no round holds it."""
    if record.locked_by is None or statuses is None:
        return None
    return statuses.get(record.locked_by, UNREAD)


def _start_batch(ctx: AppContext, start: StartRounds, batch: list[CompensationStart]) -> None:
    start(batch, grace_left((claimed.start_by for claimed in batch), ctx.clock.now(), ctx.settings.start_grace))


def _claim_or_wait(
    ctx: AppContext,
    outage: OutageVerdict | None,
    backend_kept: str | None = None,
    *,
    missed: bool = False,
) -> Callable[[StateRecord], StateRecord]:
    """The claim of the next round, or (stuck on an open dependency) the release to wait it out; past
    MAX_OUTAGE_WAIT_MINUTES the claim fails the compensation now, saying why. ``backend_kept``: why a stuck round
    is counted although its instance is still Pending or Running (``backend_wait_reason``). ``missed``: the stuck
    round's instance is unknown to the backend and it began no undo: released uncounted (``release_missed_round``)
    up to ``MAX_STARTS_MISSED`` in a row, then counted, saying that the backend never had it. Dated at the write
    (the clock read then): a claim's ``completeBy`` is its own write time plus the start grace, not the time the
    claims began (under a Cosmos DB answering in 10 s, a claim made minutes into them was written past due)."""

    grace = ctx.settings.supervisor_grace

    def move(record: StateRecord) -> StateRecord:
        now = ctx.clock.now()
        if missed and round_start_missable(record):
            misses = record.starts_missed + 1
            backoff = exponential_backoff(
                misses, ctx.settings.retry_backoff_base, ctx.settings.retry_backoff_max, ctx.rng
            )
            return release_missed_round(record, now, backoff, SUPERVISOR, grace)
        # MAX_STARTS_MISSED in a row: counted as a stuck round, saying that the backend never had it
        kept = f"the Durable backend never had {record.locked_by}: its start failed" if missed else backend_kept
        if outage is not None and not outage.exceeded:
            return wait_compensation_out(
                record,
                now,
                outage.until,
                outage.dependency,
                outage.since,
                grace,
                still_working=outage.still_working,
            )
        rounds = ctx.settings.max_failures
        if outage is not None:
            record = replace(record, last_error=outage.escalation_reason(now))
            rounds = record.failure_count + 1
        elif record.locked_by is not None:  # a stuck round: counted, and the next one backs off
            if kept is not None:
                record = replace(record, last_error=kept)
            failures = record.failure_count + 1
            backoff = exponential_backoff(
                failures, ctx.settings.retry_backoff_base, ctx.settings.retry_backoff_max, ctx.rng
            )
            return owe_notifications(back_off_stuck_round(record, now, backoff, rounds, SUPERVISOR, grace))
        claimed = owe_notifications(
            claim_compensation(record, now, ctx.settings.start_grace, rounds, SUPERVISOR, grace)
        )
        # a Received still owed (notifications/received.py) is said before the round's Compensating
        return say_owed_received(ctx.sender, claimed, now)

    return move


async def start_compensations(
    client: OrchestrationClient,
    starts: list[CompensationStart],
    start_grace: timedelta,
    ctx: AppContext | None = None,
) -> list[str]:
    """Starts one compensation orchestration per claimed round, within ``start_grace`` (``start_orchestrations``;
    what is left of the first claim's: ``adapters.durable_client.grace_left``). A start that fails leaves the round
    claimed with ``completeBy`` = claim + start grace: a later run claims the next round. A start never tried (the
    time for them spent) is released at once with ``ctx`` (``release_untried_round``: due again, not counted); one
    whose release cannot be written is left as after a failed start."""
    return await start_orchestrations(client, COMPENSATION, starts, start_grace, ctx)


async def try_compensation_starts(
    client: OrchestrationClient, starts: list[CompensationStart], start_grace: timedelta
) -> StartsMade:
    """``start_compensations`` without the releases of the rounds never tried: the supervisor's trigger waits for
    these starts within a bound made for Durable calls, and writes the releases on its run's thread once the wait is
    over (``release_untried_rounds``), as it writes its claims."""
    return await try_starts(client, COMPENSATION, starts, start_grace)


def release_untried_rounds(ctx: AppContext, untried: Sequence[Startable]) -> list[str]:
    """Releases the rounds whose start was never tried (``orchestrators.starter.release_untried``); never raises."""
    return release_untried(ctx, COMPENSATION, untried) if untried else []
