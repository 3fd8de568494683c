"""One supervisor run: find what is due, then act on it, one phase after another.

The phases, in order: a bounded scan and a conditional recovery of each expired record; the claims of due
compensation rounds (each batch started by the trigger as soon as it is claimed); the owed notifications; the
outage alerts; and, on a fresh catch-up run only, the sweep for state documents no query selects
(``supervisor/stray.py``: paged, not acted on). Each phase stays within the run's budget, and one phase's failure
never stops the next."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from adapters.cosmos.errors import StoreUnavailable
from adapters.cosmos.state_store import Page
from dependencies import AppContext
from domain import transitions
from domain.compensation import round_never_began
from domain.records import StateRecord
from domain.text import carriable
from observability.events import app_event
from supervisor.backend_wait import InstanceStatuses, unknown_deadline
from supervisor.budget import RunBudget
from supervisor.compensation_rounds import (
    CompensationClaims,
    CompensationStart,
    StartRounds,
    claim_due_compensations,
    due_compensations,
)
from supervisor.outage import alert_outages
from supervisor.owed import deliver_due
from supervisor.recovery import RecoveryAction, recover
from supervisor.refused import watch_refusal
from supervisor.scan import ScanResult, ScanState, leave_rest, scan_expired
from supervisor.stray import sweep_stray
from supervisor.unmapped import alert_unmapped

# How long one run spends on its recoveries (a few Cosmos DB requests each, up to SUPERVISOR_MAX_RECORDS), inside
# the run's own budget (``supervisor.budget.RUN_BUDGET``), on ``AppContext.clock``. The records left are still
# expired, and the next run goes on with them (``scan.leave_rest``). The cap keeps a run against a throttled
# Cosmos DB under the host's functionTimeout (host.json), whose expiry restarts the worker and fails every
# invocation on it, and leaves the last third of the run's budget to the later phases
# (tests/supervisor/test_run_budget.py).
RECOVERY_BUDGET = timedelta(minutes=10)


@dataclass(frozen=True)
class SupervisorReport:
    found: int = 0
    recovered: int = 0
    skipped: int = 0  # lost a race: another writer moved the record first
    escalated: int = 0
    failed: int = 0  # the store was unavailable for that record; a later run finds it again
    request_charge: float = 0.0  # RU of every query page of the run (expired Processing, due Compensating)
    pages: int = 0
    catch_up: bool = False
    finished: bool = True  # False: the next run continues this scan
    to_terminate: list[str] = field(default_factory=list)  # expired instances, best-effort terminate
    compensating: int = 0  # retries exhausted before the pivot: handed to compensation
    compensations: list[CompensationStart] = field(default_factory=list)  # rounds claimed, to start
    compensation_failed: int = 0  # stuck compensations that used up their rounds
    notified: int = 0  # failure records whose owed alert and status this run delivered
    outage_alerts: int = 0  # DependencyOutage / DependencyRecovered alerts this run sent (one per outage each)
    # expired attempts and stuck rounds whose instance the Durable backend has still to run: left alone
    left_to_backend: int = 0
    # expired attempts the Durable backend never had (their starts failed): Pending again, not counted
    starts_missed: int = 0
    # state documents no query selects (a completeBy far ahead, an unknown processState), paged: fresh catch-ups only
    stray: int = 0


def phase_failed(what: str, exc: Exception, **fields: Any) -> None:
    app_event(
        "SupervisorPhaseFailed",
        f"{what} failed, left for the next run: {carriable(f'{type(exc).__name__}: {exc}')[:500]}",
        logging.ERROR,
        phase=what,
        error=type(exc).__name__,
        **fields,
    )


def _isolated(what: str, phase: Callable[[], int]) -> int:
    """``phase()``, or 0 when it failed (logged): the rest of the run goes on."""
    try:
        return phase()
    except Exception as exc:
        phase_failed(what, exc)
        return 0


@dataclass(frozen=True)
class Due:
    """What a run found due before it acts: the expired attempts and the page of due compensation rounds.

    ``rounds`` is None when its query failed: the claims query again after the recoveries."""

    scan: ScanResult
    rounds: Page | None = None


def find_due(ctx: AppContext, state: ScanState, budget: RunBudget | None = None) -> Due:
    """Scans for expired attempts (``supervisor/scan.py``) and reads the page of due compensation rounds.

    The rounds are not read once ``budget`` is spent (the claims would not start). A failed scan is logged and
    taken as an empty, interrupted scan, so the rest of the run goes on."""
    try:
        scan = scan_expired(ctx.states, state, ctx.settings, ctx.clock.now(), budget)
    except Exception as exc:  # the scan drops its cursor; the compensation claims still run
        phase_failed("scan of expired attempts", exc)
        scan = ScanResult([], 0.0, 0, False, False, False, interrupted=True)
    if budget is not None and budget.spent():
        return Due(scan, None)
    try:
        # a fresh catch-up also reads the rounds whose deadline was removed by hand (``due_compensations``)
        rounds: Page | None = due_compensations(ctx, undated=scan.catch_up and not scan.resumed)
    except Exception:  # the claims query again, and take its failure as they always have
        rounds = None
    return Due(scan, rounds)


def held_instances(ctx: AppContext, due: Due, budget: RunBudget | None = None) -> list[str]:
    """The instances whose runtime status the run reads before it acts (``supervisor/backend_wait.py``).

    Those holding the expired attempts and due rounds. When ``SUPERVISOR_BACKEND_WAIT_SECONDS`` is 0, only the
    ones read whatever the wait: attempts and rounds that never began (a missed start is released uncounted:
    ``supervisor.recovery``, ``supervisor.compensation_rounds``) and those whose deadline was removed by hand
    (left to a live instance: ``backend_wait.left_to_backend``). None once ``budget`` is spent: the run acts on
    none."""
    if budget is not None and budget.spent():
        return []
    wait = ctx.settings.supervisor_backend_wait
    records = [*due.scan.records, *(due.rounds.records if due.rounds is not None else [])]
    read = [r for r in records if wait or _never_began(r) or unknown_deadline(r)]
    return [r.locked_by for r in read if r.locked_by is not None]


def _never_began(record: StateRecord) -> bool:
    return transitions.never_began(record) or round_never_began(record)


def run_supervisor(
    ctx: AppContext,
    state: ScanState,
    due: Due | None = None,
    statuses: InstanceStatuses | None = None,
    budget: RunBudget | None = None,
    start: StartRounds | None = None,
) -> SupervisorReport:
    """Runs one supervisor pass and reports what it did.

    Synchronous (Cosmos SDK calls): the timer trigger runs it in a worker thread.

    - ``due``: what the trigger found due (``find_due``) before it read ``statuses``, the runtime statuses of the
      instances holding it (``held_instances``). Without them every expired attempt and round is taken at its
      deadline.
    - ``budget``: the run's, from the trigger's start (default: ``RUN_BUDGET`` from now). No phase starts a unit of
      work once it is spent (``supervisor/budget.py``).
    - ``start``: starts each batch of claimed rounds as soon as it is claimed (``claim_due_compensations``) and
      releases those whose start it never tried (``supervisor/blueprint.py``). Without it the claims stop after one
      batch and the caller starts the rounds in ``report.compensations``."""
    if budget is None:
        budget = RunBudget.start(ctx.clock)
    if due is None:
        due = find_due(ctx, state, budget)
    scan = due.scan
    known = statuses or {}
    alert_unmapped(ctx, scan.unmapped, "expired attempts")  # skipped, not silent; never raises
    # pages when the store refuses the app's identity for good, which one run alone takes for a blip; never raises
    watch_refusal(ctx, state.refusal, scan.refused, answered=scan.pages > 0 or not scan.interrupted)
    recovered = _recover_expired(ctx, state, scan, known, budget)
    counts, failed, to_terminate = recovered.counts, recovered.failed, recovered.to_terminate
    fresh_catch_up = scan.catch_up and not scan.resumed
    try:
        # query again when this run's recoveries handed orders to compensation (their first rounds start now); a
        # fresh catch-up also reads the rounds without a deadline, as ``find_due`` did
        rounds = None if counts[RecoveryAction.COMPENSATING] else due.rounds
        claims = claim_due_compensations(ctx, rounds, statuses, budget, start, undated=fresh_catch_up)
    except StoreUnavailable as exc:
        app_event("SupervisorRecoveryFailed", f"compensation claims skipped, store unavailable: {exc}", logging.WARNING)
        claims = CompensationClaims([], [], 0)
    except Exception as exc:
        phase_failed("compensation claims", exc)
        claims = CompensationClaims([], [], 0)
    to_terminate.extend(claims.stale_instances)
    # Without ``start``, the rounds claimed above are started by the caller once this returns: nothing after this
    # point may raise, or they would be left unstarted (and counted as lost rounds at the next run).
    # notifications owed by earlier failure writes; the sweep goes on from the last run's page (supervisor/owed.py)
    notified = _isolated("owed notifications", lambda: deliver_due(ctx, state.owed, budget))
    # after the recoveries: the orders this run put waiting are counted in a new outage's alert
    outage_alerts = _isolated("outage alerts", lambda: alert_outages(ctx, budget))
    # the documents no query selects, paged (not acted on): a fresh catch-up's, its query not bounded by an index
    stray = _isolated("stray documents", lambda: sweep_stray(ctx, budget, state)) if fresh_catch_up else 0
    report = SupervisorReport(
        found=len(scan.records),
        recovered=counts[RecoveryAction.RECOVERED],
        skipped=counts[RecoveryAction.SKIPPED],
        escalated=counts[RecoveryAction.ESCALATED],
        failed=failed,
        request_charge=scan.request_charge + claims.request_charge,
        pages=scan.pages + claims.pages,
        catch_up=scan.catch_up,
        finished=scan.finished,
        to_terminate=to_terminate,
        compensating=counts[RecoveryAction.COMPENSATING],
        compensations=claims.starts,
        compensation_failed=claims.failed,
        notified=notified,
        outage_alerts=outage_alerts,
        left_to_backend=counts[RecoveryAction.LEFT] + claims.left,
        starts_missed=counts[RecoveryAction.START_MISSED],
        stray=stray,
    )
    _log_run(report)
    return report


@dataclass
class _Recoveries:
    """What the run's recoveries did: a count per action, the records that failed, the instances to terminate."""

    counts: dict[RecoveryAction, int]
    failed: int = 0  # the store was unavailable for that record (or its recovery raised); a later run finds it
    to_terminate: list[str] = field(default_factory=list)


