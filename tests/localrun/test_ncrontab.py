from datetime import UTC, datetime

import pytest

from localrun.ncrontab import Schedule

T = datetime(2026, 3, 2, 10, 0, 5, 300_000, tzinfo=UTC)  # a Monday


def test_every_thirty_seconds():
    s = Schedule.parse("*/30 * * * * *")
    assert s.next_after(T) == datetime(2026, 3, 2, 10, 0, 30, tzinfo=UTC)
    assert s.next_after(datetime(2026, 3, 2, 10, 0, 30, tzinfo=UTC)) == datetime(2026, 3, 2, 10, 1, 0, tzinfo=UTC)


def test_once_a_day_at_a_time_on_weekdays_only():
    s = Schedule.parse("0 30 9 * * 1-5")
    assert s.next_after(T) == datetime(2026, 3, 3, 9, 30, tzinfo=UTC)
    saturday = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
    assert s.next_after(saturday) == datetime(2026, 3, 9, 9, 30, tzinfo=UTC)


def test_lists_and_ranges_with_steps():
    s = Schedule.parse("0 0,15-45/15 * * * *")
    assert sorted(s.minutes) == [0, 15, 30, 45]


@pytest.mark.parametrize("bad", ["* * * * *", "61 * * * * *", "*/0 * * * * *", "a * * * * *"])
def test_invalid_expressions_are_refused(bad):
    with pytest.raises(ValueError):
        Schedule.parse(bad)
