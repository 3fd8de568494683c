"""State documents the supervisor's queries return that do not map to a record.

The stores map a page document by document (``adapters.cosmos.state_store.map_each``): one document
that does not map (schema drift, a hand edit, a timestamp outside ``timefmt``'s years) is skipped and
logged (``UnmappedDocument``) instead of failing its page, which, oldest first, would fail every run the
same way and stop the recovery of every other record. Skipped is not silent: the supervisor raises an
``UnreadableRecord`` operator alert per problem: the documents of one query broken the same way (the mapping
error's signature, ``Unmapped.signature``: the field's place in the schema and what was expected, never the value,
the id or a list index), with how many of them this run met and a few of their ids. It is looked at in the first
duplicate window of each hour since the earliest of their ``completeBy`` (or of each clock hour when none has one
that reads, under that hour's id: ``notifications.alerts.hourly_slice``), and at any time when its mark says it never
paged (``_unpaged``), so a single bad document, or one broken a new way, pages in the first run that meets it;
raised once per problem while it lasts (an alert mark, ``notifications/repeats.py``: again once a day, or once
none of its documents was met for two hours and one broke again). It was one per document: a mass schema drift (a
bad deploy writing 5,000 documents the app cannot map) paged 1,600 times in three hours of runs every 2 minutes,
and on until every document had paged (``tests/supervisor/test_alert_noise_mass_drift.py``). Every document is
still logged (``UnmappedDocument``, with its id and the signature), and those events are also what the
``supervisorFailing`` log alert rule watches (infra/modules/alerts.bicep).

The sweep of stray documents (``supervisor/stray.py``, query ``stray documents``) pages through here too: the
documents whose ``processState`` the app does not know (they do not map), and the records that do map but whose
``completeBy`` is beyond the app's deadlines (no query selects them before it: ``problem`` says so, signature
``<state>:completeBy:beyond the app's deadlines``, no ``UnmappedDocument`` logged for them)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from adapters.cosmos.errors import StoreError
from adapters.cosmos.state_store import Unmapped
from dependencies import AppContext
from domain.timefmt import to_text
from notifications.alerts import HOURLY, hourly_slice
from notifications.repeats import note_seen, raise_once_per_problem

# The hours of documents without a ``completeBy`` that reads are counted from here (clock hours).
_NO_DUE_TIME = datetime(2000, 1, 1, tzinfo=UTC)
# The ids an alert names of the documents of its problem (the rest are in the ``UnmappedDocument`` events).
SAMPLE_IDS = 5


def alert_unmapped(ctx: AppContext, unmapped: list[Unmapped], where: str, problem: str | None = None) -> int:
    """Alerts each problem of ``unmapped`` (skipped by the ``where`` query: its documents broken the same way) that
    is in its hour's first duplicate window; returns how many alerts were sent. Never raises. ``problem``: what the
    documents of one signature have and what it does, for documents that map but no query selects (the stray
    documents' sweep, ``supervisor/stray.py``); its ``{signature}`` is filled in. None: they do not map."""
    now = ctx.clock.now()
    problems: dict[str, list[Unmapped]] = {}
    for doc in unmapped:
        problems.setdefault(doc.signature or doc.error, []).append(doc)
    sent = 0
    for signature, docs in problems.items():
        due = [doc.due_at for doc in docs if doc.due_at is not None]
        since = min(due) if due else _NO_DUE_TIME
        key = f"UnreadableRecord:{where}:{signature}"
        hour = hourly_slice(since, now)
        if hour is None and _unpaged(ctx, key, now):
            hour = (now - since) // HOURLY  # met outside its hour's first window, never paged: it pages now
        if hour is None:
            continue
        digest = hashlib.sha256(f"{where}\n{signature}".encode()).hexdigest()[:16]
        ids = [doc.doc_id for doc in docs[:SAMPLE_IDS]]
        more = f" and {len(docs) - len(ids)} more" if len(docs) > len(ids) else ""
        # one problem per query and signature: paged once, held while it lasts (again once a day, or when none of
        # its documents was met for two hours and one broke again); it was one page per document
        raised = raise_once_per_problem(
            ctx.alert_marks,
            ctx.sender,
            key,
            kind="UnreadableRecord",
            summary=f"{len(docs)} state document(s) ({', '.join(ids)}{more}) "
            + (
                f"do not map to a record ({signature}); the supervisor's {where} query skips them until they are "
                "repaired or removed (see UnmappedDocument)"
                if problem is None
                else problem.format(signature=signature)
            ),
            at=now,
            severity="error",
            discriminator=f"{digest}:{to_text(since)}:{hour}",
            held_order_id=ids[0],
            details={
                "query": where,
                "signature": signature,
                "count": len(docs),
                "documents": ids,
                "error": docs[0].error,
                "completeBy": None if not due else to_text(since),
            },
        )
        sent += raised == "sent"
    return sent


def _unpaged(ctx: AppContext, key: str, now: datetime) -> bool:
    """Whether the problem ``key`` is known not to have paged (a mark read that finds none, or one over): the first
    sighting of a problem pages in whichever run meets it (the owed sweep reaches a document of a large backlog a
    page a run, rarely within its hour's first window). Unknown (no marks, a read that fails) is not: the hourly
    window alone bounds its repeats, as before the marks. A problem that paged and lasts is noted seen
    (``repeats.note_seen``): met outside its hour's window it ended two hours after its last sighting in one, and
    paged again, every two hours where no run met it in a window (a stray document whose ``completeBy`` is ahead,
    ``since`` in the future; the sweep's catch-ups further apart than the window)."""
    if ctx.alert_marks is None:
        return False
    try:
        mark = ctx.alert_marks.get(key)
    except StoreError:
        return False
    if mark is None or mark.pages(now):
        return True
    note_seen(ctx.alert_marks, mark, now, "UnreadableRecord")
    return False
