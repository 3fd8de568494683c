"""The supervisor's bounded scan for expired attempts.

``Processing`` records whose ``completeBy`` has passed ``SUPERVISOR_GRACE_SECONDS`` ago (their attempt holds
them: ``domain.transitions.past_due``), oldest deadline first, bounded three ways:

* a window: ``completeBy >= now - SUPERVISOR_WINDOW_MINUTES - SUPERVISOR_GRACE_SECONDS`` on regular runs, so a
  run reads a slice of the index instead of the whole history; a **catch-up** scan (the first run of a process
  and then every ``SUPERVISOR_CATCHUP_EVERY``-th run) has no lower bound, so nothing older than
  the window is ever stranded;
* at most ``SUPERVISOR_MAX_RECORDS`` records per run;
* pages of ``SUPERVISOR_PAGE_SIZE``, by keyset: each page is a fresh query for the records after the
  last (``completeBy``, id) of the page before (``state_store.seek_page``), never a Cosmos DB continuation
  token, which the SDK cannot resume a cross-partition ORDER BY from.

A fresh catch-up first reads one page of the records without a ``completeBy`` that is text (a hand edit removed it:
due at once, ``transitions.due_at``), by a query of their own (``state_store.undated_page``: the range on
``completeBy`` is false for them, and a sort over values of mixed types fails), at most half the run's records (none
when ``SUPERVISOR_MAX_RECORDS`` is 1), then the deadlines; they have no key in the scan's order, so a run that stops
among them leaves no cursor: the next run starts the catch-up over.

A run that hits its maximum leaves a cursor (that last (``completeBy``, id) and the query bounds it
belongs to) in ``ScanState``; the next run continues that same query from where it stopped. The
cursor lives in process memory only: after a restart the scan simply starts again from the oldest
expired record. That is safe because recovery is a conditional update that re-checks the record,
so a record seen twice is recovered at most once.

Records change while a scan runs (recoveries, the attempts themselves). Each page reads the records as
they are then: one whose ``completeBy`` moved past the cursor's and is still due at the scan's ``now``
is met again further on (a conditional write on a fresh version: harmless), one that moved behind the
cursor, or past ``now``, is left to the next scan, which starts from the window's start (or, for one
moved before the window, the next catch-up); one that did not move is met exactly once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from adapters.cosmos.errors import StoreRefused, StoreUnavailable
from adapters.cosmos.state_store import Page, SeekKey, Unmapped, expired_key
from domain.records import StateRecord
from domain.states import ProcessState
from observability.events import app_event
from settings import Settings
from supervisor.budget import RunBudget
from supervisor.refused import Refusal


class ExpiredPages(Protocol):
    """The one query of ``StateStore`` the scan needs."""

    def expired_page(
        self,
        state: ProcessState,
        now: datetime,
        not_before: datetime | None,
        page_size: int,
        after: SeekKey | None,
        grace: timedelta = ...,
    ) -> Page: ...

    def undated_page(self, state: ProcessState, page_size: int) -> Page: ...


@dataclass(frozen=True)
class ScanCursor:
    """Where an unfinished scan stopped: the last (``completeBy``, id) it read, and the bounds of its query,
    so that the next run continues that same query (the same fixed ``now``) after it."""

    now: datetime
    not_before: datetime | None
    after: SeekKey
    catch_up: bool


@dataclass
class ScanState:
    """Per-process scan state: the run counter and the cursor of an unfinished scan."""

    runs: int = 0
    cursor: ScanCursor | None = None
    catch_up_due: bool = True  # the first scan of a process is a catch-up
    # where the sweep of owed notifications goes on, per failure state (``supervisor.owed.deliver_due``)
    owed: dict[ProcessState, ScanCursor] = field(default_factory=dict)
    refusal: Refusal = field(default_factory=Refusal)  # since when the store refuses the app (``supervisor.refused``)
    # where the next sweep of stray state documents goes on (the id its last page ended at; ``supervisor.stray``)
    stray_after: str | None = None
    # when this process last read a page of them (``supervisor.stray.STRAY_SWEEP_EVERY``); None: not yet
    stray_swept_at: datetime | None = None


@dataclass(frozen=True)
class ScanResult:
    records: list[StateRecord]
    request_charge: float
    pages: int
    catch_up: bool
    resumed: bool  # continued a scan an earlier run left unfinished
    finished: bool  # the scan reached its end (no cursor left for the next run)
    interrupted: bool = False  # the store failed mid-scan; the cursor is kept for the next run
    charges: list[float] = field(default_factory=list)
    unmapped: list[Unmapped] = field(default_factory=list)  # documents skipped: they do not map to a record
    refused: str | None = None  # interrupted by Cosmos DB refusing the app's identity (``StoreRefused``): why
    # the scan's query, to go on after a record the run did not get to (``leave_rest``): its fixed now (None: no
    # scan), its lower bound, and where it began (None: at the query's start)
    upper: datetime | None = None
    lower: datetime | None = None
    started_after: SeekKey | None = None


def _start_or_resume(state: ScanState, settings: Settings, now: datetime) -> tuple[ScanCursor | None, bool]:
    """Counts the run and decides the query: the unfinished scan's, or a fresh one."""
    state.runs += 1
    if state.runs % settings.supervisor_catchup_every == 0:
        state.catch_up_due = True
    if state.cursor is not None:
        return state.cursor, state.cursor.catch_up
    catch_up = state.catch_up_due
    state.catch_up_due = False
    return None, catch_up


