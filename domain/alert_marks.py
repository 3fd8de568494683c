"""Which operator-alert problems have paged, so one problem pages once (``notifications/repeats.py``). Pure.

A problem is a key its raiser chooses (``NotificationsStuck`` of one reply queue for one error, an owed alert that
went out, one conflicting order's data): the first occurrence always pages; repeats of it page nothing while it
lasts, and again once a day (``REPEAT_AFTER``) as a reminder. A problem not seen for ``ENDED_AFTER`` is over: its
next occurrence is a new problem and pages. Every raiser of a kept problem sees it at least once an hour while it
lasts (an owed record's resend window, a queue's stuck orders), so two hours of silence is an end.

One small document per problem in the ``state`` container under its own partition (``orderId`` =
``alertmark:<digest of the key>``, no ``processState``: no order query ever returns it), written only
conditionally (a create that fails if it appeared, a replace on ``_etag``), so it survives restarts and is shared by
every instance; a writer that loses a race has been beaten by one that paged or saw the same problem. The store
deletes it ``EXPIRE_AFTER`` after its last write (its ``ttl``): every problem that ever paged left its mark for
ever (one per content of a producer's conflicting orders)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

DOCUMENT_KIND = "AlertMark"
SCHEMA_VERSION = 1
REPEAT_AFTER = timedelta(hours=24)  # a problem that lasts pages again once a day
ENDED_AFTER = timedelta(hours=2)  # not seen this long: over, its next occurrence pages
SEEN_REFRESH = timedelta(minutes=10)  # ``seen_at`` is written at most this often (sightings come every sweep)
# How long the store keeps a mark after its last write (the document's ``ttl``, Cosmos DB's time to live; the
# ``state`` container's ``defaultTtl`` is -1, so no other document expires): a mark not written for a day and two
# hours holds nothing back any more: its problem ended ``ENDED_AFTER`` after its last sighting (each written, at
# most ``SEEN_REFRESH`` apart), and its reminder was due ``REPEAT_AFTER`` after it paged. Its next occurrence finds
# no mark and pages, as it would have found it over.
EXPIRE_AFTER = REPEAT_AFTER + ENDED_AFTER


def document_id(key: str) -> str:
    """The document's id and partition key (``orderId``): a digest, so any key fits and never names an order."""
    return "alertmark:" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:40]


@dataclass(frozen=True, slots=True, kw_only=True)
class AlertMark:
    """The problem ``key`` paged (``alert_id``) at ``alerted_at``; last seen at ``seen_at``."""

    id: str
    order_id: str
    kind: str = DOCUMENT_KIND
    key: str
    alert_id: str
    first_at: datetime  # when the current occurrence of the problem first paged
    alerted_at: datetime
    seen_at: datetime
    schema_version: int = SCHEMA_VERSION
    ttl: int = int(EXPIRE_AFTER.total_seconds())  # seconds the store keeps it after its last write
    # As DependencyHealth: the stored version (``_etag``) and the keys this code does not know. Never mapped.
    version: str | None = None
    unknown_keys: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def paged(cls, key: str, alert_id: str, now: datetime, before: AlertMark | None = None) -> AlertMark:
        """The mark after ``alert_id`` paged for ``key`` at ``now`` (``before``: the mark read, kept as its base)."""
        doc = document_id(key)
        first = before.first_at if before is not None and not before.ended(now) else now
        fresh = cls(
            id=doc, order_id=doc, key=key[:1000], alert_id=alert_id, first_at=first, alerted_at=now, seen_at=now
        )
        return fresh if before is None else replace(fresh, version=before.version, unknown_keys=before.unknown_keys)

    @classmethod
    def unreadable(cls, key: str, version: str | None) -> AlertMark:
        """A stored mark of ``key`` that does not map, at ``version``: read as long over (its problem's next
        occurrence pages, and the mark written then replaces it on ``version``)."""
        doc, never = document_id(key), datetime(1970, 1, 1, tzinfo=UTC)
        return cls(
            id=doc,
            order_id=doc,
            key=key[:1000],
            alert_id="",
            first_at=never,
            alerted_at=never,
            seen_at=never,
            version=version,
        )

    def ended(self, now: datetime) -> bool:
        return now - self.seen_at >= ENDED_AFTER

    def pages(self, now: datetime) -> bool:
        """Whether an occurrence at ``now`` pages: the problem was over, or its daily reminder is due."""
        return self.ended(now) or now - self.alerted_at >= REPEAT_AFTER or now < self.alerted_at - SEEN_REFRESH

    def over(self, now: datetime) -> AlertMark:
        """The problem over at ``now`` (what failed worked again): its next occurrence pages."""
        return replace(self, seen_at=min(self.seen_at, now - ENDED_AFTER))

    def seen(self, now: datetime) -> AlertMark:
        """Seen again at ``now`` without paging: ``self`` unchanged when seen within ``SEEN_REFRESH``."""
        return self if now - self.seen_at < SEEN_REFRESH else replace(self, seen_at=now)
