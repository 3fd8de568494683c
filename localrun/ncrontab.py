"""NCRONTAB schedules of timer triggers (``{second} {minute} {hour} {day} {month} {day-of-week}``),
enough of the syntax for the runner to fire timers when the Functions host would: ``*``, numbers,
ranges ``a-b``, lists ``a,b`` and steps ``*/n`` or ``a-b/n``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

_BOUNDS = ((0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 6))


def _field(text: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if step < 1:
            raise ValueError(f"bad step in {part!r}")
        if body == "*":
            start, end = low, high
        elif "-" in body:
            a, b = body.split("-", 1)
            start, end = int(a), int(b)
        else:
            start = end = int(body)
            if step_text:
                end = high
        if not (low <= start <= end <= high):
            raise ValueError(f"{part!r} is outside {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class Schedule:
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday

    @classmethod
    def parse(cls, expression: str) -> Schedule:
        parts = expression.split()
        if len(parts) != 6:
            raise ValueError(f"NCRONTAB needs 6 fields (with seconds), got {expression!r}")
        fields = [_field(p, lo, hi) for p, (lo, hi) in zip(parts, _BOUNDS, strict=True)]
        return cls(*fields)

    def matches(self, t: datetime) -> bool:
        weekday = (t.weekday() + 1) % 7
        return (
            t.second in self.seconds
            and t.minute in self.minutes
            and t.hour in self.hours
            and t.day in self.days
            and t.month in self.months
            and weekday in self.weekdays
        )

    def next_after(self, t: datetime) -> datetime:
        """The first matching whole second strictly after ``t``."""
        candidate = t.replace(microsecond=0) + timedelta(seconds=1)
        for _ in range(366 * 24 * 3600):
            if self.matches(candidate):
                return candidate
            if candidate.minute not in self.minutes or candidate.hour not in self.hours:
                candidate = candidate.replace(second=0) + timedelta(minutes=1)
                continue
            candidate += timedelta(seconds=1)
        raise ValueError("schedule never fires within a year")
