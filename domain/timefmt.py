"""UTC timestamps with one fixed-width text form, so that Cosmos DB string comparisons and
``ORDER BY`` on ``completeBy`` sort in time order."""

from __future__ import annotations

from datetime import UTC, datetime

_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def to_text(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware (UTC)")
    return moment.astimezone(UTC).strftime(_FORMAT)


def parse(value: str | datetime) -> datetime:
    """The UTC moment of an ISO 8601 text with an offset or ``Z``, or of a timezone-aware datetime;
    ``ValueError`` for a text without an offset or a naive datetime."""
    if isinstance(value, str):
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            raise ValueError("timestamp must carry a UTC offset or Z")
        return parsed.astimezone(UTC)
    if value.tzinfo is None:
        raise ValueError("timestamp must be timezone-aware")
    return value.astimezone(UTC)
