"""UTC timestamps with one fixed-width text form, so that Cosmos DB string comparisons and
``ORDER BY`` on ``completeBy`` sort in time order."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer

_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def to_text(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware (UTC)")
    return moment.astimezone(UTC).strftime(_FORMAT)


def from_text(value: object) -> object:
    if isinstance(value, str):
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            raise ValueError("timestamp must carry a UTC offset or Z")
        return parsed.astimezone(UTC)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("timestamp must be timezone-aware")
        return value.astimezone(UTC)
    return value


UtcDateTime = Annotated[datetime, BeforeValidator(from_text), PlainSerializer(to_text, return_type=str)]
