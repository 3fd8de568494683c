"""Red team: a timer schedule the Functions host cannot read, or one that never fires.

Found on ed08fef. ``STARTER_SCHEDULE`` and ``PEEK_SWEEP_SCHEDULE`` were checked for their shape only (six fields of
digits, letters and ``*/,-``): ``99 * * * * *``, ``a b c d e f``, ``*/0 * * * * *`` or ``5-1 * * * * *`` started
the app, and the host put that timer function in error (the local host, ``localrun.host``, does as the Functions
host does). With the starter's in error, orders over ``MAX_IN_FLIGHT`` stayed ``Pending`` for good, nobody told;
with the peek sweep's, deferred messages were never swept. ``0 0 0 31 2 *`` (31 February) never fires at all.
Both are now read as ``SUPERVISOR_SCHEDULE`` is (``domain.ncrontab``), and must fire on some day of the year."""

from __future__ import annotations

import pytest

from settings import Settings, SettingsError

SCHEDULES = ["STARTER_SCHEDULE", "PEEK_SWEEP_SCHEDULE"]
UNREADABLE = [
    "99 * * * * *",
    "a b c d e f",
    "*/0 * * * * *",
    "5-1 * * * * *",
    "0 0 24 * * *",
    "0 0 0 0 * *",
    "0 0 0 * 13 *",
    "0 0 0 * * 7",
]
NEVER = ["0 0 0 31 2 *", "0 0 0 30,31 2 *", "0 0 0 31 4,6,9,11 *"]


@pytest.mark.parametrize("name", SCHEDULES)
@pytest.mark.parametrize("schedule", UNREADABLE + NEVER)
def test_a_schedule_the_host_cannot_read_or_that_never_fires_is_refused_at_start_up(name: str, schedule: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({name: schedule})
    assert str(raised.value).startswith(f"{name}={schedule!r} is not valid")


@pytest.mark.parametrize("name", SCHEDULES)
@pytest.mark.parametrize(
    "schedule", ["*/20 * * * * *", "0 */5 * * * *", "0 0 3 * * 1-5", "0 0 0 29 2 *", "0 0 0 31 * *", "0 30 9 1 1 *"]
)
def test_a_schedule_that_fires_is_taken(name: str, schedule: str) -> None:
    assert getattr(Settings.from_env({name: schedule}), name.lower()) == schedule
