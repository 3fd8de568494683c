"""Red team: a duration setting so long that no moment can be that far from now.

Found on ed08fef. A duration took any whole number at least its minimum. Past ``timedelta``'s range
(``STEP_TIMEOUT_SECONDS=100000000000000000000``) the app did not start with a ``SettingsError`` naming the
setting but an ``OverflowError`` ("Python int too large to convert to C int"). Within it, it started, and every
order broke on the first ``now + duration``: with ``STEP_TIMEOUT_SECONDS=10**12`` (31,700 years) every attempt's
orchestration failed ("date value out of range") and the order ended ``Error``; with ``START_GRACE_SECONDS=10**12``
every ``orders`` message failed its trigger until Service Bus dead-lettered it ``MaxDeliveryCountExceeded``, no
order written. Every duration is now at most 100 years (``settings.MAX_DURATION``), checked at start-up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from domain.timefmt import to_text
from settings import MAX_DURATION, SETTINGS, Setting, Settings, SettingsError

DURATIONS = [s for s in SETTINGS if s.kind.expected.startswith("a whole number of ")]
UNITS = {
    "seconds": timedelta(seconds=1),
    "minutes": timedelta(minutes=1),
    "milliseconds": timedelta(milliseconds=1),
    "days": timedelta(days=1),
}


def _unit(setting: Setting) -> timedelta:
    return UNITS[setting.kind.expected.split()[4]]


def test_the_durations_are_found() -> None:
    assert len(DURATIONS) >= 15 and {s.name for s in DURATIONS} >= {"STEP_TIMEOUT_SECONDS", "START_GRACE_SECONDS"}


@pytest.mark.parametrize("setting", DURATIONS, ids=lambda s: s.name)
@pytest.mark.parametrize("far", ["past timedelta", "31,700 years"])
def test_a_duration_no_moment_can_be_that_far_from_is_refused_at_start_up_naming_it(setting: Setting, far: str) -> None:
    value = str(10**20) if far == "past timedelta" else str(timedelta(seconds=10**12) // _unit(setting))
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({setting.name: value})
    assert str(raised.value).startswith(f"{setting.name}={value!r} is not valid")


@pytest.mark.parametrize("setting", DURATIONS, ids=lambda s: s.name)
def test_the_longest_duration_taken_keeps_a_moment_of_the_app_in_range(setting: Setting) -> None:
    longest = int(setting.kind.expected.split()[8])  # "a whole number of <unit> from <least> to <most> (...)"
    assert longest <= MAX_DURATION // _unit(setting)  # some are shorter (tests/test_settings_service_limits.py)
    parsed = setting.parse(str(longest))
    with pytest.raises(SettingsError):
        setting.parse(str(longest + 1))
    assert parsed <= MAX_DURATION
    to_text(datetime(2100, 1, 1, tzinfo=UTC) + parsed)  # a deadline the app can write