def scan_expired(
    store: ExpiredPages, state: ScanState, settings: Settings, now: datetime, budget: RunBudget | None = None
) -> ScanResult:
    """Reads the next bounded batch of expired ``Processing`` records and advances ``state``; no page after the
    first once ``budget`` is spent (the cursor keeps the rest for the next run)."""
    cursor, catch_up = _start_or_resume(state, settings, now)
    if cursor is not None:
        upper, lower, after = cursor.now, cursor.not_before, cursor.after
    else:
        # the window counts from when a record became due: one its attempt holds is due only the grace after its
        # completeBy (``transitions.past_due``), so a grace as long as the window left every such record out of it
        window = settings.supervisor_window + settings.supervisor_grace
        upper, lower, after = now, (None if catch_up else now - window), None
    started_after = after
    most = settings.supervisor_max_records
    records: list[StateRecord] = []
    unmapped: list[Unmapped] = []
    charges: list[float] = []
    finished = False
    interrupted = False
    refused: str | None = None
    # A fresh catch-up first reads the records whose completeBy is not text (a hand edit removed it: due at once,
    # ``transitions.due_at``; the query below selects on completeBy), one page of at most half the run's records, so
    # that they never crowd out the others (none when SUPERVISOR_MAX_RECORDS is 1); no cursor of their own.
    undated = min(settings.supervisor_page_size, most // 2) if cursor is None and catch_up else 0
    found_undated = 0
    while len(records) + len(unmapped) < most:
        if charges and budget is not None and budget.spent():
            budget.stopped("scan of expired attempts", pages=len(charges), found=len(records))
            break
        size = min(settings.supervisor_page_size, most - len(records) - len(unmapped))
        try:
            if undated:
                page = store.undated_page(ProcessState.PROCESSING, undated)
            else:
                page = store.expired_page(ProcessState.PROCESSING, upper, lower, size, after, settings.supervisor_grace)
        except StoreUnavailable as exc:
            app_event(
                "SupervisorScanInterrupted", f"supervisor scan interrupted: {exc}", logging.WARNING, catchUp=catch_up
            )
            interrupted = True
            refused = str(exc) if isinstance(exc, StoreRefused) else None
            break
        except Exception:
            # Anything else (e.g. a query the service refuses) must not wedge every later run on the
            # same cursor: drop it, the next run starts over.
            state.cursor = None
            raise
        charges.append(page.request_charge)
        records.extend(page.records)
        unmapped.extend(page.unmapped)
        app_event(
            "SupervisorScanPage",
            f"supervisor scan page {len(charges)}: {len(page.records)} records, {page.request_charge:.2f} RU",
            query=ProcessState.PROCESSING.value,
            page=len(charges),
            items=len(page.records),
            requestCharge=page.request_charge,
            catchUp=catch_up,
            undated=bool(undated),
        )
        if undated:  # then the deadlines, from the query's start
            found_undated, undated = len(page.records) + len(page.unmapped), 0
            continue
        if page.after is None:
            finished = True
            break
        after = page.after
    if finished:
        state.cursor = None
    elif after is not None:
        state.cursor = ScanCursor(upper, lower, after, catch_up)
    elif catch_up:  # a catch-up that read no page of deadlines (interrupted, its budget spent): the next run is one
        state.catch_up_due = True
    total = sum(charges)
    app_event(
        "SupervisorScan",
        f"supervisor scan: {len(records)} expired records in {len(charges)} pages, {total:.2f} RU"
        + ("" if finished else " (continues next run)"),
        found=len(records),
        undated=found_undated,
        pages=len(charges),
        requestCharge=total,
        catchUp=catch_up,
        resumed=cursor is not None,
        finished=finished,
    )
    return ScanResult(
        records=records,
        request_charge=total,
        pages=len(charges),
        catch_up=catch_up,
        resumed=cursor is not None,
        finished=finished,
        interrupted=interrupted,
        charges=charges,
        refused=refused,
        unmapped=unmapped,
        upper=upper,
        lower=lower,
        started_after=started_after,
    )


def leave_rest(state: ScanState, scan: ScanResult, last_done: StateRecord | None) -> None:
    """The run did not get to the scan's records after ``last_done`` (None: to none of them): the next run goes on
    with the same query after it (or from where the scan began), not after the scan's last page, which left them
    to the next fresh scan (a catch-up's older than the window to the next catch-up)."""
    if scan.upper is None:
        return
    after = expired_key(last_done) if last_done is not None else scan.started_after
    # nothing done of a scan from the query's start, or only records without a deadline (a catch-up's first page, no
    # key of the query's): the next one starts over, as this one (a record recovered is no longer due)
    if after is None:
        state.cursor = None
        state.catch_up_due = state.catch_up_due or scan.catch_up
        return
    state.cursor = ScanCursor(scan.upper, scan.lower, after, scan.catch_up)
