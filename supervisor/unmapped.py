"""State documents the supervisor's queries return that do not map to a record.

The stores map a page document by document (``adapters.cosmos.state_store.map_each``): one document
that does not map (schema drift, a hand edit, a timestamp outside ``timefmt``'s years) is skipped and
logged (``UnmappedDocument``) instead of failing its page, which, oldest first, would fail every run the
same way and stop the recovery of every other record. Skipped is not silent: the supervisor raises an
``UnreadableRecord`` operator alert per document, looked at in the first duplicate window of each hour since the
document's ``completeBy`` (or of each clock hour when it has none that reads, under that hour's id:
``notifications.alerts.hourly_slice``), and raised once per document while it stays unreadable (an alert mark,
``notifications/repeats.py``: again once a day, or once it was readable for two hours and broke again); it was
raised, and paged, every hour until someone repaired or removed it. Its
``UnmappedDocument`` events are also what the ``SupervisorPhaseFailed`` log alert rule watches
(infra/modules/alerts.bicep)."""

from __future__ import annotations

from datetime import UTC, datetime

from adapters.cosmos.state_store import Unmapped
from dependencies import AppContext
from domain.timefmt import to_text
from notifications.alerts import hourly_slice
from notifications.repeats import raise_once_per_problem

# The hours of a document without a ``completeBy`` that reads are counted from here (clock hours).
_NO_DUE_TIME = datetime(2000, 1, 1, tzinfo=UTC)


def alert_unmapped(ctx: AppContext, unmapped: list[Unmapped], where: str) -> int:
    """Alerts each document of ``unmapped`` (skipped by the ``where`` query) that is in its hour's
    first duplicate window; returns how many alerts were sent. Never raises."""
    now = ctx.clock.now()
    sent = 0
    for doc in unmapped:
        since = doc.due_at or _NO_DUE_TIME
        hour = hourly_slice(since, now)
        if hour is None:
            continue
        # one problem per document: paged once, held while it stays unreadable (again once a day, or when it was
        # repaired for two hours and broke again): it paged every hour, for ever
        raised = raise_once_per_problem(
            ctx.alert_marks,
            ctx.sender,
            f"UnreadableRecord:{doc.doc_id}",
            kind="UnreadableRecord",
            summary=f"order {doc.doc_id}: its state document does not map to a record; the supervisor's "
            f"{where} query skips it until it is repaired or removed (see UnmappedDocument)",
            at=now,
            order_id=doc.doc_id,
            severity="error",
            discriminator=f"{to_text(since)}:{hour}",
            details={
                "query": where,
                "error": doc.error,
                "completeBy": None if doc.due_at is None else to_text(since),
            },
        )
        sent += raised == "sent"
    return sent
