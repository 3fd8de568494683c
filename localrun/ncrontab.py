"""NCRONTAB schedules of timer triggers (``{second} {minute} {hour} {day} {month} {day-of-week}``),
enough of the syntax for the runner to fire timers when the Functions host would. The expression is
read by ``domain.ncrontab`` (the syntax it takes is listed there), the one the settings check too."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from domain.ncrontab import NcrontabExpression


@dataclass(frozen=True)
class Schedule(NcrontabExpression):
    """An expression's firing times: whether a moment matches, the next one after a moment."""

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
