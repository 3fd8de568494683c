"""A timer run that outlasts its period is followed by the next run as soon as it ends, as in the host.

The timer extension never overlaps a timer's runs, and it does not skip the occurrences a long run
outlasted either: once the run returns, it computes the next occurrence from the run's own time
(``TimerListener.InvokeJobFunction``: ``Next = GetNextOccurrence(invocationTime)``) and, that moment
being past, starts the timer with the smallest interval (``GetNextTimerInterval``: "adjust the interval
back up 1 Tick ... for an immediate invocation"): one catch-up run, at once, then the schedule again
(Azure/azure-webjobs-sdk-extensions, ``Timers/Listener/TimerListener.cs``). The runner dropped every
occurrence that fell in a run and waited for the first one after it: a supervisor run that took 45 s
of a 30 s schedule was followed by the next 15 s later here, at once in Azure."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from localrun.host import HostedFunction, local_settings_example
from tests.runtime.harness import T0, RuntimeHarness


@pytest.fixture
def harness(cosmos_db: Any) -> Iterator[RuntimeHarness]:
    made = RuntimeHarness(local_settings_example(), cosmos_db=cosmos_db)
    yield made
    made.close()


def starts_of(harness: RuntimeHarness, name: str, run_seconds: float, until: datetime) -> list[float]:
    """Seconds after T0 at which ``name``'s runs start, each taking ``run_seconds`` before the app runs."""
    starts: list[float] = []

    def on_invoke(function: HostedFunction) -> None:
        if function.name == name:
            starts.append((harness.clock.now() - T0).total_seconds())
            harness.clock.sleep(run_seconds if len(starts) == 1 else 0)

    harness.host.on_invoke = on_invoke
    harness.host.run_until(until)
    return starts


@pytest.mark.cosmos
def test_a_run_that_outlasts_its_period_is_followed_by_the_next_at_once(harness: RuntimeHarness) -> None:
    # SUPERVISOR_SCHEDULE */30 s: the first run, at :30, takes 45 s; the next starts when it ends (:75), not
    # at the first occurrence after it (:90); then the schedule again (:90, :120)
    first = next(t.next_fire for t in harness.host.timers if t.function.name == "supervisor")
    offset = (first - T0).total_seconds()
    starts = starts_of(harness, "supervisor", 45, first + timedelta(seconds=100))
    assert [s - offset for s in starts] == [0, 45, 60, 90]


@pytest.mark.cosmos
def test_runs_never_overlap_and_one_catch_up_stands_for_every_occurrence_missed(harness: RuntimeHarness) -> None:
    first = next(t.next_fire for t in harness.host.timers if t.function.name == "supervisor")
    offset = (first - T0).total_seconds()
    starts = starts_of(harness, "supervisor", 100, first + timedelta(seconds=160))
    assert [s - offset for s in starts] == [0, 100, 120, 150]  # :30, :60 and :90 fell in the run: one catch-up


@pytest.mark.cosmos
def test_a_run_a_restart_killed_is_run_again_at_once_past_due(
    harness: RuntimeHarness, caplog: pytest.LogCaptureFixture
) -> None:
    """The schedule monitor (``useMonitor``, on for every timer of the app) records a run's status once the run
    returns (``ScheduleMonitor.UpdateStatusAsync`` after ``TryExecuteAsync``): a run killed by a restart leaves
    ``Next`` at its own occurrence, so the host that starts next finds it past (``CheckPastDueAsync``) and runs
    it at once with ``IsPastDue`` (``TimerListener.StartAsync``). The runner waited for the next occurrence."""
    first = next(t.next_fire for t in harness.host.timers if t.function.name == "supervisor")
    offset = (first - T0).total_seconds()
    starts: list[float] = []

    def on_invoke(function: HostedFunction) -> None:
        if function.name == "supervisor":
            starts.append((harness.clock.now() - T0).total_seconds() - offset)
            harness.clock.sleep(45 if len(starts) == 1 else 0)

    harness.host.on_invoke = on_invoke
    harness.host.run_until(first + timedelta(seconds=10))
    harness.host.restart()
    with caplog.at_level(logging.INFO, logger="orders"):
        harness.host.run_until(first + timedelta(seconds=35))
    assert starts == [0, 10, 30]  # killed at :10, run again at once, then the schedule
    assert [r.getMessage() for r in caplog.records if getattr(r, "event", None) == "SupervisorPastDue"] == [
        "supervisor timer is past due"
    ]
