"""Starts met by a Durable outage cost the order no attempt (``supervisor.recovery``: a missed start).

The runner's Durable extension answers every client call 500 for 3, 5 or 8 s of every 12 s for 12 minutes
(``durable.outages``; the orchestrations, activities and timers go on). Before, a claim whose ``start_new`` failed
was taken at its start grace as a missed deadline, counted: three in a row (the starter's and the supervisor's ticks
meeting the windows) made the order Error and paged ``RetriesExhausted``: 41 of 100 orders with seed 1, 32 with
seed 11. Now the supervisor reads the instance's status, and an attempt that never began whose instance the backend
does not know is released uncounted; one whose status read meets the outage too is left to a later run."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from localrun.profile import Profile, ProfileError
from localrun.report import build_report
from localrun.simulation import SimulationConfig, run_simulation

pytestmark = pytest.mark.cosmos

# 60 windows of 3, 5 or 8 s, one every 12 s from 4 s on
DENSE: dict[str, Any] = {
    "durable": {"outages": [{"start_s": 4 + 12 * i, "duration_s": (3, 5, 8)[i % 3]} for i in range(60)]}
}


def test_starts_failed_by_dense_durable_outages_fail_no_order() -> None:
    result = run_simulation(SimulationConfig(orders=40, seed=1, profile=Profile.parse(DENSE)))
    report = build_report(result)
    assert report["injected_faults"]["durable_calls_failed"] > 0
    assert report["final_states"].get("Error", 0) == 0, report["final_states"]
    assert "RetriesExhausted" not in report["alerts"], report["alerts"]
    assert report["recoveries"]["starts_missed"] > 0  # starts did fail
    # each release is its write and its event (tests/observability/test_events_match_the_record.py)
    written = Counter(t.order_id for t in result.audit.transitions if t.event == "StartMissed")
    logged = Counter(event["orderId"] for event in result.events.named("SupervisorStartMissed"))
    assert written == logged
    assert report["recoveries"]["supervisor_retries"] == 0
    assert report["final_states"]["Processed"] == 40, report["final_states"]
    assert {k: v for k, v in report["invariants"].items() if v} == {}, report["invariant_examples"]


def test_bare_500_outages_read_as_unread_not_absent() -> None:
    """The same windows answering a 500 with no body (``"bare": true``: the host's own 500, not the extension's
    error object). The SDK reads it as it reads a 404, an empty status; the supervisor read every such status as an
    instance the backend does not know, no read unread: with seed 1 the supervisor counted 5 attempts as failed
    (``supervisor_retries``) and released 75 missed starts, none left to the backend. Now each is unread by its HTTP
    code (``SupervisorStatusUnread``): none counted, 38 released, 38 left; as under the error object's outages."""
    bare = {"durable": {"outages": [dict(w, bare=True) for w in DENSE["durable"]["outages"]]}}
    profile = Profile.parse(bare)
    assert profile.durable_outages == () and len(profile.durable_bare_outages) == 60
    result = run_simulation(SimulationConfig(orders=40, seed=1, profile=profile))
    report = build_report(result)
    assert report["injected_faults"]["durable_calls_failed"] > 0
    assert list(result.events.named("SupervisorStatusUnread")), "no status read met a bare 500 as unread"
    assert report["recoveries"]["supervisor_retries"] == 0  # before: 5 counted
    assert report["final_states"].get("Error", 0) == 0, report["final_states"]
    assert "RetriesExhausted" not in report["alerts"], report["alerts"]
    assert report["final_states"]["Processed"] == 40, report["final_states"]
    assert {k: v for k, v in report["invariants"].items() if v} == {}, report["invariant_examples"]


def test_a_durable_outage_window_says_bare_as_true_or_false() -> None:
    windows = {"outages": [{"start_s": 1, "duration_s": 2, "bare": True}, {"start_s": 5, "duration_s": 1}]}
    profile = Profile.parse({"durable": windows})
    assert (profile.durable_bare_outages, profile.durable_outages) == (((1.0, 2.0),), ((5.0, 1.0),))
    with pytest.raises(ProfileError, match=r"durable.outages\[0\].bare must be true or false"):
        Profile.parse({"durable": {"outages": [{"start_s": 1, "duration_s": 2, "bare": "yes"}]}})
    with pytest.raises(ProfileError, match="refused"):  # Cosmos DB's key only
        Profile.parse({"durable": {"outages": [{"start_s": 1, "duration_s": 2, "refused": True}]}})
