"""Purges the Durable backend's history of finished orchestration instances older than the retention.

Nothing else ever deletes it: on Azure Storage every instance's history and instance rows stay in Table storage
(cost, and the instance table's queries slow down as it grows). Microsoft's guidance is a timer that purges the
finished instances (``purge_instance_history_by``, https://learn.microsoft.com/azure/azure-functions/durable/
durable-functions-instance-management#purge-instance-history). Only ``Completed``, ``Failed`` and ``Terminated``
instances are named, so a ``Running``, ``Pending``, ``Suspended`` or ``ContinuedAsNew`` one (an attempt paused for
review for weeks) is never taken: the filter without statuses takes any status.

The filter is on an instance's creation time; one purge takes every match at once on the backend, however many,
so a run asks in creation-time windows, newest first: ``RECENT_WINDOWS`` windows of ``WINDOW`` ending at the cutoff
(now - retention; what expired since the last runs, a few instances each), then one for everything older (nothing,
but for a backlog: the first run after a deployment of a long-running app, or a retention lowered). Each call is
bounded (``adapters.durable_client``, ``DURABLE_CALL_TIMEOUT``) and the run starts no call that could end past
``RUN_BUDGET``, far inside the host's ``functionTimeout`` (30 minutes); a call that fails or is given up ends the run
(the backend is slow or failing: the next run asks again; a purge given up may still be carried out by the
extension, and purging twice deletes nothing twice). The app's reads of an instance treat a purged one (404) as
finished and gone (``operations.instances``: the order's page says its history is purged)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from azure.durable_functions import OrchestrationRuntimeStatus

from domain.timefmt import to_text
from observability.events import app_event
from settings import DURABLE_CALL_TIMEOUT

# The statuses purged: an instance that ended. (``Canceled`` is never reported by Durable Functions.)
PURGED_STATUSES = (
    OrchestrationRuntimeStatus.Completed,
    OrchestrationRuntimeStatus.Failed,
    OrchestrationRuntimeStatus.Terminated,
)
WINDOW = timedelta(hours=1)
# The recent windows each run asks for (the timer fires hourly: several missed runs are still small calls).
RECENT_WINDOWS = 6
# The creation time the last window starts from: before any instance of this app.
FLOOR = datetime(2000, 1, 1, tzinfo=UTC)
# The longest a run takes: it starts no call that could end past this.
RUN_BUDGET = timedelta(minutes=2)


class PurgeClient(Protocol):
    async def purge_instance_history_by(
        self, created_time_from: datetime, created_time_to: datetime, runtime_status: list[OrchestrationRuntimeStatus]
    ) -> Any: ...


@dataclass(frozen=True)
class PurgeReport:
    cutoff: datetime | None  # None: retention off
    purged: int = 0
    windows: int = 0  # windows asked and answered
    failed: str | None = None  # why the run stopped early


def windows(cutoff: datetime) -> list[tuple[datetime, datetime]]:
    """The creation-time windows of one run, newest first: ``RECENT_WINDOWS`` of ``WINDOW`` ending at ``cutoff``,
    then everything older from ``FLOOR``."""
    recent = [(cutoff - (i + 1) * WINDOW, cutoff - i * WINDOW) for i in range(RECENT_WINDOWS)]
    oldest = recent[-1][0]
    return [*recent, (FLOOR, oldest)] if oldest > FLOOR else recent


async def purge_history(
    client: PurgeClient, now: datetime, retention: timedelta, monotonic: Callable[[], float] = time.monotonic
) -> PurgeReport:
    """Purges the finished instances created before ``now - retention`` (``retention`` 0: nothing, off); logs
    ``HistoryPurged`` with how many."""
    if retention <= timedelta(0):
        return PurgeReport(cutoff=None)
    cutoff = now - retention
    started = monotonic()
    budget = (RUN_BUDGET - DURABLE_CALL_TIMEOUT).total_seconds()  # the last call may take its whole bound
    purged = answered = 0
    failed: str | None = None
    for start, end in windows(cutoff):
        if monotonic() - started > budget:
            failed = f"the run's budget ({RUN_BUDGET.total_seconds():.0f} s) is spent"
            break
        try:
            result = await client.purge_instance_history_by(start, end, list(PURGED_STATUSES))
        except Exception as exc:  # the SDK raises plain Exceptions; a bounded call, TimeoutError
            failed = f"{type(exc).__name__}: {exc}"
            break
        purged += int(getattr(result, "instances_deleted", 0) or 0)
        answered += 1
    report = PurgeReport(cutoff=cutoff, purged=purged, windows=answered, failed=failed)
    app_event(
        "HistoryPurged",
        f"purged the Durable history of {purged} finished instances created before {to_text(cutoff)}"
        + (f"; stopped after {answered} windows: {failed}" if failed else ""),
        logging.WARNING if failed else logging.INFO,
        purged=purged,
        windows=answered,
        cutoff=to_text(cutoff),
        failed=failed,
    )
    return report
