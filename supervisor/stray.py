"""State documents no query of the app selects, found on catch-up runs and paged.

Every query of the starter's and the supervisor's selects records of one known ``processState`` whose ``completeBy``
is due. Two kinds of state document edited by hand (Cosmos DB Data Explorer) are selected by none of them, and their
orders would wait for ever without a trace:

* a Pending, Processing or Compensating record whose ``completeBy`` was moved far ahead (to 2099, say): nothing
  claims or takes it before then;
* a document whose ``processState`` is not one the app knows (missing, not text, a name of no state): only the
  operator console's list shows it, as unreadable.

A fresh catch-up run (the first of a process, then every ``SUPERVISOR_CATCHUP_EVERY``-th, ``supervisor/scan.py``)
looks for both with one query, ``state_store.stray_page``: at most ``SUPERVISOR_PAGE_SIZE`` documents (TOP; the
query is not bounded by an index range, its RU in docs/supervisor.md). A ``completeBy`` is far ahead when it is beyond
``now + horizon.deadline_horizon``: the longest deadline any write of the app can set under the current settings, and
a margin for settings lowered since a record's deadline was written. The sweep pages, and does nothing else: a record
it finds may be held by a live attempt, and its deadline is what an operator wrote.

Paged as the documents that do not map are (``supervisor/unmapped.py``): an ``UnreadableRecord`` alert per problem,
query ``stray documents`` and a signature (the mapping error's for an unknown state, whose every document is also
logged ``UnmappedDocument``; ``<state>:completeBy:beyond the app's deadlines`` for one far ahead), with how many
documents the run met and a few of their ids; once while it lasts (an alert mark). The sweep logs
``SupervisorStraySweep`` with what it found and the query's RU."""

from __future__ import annotations

import logging

from adapters.cosmos.state_store import STRAY_QUERY, Unmapped
from dependencies import AppContext
from domain.records import StateRecord
from domain.timefmt import to_text
from observability.events import app_event
from supervisor.budget import RunBudget
from supervisor.horizon import deadline_horizon
from supervisor.unmapped import alert_unmapped

FAR_AHEAD = (
    "{signature}: no query selects them before it, their orders wait untouched; set completeBy back (a hand edit?)"
)


def far_ahead_signature(record: StateRecord) -> str:
    return f"{record.process_state.value}:completeBy:beyond the app's deadlines"


def sweep_stray(ctx: AppContext, budget: RunBudget | None = None) -> int:
    """Finds and pages the state documents no other query selects (the module docstring); returns how many it found.
    Starts nothing once ``budget`` is spent. Raises what the query raises (the run isolates it)."""
    if budget is not None and budget.spent():
        budget.stopped("stray documents", found=0)
        return 0
    now = ctx.clock.now()
    beyond = now + deadline_horizon(ctx.settings)
    page = ctx.states.stray_page(beyond, ctx.settings.supervisor_page_size)
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
