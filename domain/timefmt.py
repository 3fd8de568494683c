"""UTC timestamps with one fixed-width text form, so that Cosmos DB string comparisons and
``ORDER BY`` on ``completeBy`` sort in time order.

Every time the app writes for people and clients (a document, a history entry's detail, an alert, an ops API
answer, a log message or field) is ``to_text``'s form (``2026-01-01T08:00:00.000000Z``), never
``datetime.isoformat()``'s (``+00:00``) nor ``str()``'s. The exceptions are ids built from a time (an alert id's
discriminator): they keep the form they were first built with, so an upgrade does not change them. ``parse`` reads
both forms: what an older release wrote says ``+00:00``."""

from __future__ import annotations

from datetime import UTC, datetime

_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
# The moments ``parse`` accepts: four-digit years (``%Y`` pads nothing, so year 999 would sort after
# 2026 as text), and a year of room below ``datetime.max`` for the durations added to a deadline.
EARLIEST = datetime(1000, 1, 1, tzinfo=UTC)
LATEST = datetime(9998, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def to_text(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware (UTC)")
    return moment.astimezone(UTC).strftime(_FORMAT)


def text_or_none(moment: datetime | None) -> str | None:
    """``to_text`` of ``moment``, None (a JSON null) for no moment."""
    return None if moment is None else to_text(moment)


def parse(value: str | datetime) -> datetime:
    """The UTC moment of an ISO 8601 text with an offset or ``Z``, or of a timezone-aware datetime;
    ``ValueError`` for a text without an offset, a naive datetime, or a moment outside
    ``EARLIEST``..``LATEST`` (including one whose conversion to UTC leaves ``datetime``'s range)."""
    if isinstance(value, str):
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            raise ValueError("timestamp must carry a UTC offset or Z")
    elif value.tzinfo is None:
        raise ValueError("timestamp must be timezone-aware")
    else:
        parsed = value
    try:
        moment = parsed.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"timestamp is out of range in UTC (years {EARLIEST.year} to {LATEST.year})") from None
    if not EARLIEST <= moment <= LATEST:
        raise ValueError(f"timestamp is out of range (years {EARLIEST.year} to {LATEST.year} UTC)")
    return moment
