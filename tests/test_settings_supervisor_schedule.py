"""``SUPERVISOR_SCHEDULE`` must fire at least every duplicate window (10 minutes): the supervisor's hourly
alerts and resends (``notifications.alerts.hourly_slice``) go out only in the first 10 minutes of each hour
since their start, so a run must fall in every such window or that hour's alert is never sent. A schedule
that cannot be proved to fire that often is refused when the settings load, naming the setting."""

from __future__ import annotations

import json
import re
from bisect import bisect_left
from datetime import UTC, datetime, timedelta

import pytest

from localrun.ncrontab import Schedule
from notifications.alerts import DUPLICATE_WINDOW, HOURLY, hourly_slice
from settings import Settings, SettingsError
from tests.infra.app_settings import bicep_app_settings
from tests.infra.paths import ROOT

ACCEPTED = [
    "*/30 * * * * *",  # the default
    "0 */5 * * * *",
    "0 */10 * * * *",  # exactly the window
    "0,30 * * * * *",
    "*/5 * * * * *",  # tests/infra/test_postprovision.py's developer file
    "* * * * * *",
    "0 0-50/10 * * * *",  # :00 is in the range: */10 by another name
    "0 5-55/10 * * * *",  # :55 to the next hour's :05 is 10 minutes
    "0 0,10-59 * * * *",
    "0 */5 */1 * * *",
    "0 */5 0-23 1-31 1-12 0-6",  # full ranges are every value
    "  */30 * * * * *  ",
]
REFUSED = [
    "0 */15 * * * *",
    "0 0 * * * *",
    "0 */5 9-17 * * *",  # office hours only
    "0 */5 * * * 1-5",  # weekdays only
    "0 */5 * 8-31 * *",  # not the first week of a month
    "0 10-50/10 * * * *",  # :50 to the next hour's :10 is 20 minutes
    "0 0,11-59 * * * *",  # :00 to :11 is 11 minutes
    "0 */11 * * * *",  # :55 to the next hour's :00 is 5, but :00 to :11 is 11
    "x * * * * *",
    "*/30 * * * *",  # five fields
    "0 */5 * * JAN-DEC *",  # names are not read: not proved, so refused
    "",
]


def firings(expression: str, start: datetime, end: datetime) -> list[datetime]:
    """When the local runner fires a timer with this schedule (as the Functions host would)."""
    schedule = Schedule.parse(expression)
    found: list[datetime] = []
    moment = schedule.next_after(start)
    while moment < end:
        found.append(moment)
        moment = schedule.next_after(moment)
    return found


def missed_hours(expression: str) -> int:
    """For ``since`` at every half second of an hour, whether the hour after it gets a run inside its first
    duplicate window (``hourly_slice`` says 1 there): how many of those hours get none. The hour starts on a
    Saturday at 07:30 UTC, so a schedule restricted to office hours or weekdays misses it too."""
    start = datetime(2026, 3, 7, 7, 30, tzinfo=UTC)
    runs = firings(expression, start, start + 3 * HOURLY)
    missed = 0
    for half_seconds in range(2 * 3600):
        since = start + timedelta(seconds=half_seconds / 2)
        window = runs[bisect_left(runs, since + HOURLY) : bisect_left(runs, since + HOURLY + DUPLICATE_WINDOW)]
        missed += not any(hourly_slice(since, run) == 1 for run in window)
    return missed


@pytest.mark.parametrize("expression", ACCEPTED)
def test_a_schedule_that_fires_at_least_every_ten_minutes_is_accepted(expression: str) -> None:
    assert Settings.from_env({"SUPERVISOR_SCHEDULE": expression}).supervisor_schedule == expression


@pytest.mark.parametrize("expression", REFUSED)
def test_a_schedule_that_may_wait_longer_is_refused_naming_the_setting_and_what_it_needs(expression: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"SUPERVISOR_SCHEDULE": expression})
    message = str(raised.value)
    assert message.startswith(f"SUPERVISOR_SCHEDULE={expression!r} is not valid: expected")
    assert "at least every 10 minutes" in message
    assert "every value (`*`) in hour, day, month and day-of-week" in message


def test_the_limit_is_the_duplicate_window_of_the_hourly_alerts() -> None:
    assert timedelta(minutes=10) == DUPLICATE_WINDOW


@pytest.mark.parametrize(
    "expression",
    [e for e in ACCEPTED if e.strip() not in ("* * * * * *", "*/5 * * * * *")]  # slow to list, same verdict
    + [e for e in REFUSED if e not in ("x * * * * *", "*/30 * * * *", "0 */5 * * JAN-DEC *", "")],
)
def test_what_is_accepted_is_what_never_skips_an_hourly_alert(expression: str) -> None:
    """The rule agrees with ``hourly_slice``: an accepted schedule runs in every hour's first duplicate
    window whatever the alert's start; each refused one (that the runner can read) misses some."""
    try:
        Settings.from_env({"SUPERVISOR_SCHEDULE": expression})
    except SettingsError:
        accepted = False
    else:
        accepted = True
    assert (missed_hours(expression) == 0) == accepted


def test_the_other_schedules_are_not_held_to_the_supervisors_limit() -> None:
    """The starter and the peek sweep send no hourly-sliced alert (their alerts are once per order or
    message): an hourly or office-hours schedule is theirs to choose."""
    settings = Settings.from_env({"STARTER_SCHEDULE": "0 0 * * * *", "PEEK_SWEEP_SCHEDULE": "0 */5 9-17 * * 1-5"})
    assert settings.starter_schedule == "0 0 * * * *"
    assert settings.peek_sweep_schedule == "0 */5 9-17 * * 1-5"


def test_every_supervisor_schedule_the_project_ships_is_accepted() -> None:
    """The default, the local example, the Bicep and both postprovision hooks."""
    shipped = {
        "local.settings.json.example": json.loads((ROOT / "local.settings.json.example").read_text())["Values"][
            "SUPERVISOR_SCHEDULE"
        ],
        "infra/modules/functionapp.bicep": bicep_app_settings()["SUPERVISOR_SCHEDULE"],
    }
    for script in ("scripts/postprovision.sh", "scripts/postprovision.ps1"):
        found = re.findall(r"""['"]SUPERVISOR_SCHEDULE['"]\s*[:=]\s*['"]([^'"]*)['"]""", (ROOT / script).read_text())
        assert len(found) == 1, script
        shipped[script] = found[0]
    assert Settings.from_env({}).supervisor_schedule == "*/30 * * * * *"
    for where, expression in shipped.items():
        assert Settings.from_env({"SUPERVISOR_SCHEDULE": expression}).supervisor_schedule == expression, where
