"""Cosmos DB refusing the app's identity (``StoreRefused``: a 403 of access, 401), as the supervisor's scans see it.

Every part of the app handles a refusal as the store unavailable for a while (an ``orders`` message is sent again
for later, an activity fails and is retried, the ops API answers 503): right while the app's role assignment is
still propagating after a deployment (Azure RBAC documents up to about 10 minutes), wrong for ever once someone
removed the role. The page for a refusal that lasts is not here: each refused request is logged where it is met
(``StoreRequestRefused``, ``adapters.cosmos.errors.store_refused``), and the ``storeAccessRefused`` log alert rule
(infra/modules/alerts.bicep) pages once they have gone on for 20 minutes. Application Insights keeps them, so a host
restart (Flex Consumption recycles instances) does not start the 20 minutes again, two supervisors do not page twice,
and writes refused while reads are answered (a Data Reader role) page too. It was kept here, in the worker's memory
(the alert marks live in the store that refuses): a host restarting more often than every 20 minutes never paged
(``tests/identity/test_redteam_refused2.py``).

Here the supervisor only tells when its scans begin to be refused (``StoreAccessRefused``, WARNING) and when one is
answered again (``StoreAccessRestored``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from dependencies import AppContext
from domain.timefmt import to_text
from observability.events import app_event


@dataclass
class Refusal:
    """Since when the supervisor's scans are refused (None: the last one was answered), in this process."""

    since: datetime | None = None


def watch_refusal(ctx: AppContext, refusal: Refusal, refused: str | None, answered: bool) -> None:
    """Notes this run's scan: ``refused`` (the refusal's text) or ``answered`` (the store read the scan's first page;
    neither: another failure, which changes nothing). Never raises."""
    now = ctx.clock.now()
    if refused is None:
        if answered and refusal.since is not None:
            app_event(
                "StoreAccessRestored",
                f"Cosmos DB takes the app's identity again, refused since {to_text(refusal.since)}",
                refusedSince=to_text(refusal.since),
                refusedSeconds=round((now - refusal.since).total_seconds()),
            )
            refusal.since = None
        return
    if refusal.since is None:
        refusal.since = now
        app_event(
            "StoreAccessRefused",
            f"Cosmos DB refuses the app's identity (paged by the storeAccessRefused rule if it lasts 20 minutes): "
            f"{refused}",
            logging.WARNING,
            refusedSince=to_text(now),
        )
