"""A run cut by its horizon says what kept it going, and says so when no horizon would end it. Fuzz seed 8437 (300
orders, knobs-6): submitter 1's status queue full from 31 s to the end, ``ord-00293`` ``Error`` at 11 minutes, its
``Failed`` owed on the record. The supervisor's owed sweep sends such a status until acknowledged, with no end
(``supervisor/owed.py``: a full queue is transient on Azure), so the run went to its 8-hour horizon with every
invariant 0, and the summary told the developer to raise ``--horizon-hours``, which would not have ended it."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from localrun.profile import Profile
from localrun.report import build_report, summary
from localrun.simulation import (
    FUNCTIONS_RUNNING,
    OWED_NOTIFICATIONS,
    SimulationConfig,
    SimulationResult,
    run_simulation,
)

# every order fails at its first failure (payment never answers: CompensationFailed, its undo failing too)
FAILING = {"remote": {"payment": {"transient_error_rate": 1.0}}, "settings": {"MAX_FAILURES": "1"}}
# one submitter, its status queue full from the start to the end of the run
FULL_FOR_GOOD = {"reply_queues": 1, "status_queues": {"refusing": [{"submitter": 1, "error": "quota_exceeded"}]}}


@pytest.fixture(scope="module")
def endless() -> SimulationResult:
    """Two orders, both ``CompensationFailed`` within minutes, that status owed to the full queue; at the 8-hour horizon
    the orchestrations' own tries (about six hours) are over and only the owed sweep is left."""
    profile = Profile.parse({**FAILING, **FULL_FOR_GOOD})
    return run_simulation(SimulationConfig(orders=2, seed=1, profile=profile))


def test_a_run_only_a_queue_full_for_good_keeps_going_says_it_never_ends(endless: SimulationResult) -> None:
    report = build_report(endless)
    assert report["horizon_reached"] is True and report["final_states"]["CompensationFailed"] == 2
    assert report["left_at_horizon"] == [OWED_NOTIFICATIONS]
    assert report["owed_at_end"] == sorted(endless.workload.orders)
    assert report["endless_for"] == ["submitter-1-statuses"] and report["alerts"]["NotificationsStuck"] == 1
    text = summary(report)
    assert "would never end" in text and "submitter-1-statuses" in text
    assert "--horizon-hours" not in text  # before: "raise --horizon-hours", which would not have ended it


def test_a_function_running_at_the_horizon_changes_nothing(endless: SimulationResult) -> None:
    """Fuzz seed 8469: a supervisor run was under way at the horizon (one fires every 30 s), beside the owed records
    of a queue full for good; the run was not named endless."""
    report = build_report(dataclasses.replace(endless, left_at_horizon=(FUNCTIONS_RUNNING, OWED_NOTIFICATIONS)))
    assert report["endless_for"] == ["submitter-1-statuses"]


def test_other_work_left_is_no_endless_run(endless: SimulationResult) -> None:
    """The same evidence with a timer still due too: a longer horizon may yet end it."""
    report = build_report(dataclasses.replace(endless, left_at_horizon=(OWED_NOTIFICATIONS, "durable work")))
    assert report["endless_for"] == []
    assert "owed notifications, durable work still due" in summary(report) and "--horizon-hours" in summary(report)


def test_a_queue_that_takes_sends_again_is_no_endless_run() -> None:
    """The queue full only until some time: the owed sweep's next window after it sends the status, and the run
    ends (here the horizon comes first, at 30 minutes, with the orchestrations' tries still due)."""
    refusing = {"submitter": 1, "error": "quota_exceeded", "duration_s": 3600}
    profile = Profile.parse({**FAILING, "reply_queues": 1, "status_queues": {"refusing": [refusing]}})
    result = run_simulation(SimulationConfig(orders=1, seed=1, profile=profile, horizon=timedelta(minutes=30)))
    report = build_report(result)
    assert report["horizon_reached"] is True and report["endless_for"] == []
    assert "durable work" in report["left_at_horizon"]
    owed_only = build_report(dataclasses.replace(result, left_at_horizon=(OWED_NOTIFICATIONS,)))
    assert owed_only["endless_for"] == []  # the refusal ends: a longer horizon ends the run
