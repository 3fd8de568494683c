"""Cosmos DB refusing the app's identity (``StoreRefused``: a 403 of access, 401), alerted once it persists.

Every part of the app handles a refusal as the store unavailable for a while (an ``orders`` message is sent again
for later, an activity fails and is retried, the ops API answers 503): right while the app's role assignment is
still propagating after a deployment (Azure RBAC documents up to about 10 minutes), wrong for ever once someone
removed the role, when nothing would page (the supervisor's scans and the dead-letter watch take a store failure for
a blip). So the supervisor, whose scan reads the ``state`` container every run, keeps when its scans began to be
refused (process memory: the alert marks live in the store that refuses), and once they have been refused for
``REFUSED_ALERT_AFTER`` without one answered, raises ``StoreAccessRefused`` (critical): one page for the problem,
again once a day (``REPEAT_AFTER``) while it lasts in this process (a send that fails is tried at the next run,
under the same id). A scan the store answers ends it
(``StoreAccessRestored``). The alert's ``OperatorAlert`` event is logged before its send, so it pages through the
``operatorAlertRaised`` rule even when Service Bus refuses the identity too (docs/deploy.md)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from dependencies import AppContext
from domain.alert_marks import REPEAT_AFTER
from domain.timefmt import to_text
from notifications.alerts import raise_alert_after_write
from observability.events import app_event

# Past the up to 10 minutes Azure RBAC documents for a role assignment to take effect, and the firewall's 15.
REFUSED_ALERT_AFTER = timedelta(minutes=20)


@dataclass
class Refusal:
    """Since when the supervisor's scans are refused (None: the last one was answered), and when it alerted."""

    since: datetime | None = None
    alerted: int | None = None  # the day of the refusal whose alert went out (0: the first, then the reminders)


def watch_refusal(ctx: AppContext, refusal: Refusal, refused: str | None, answered: bool) -> bool:
    """Notes this run's scan: ``refused`` (the refusal's text) or ``answered`` (the store read the scan's first page;
    neither: another failure, which changes nothing). Raises ``StoreAccessRefused`` when due; True when it went out.
    Never raises."""
    now = ctx.clock.now()
    if refused is None:
        if answered and refusal.since is not None:
            app_event(
                "StoreAccessRestored",
                f"Cosmos DB takes the app's identity again, refused since {to_text(refusal.since)}",
                refusedSince=to_text(refusal.since),
                refusedSeconds=round((now - refusal.since).total_seconds()),
                alerted=refusal.alerted is not None,
            )
            refusal.since = refusal.alerted = None
        return False
    if refusal.since is None:
        refusal.since = now
        app_event(
            "StoreAccessRefused",
            f"Cosmos DB refuses the app's identity (alerted if it lasts {REFUSED_ALERT_AFTER}): {refused}",
            logging.WARNING,
            refusedSince=to_text(now),
        )
    if now - refusal.since < REFUSED_ALERT_AFTER:
        return False
    day = (now - refusal.since - REFUSED_ALERT_AFTER) // REPEAT_AFTER
    if refusal.alerted == day:  # paged for this day of the refusal already
        return False
    minutes = int((now - refusal.since).total_seconds() // 60)
    went_out = raise_alert_after_write(
        ctx.sender,
        kind="StoreAccessRefused",
        summary=f"{refused.split(',')[0]} for {minutes} minutes: the app's identity has no data role on the account "
        "(Cosmos DB Built-in Data Contributor) or its token is not taken; orders wait, then are dead-lettered",
        at=now,
        severity="critical",
        discriminator=f"{to_text(refusal.since)}:{day}",  # a send that failed is tried again under the same id
        details={"refusedSince": to_text(refusal.since), "error": refused[:500]},
    )
    if went_out:
        refusal.alerted = day
    return went_out
