"""State documents no query of the app selects, found on catch-up runs and paged.

Every query of the starter's and the supervisor's selects records of one known ``processState`` whose ``completeBy``
is due. Three kinds of state document edited by hand (Cosmos DB Data Explorer) are selected by none of them, and their
orders would wait for ever without a trace:

* a Pending, Processing or Compensating record whose ``completeBy`` was moved far ahead (to 2099, say): nothing
  claims or takes it before then;
* a document whose ``processState`` is not one the app knows (missing, not text, a name of no state): only the
  operator console's list shows it, as unreadable;
* a Pending record whose ``updatedAt`` is not text (the starter's claims sort by it, text only), or a Processing or
  Compensating one whose ``completeBy`` is not text either (the query of records without a deadline sorts by it too):
  it does not map, and no query returned it to be paged.

A document with a ``kind`` is none of them: the container's other documents have one, a state record none, so a newer
version's new kind of document is not paged either.

A fresh catch-up run (the first of a process, then every ``SUPERVISOR_CATCHUP_EVERY``-th, ``supervisor/scan.py``)
looks for all three with one query, ``state_store.stray_page``: at most ``SUPERVISOR_PAGE_SIZE`` documents (TOP; the
query is not bounded by an index range, its RU in docs/supervisor.md), in id order after the last one the page before
ended at (``ScanState.stray_after``, in process memory), from the first again after the query's end: more stray
documents than a page (a script setting old orders to a state of the operators' own) are each reached in turn, where
one page without a cursor read the same documents every time and hid the others for good.
A ``completeBy`` is far ahead when it is beyond
``now + horizon.deadline_horizon``: the longest deadline any write of the app can set under the current settings, and
a margin for settings lowered since a record's deadline was written. The sweep pages, and does nothing else: a record
it finds may be held by a live attempt, and its deadline is what an operator wrote.

Paged as the documents that do not map are (``supervisor/unmapped.py``): an ``UnreadableRecord`` alert per problem,
query ``stray documents`` and a signature (the mapping error's for an unknown state or an ``updatedAt`` not text,
whose every document is also logged ``UnmappedDocument``; ``<state>:completeBy:beyond the app's deadlines`` for one
far ahead), with how many documents the run met and a few of their ids; once while it lasts (an alert mark, noted
seen at every sweep that meets it). The sweep logs ``SupervisorStraySweep`` with what it found and the query's RU; a
store unavailable for its query is logged so too (WARNING), and the next catch-up sweeps."""

from __future__ import annotations

import logging
from datetime import timedelta

from adapters.cosmos.errors import StoreUnavailable
from adapters.cosmos.state_store import STRAY_QUERY, Unmapped
from dependencies import AppContext
from domain.records import StateRecord
from domain.text import carriable
from domain.timefmt import to_text
from observability.events import app_event
from supervisor.budget import RunBudget
from supervisor.horizon import deadline_horizon
from supervisor.scan import ScanState
from supervisor.unmapped import alert_unmapped

# How often a process sweeps, at most: at its first catch-up run, then at the first catch-up this long after its last
# read page. The query is not bounded by an index range (a scan of the container's index, its RU growing with the
# documents kept): at every catch-up (about 290 a day at the defaults) it would spend that on a container of a million
# finished orders each time, beside the app's own requests on the same throughput. A hand edit is paged within a day
# (at once after a restart), as a lasting one is paged again (``supervisor/unmapped.py``: once a day).
STRAY_SWEEP_EVERY = timedelta(hours=24)

FAR_AHEAD = (
    "{signature}: no query selects them before it, their orders wait untouched; set completeBy back (a hand edit?)"
)


def far_ahead_signature(record: StateRecord) -> str:
    return f"{record.process_state.value}:completeBy:beyond the app's deadlines"


def sweep_stray(ctx: AppContext, budget: RunBudget | None = None, state: ScanState | None = None) -> int:
    """Finds and pages the state documents no other query selects (the module docstring); returns how many it found.
    ``state``: the process's, where the sweep goes on after the page before (``ScanState.stray_after``).
    Starts nothing once ``budget`` is spent. A store unavailable is logged (WARNING, ``unread``), left for the next
    catch-up as every other query of a run takes it; raises anything else the query raises (the run isolates it:
    ``SupervisorPhaseFailed``)."""
    now = ctx.clock.now()
    if state is not None and state.stray_swept_at is not None and now - state.stray_swept_at < STRAY_SWEEP_EVERY:
        return 0
    if budget is not None and budget.spent():
        budget.stopped("stray documents", found=0)
        return 0
    beyond = now + deadline_horizon(ctx.settings)
    try:
        page = ctx.states.stray_page(beyond, ctx.settings.supervisor_page_size, state.stray_after if state else None)
    except StoreUnavailable as exc:  # a blip (throttled, timed out): the next catch-up sweeps, as the scan is read
        app_event(
            "SupervisorStraySweep",
            f"supervisor sweep of stray state documents not read, store unavailable: {exc}",
            logging.WARNING,
            unread=carriable(str(exc))[:500],
            beyond=to_text(beyond),
        )
        return 0
    if state is not None:  # the next sweep goes on after this page, or starts over
        state.stray_after = page.after
        state.stray_swept_at = now
    far = [
        Unmapped(
            record.order_id,
            f"completeBy {to_text(record.complete_by) if record.complete_by else '?'} is beyond {to_text(beyond)}",
            None,
            far_ahead_signature(record),
        )
        for record in page.far_ahead
    ]
    alert_unmapped(ctx, page.unreadable, STRAY_QUERY)
    alert_unmapped(ctx, far, STRAY_QUERY, problem=f"have a completeBy beyond {to_text(beyond)} ({FAR_AHEAD})")
    found = len(far) + len(page.unreadable)
    app_event(
        "SupervisorStraySweep",
        f"supervisor sweep of stray state documents: {len(far)} with a completeBy beyond {to_text(beyond)}, "
        f"{len(page.unreadable)} unreadable{' (and more)' if page.more else ''}; {page.request_charge:.2f} RU",
        logging.ERROR if found else logging.INFO,
        farAhead=len(far),
        unreadable=len(page.unreadable),
        more=page.more,
        documents=[doc.doc_id for doc in [*far, *page.unreadable]][:10],
        beyond=to_text(beyond),
        requestCharge=page.request_charge,
    )
    return found
