"""Six-field NCRONTAB expressions of timer triggers (``{second} {minute} {hour} {day} {month}
{day-of-week}``), read into the values each field fires on, and the longest wait between two firings.

Enough of the syntax for what the app and the local runner need: ``*``, numbers, ranges ``a-b``,
lists ``a,b`` and steps ``*/n``, ``a-b/n`` and ``a/n`` (from ``a`` to the field's end). Anything
else (names such as ``MON``, a day of week 7, a step of 0, a range running backwards) is a
``ValueError``: the settings refuse what they cannot read rather than guess what the host will do."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Self

# (lowest, highest) of second, minute, hour, day, month, day of week (0 = Sunday).
FIELD_BOUNDS = ((0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
_NUMBER = re.compile(r"[0-9]+")
_HOUR_SECONDS = 3600


def _number(text: str, part: str) -> int:
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"{part!r} is not a number, range or step")
    return int(text)


def parse_field(text: str, low: int, high: int) -> frozenset[int]:
    """The values in ``low``..``high`` that the field ``text`` fires on."""
    values: set[int] = set()
    for part in text.split(","):
        body, slash, step_text = part.partition("/")
        step = _number(step_text, part) if slash else 1
        if step < 1:
            raise ValueError(f"bad step in {part!r}")
        if body == "*":
            start, end = low, high
        elif "-" in body:
            first, _, last = body.partition("-")
            start, end = _number(first, part), _number(last, part)
        else:
            start = end = _number(body, part)
            if slash:
                end = high
        if not (low <= start <= end <= high):
            raise ValueError(f"{part!r} is outside {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class NcrontabExpression:
    """The values each field of an expression fires on."""

    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday

    @classmethod
    def parse(cls, expression: str) -> Self:
        parts = expression.split()
        if len(parts) != len(FIELD_BOUNDS):
            raise ValueError(f"NCRONTAB needs 6 fields (with seconds), got {expression!r}")
        values = [parse_field(p, low, high) for p, (low, high) in zip(parts, FIELD_BOUNDS, strict=True)]
        return cls(*values)

    def every_hour(self) -> bool:
        """Whether every hour of every day fires alike: hour, day, month and day of week take every value."""
        calendar = (self.hours, self.days, self.months, self.weekdays)
        return all(
            values == frozenset(range(low, high + 1))
            for values, (low, high) in zip(calendar, FIELD_BOUNDS[2:], strict=True)
        )

    def longest_gap(self) -> timedelta | None:
        """The longest time from one firing to the next, or None when some hour does not fire at all (hour,
        day, month or day of week restricted): the gap is then over an hour and depends on the calendar.
        Within an hour the firings are the (minute, second) offsets; the wait from the last one to the
        first one of the next hour counts too."""
        if not self.every_hour():
            return None
        offsets = sorted(minute * 60 + second for minute in self.minutes for second in self.seconds)
        following = [*offsets[1:], offsets[0] + _HOUR_SECONDS]
        return timedelta(seconds=max(b - a for a, b in zip(offsets, following, strict=True)))