def _recover_expired(
    ctx: AppContext, state: ScanState, scan: ScanResult, known: InstanceStatuses, budget: RunBudget
) -> _Recoveries:
    """Recovers the scan's expired records one by one, within ``RECOVERY_BUDGET`` of the run's budget.

    One record's failure never stops the others. When the budget is spent, the records left are handed to the next
    run (``leave_rest``)."""
    done_so_far = _Recoveries(dict.fromkeys(RecoveryAction, 0))
    recoveries = budget.share(RECOVERY_BUDGET)
    for done, record in enumerate(scan.records):
        if recoveries.spent():
            recoveries.stopped("recoveries", done=done, left=len(scan.records) - done)
            # the next run goes on with the records left, not after the scan's last page
            leave_rest(state, scan, scan.records[done - 1] if done else None)
            break
        try:
            result = recover(ctx, record, known.get(record.locked_by) if record.locked_by is not None else None)
        except StoreUnavailable as exc:
            done_so_far.failed += 1
            app_event(
                "SupervisorRecoveryFailed",
                f"order {record.order_id}: recovery failed, store unavailable: {exc}",
                logging.WARNING,
                orderId=record.order_id,
            )
            continue
        except Exception as exc:  # isolation: one record never stops the run for the others
            done_so_far.failed += 1
            phase_failed(f"order {record.order_id}: recovery", exc, orderId=record.order_id)
            continue
        done_so_far.counts[result.action] += 1
        if result.expired_instance is not None:
            done_so_far.to_terminate.append(result.expired_instance)
    return done_so_far


def _log_run(report: SupervisorReport) -> None:
    """Logs the run's ``SupervisorRun`` event, its counts as fields."""
    app_event(
        "SupervisorRun",
        f"supervisor run: found {report.found}, recovered {report.recovered}, skipped {report.skipped}, "
        f"escalated {report.escalated}, failed {report.failed}; {report.request_charge:.2f} RU in {report.pages} pages",
        found=report.found,
        recovered=report.recovered,
        skipped=report.skipped,
        escalated=report.escalated,
        failed=report.failed,
        requestCharge=report.request_charge,
        pages=report.pages,
        catchUp=report.catch_up,
        finished=report.finished,
        compensating=report.compensating,
        compensationsClaimed=len(report.compensations),
        compensationFailed=report.compensation_failed,
        notified=report.notified,
        outageAlerts=report.outage_alerts,
        leftToBackend=report.left_to_backend,
        startsMissed=report.starts_missed,
        strayDocuments=report.stray,
    )
