"""The runner's operator (profile ``operator``, localrun/operator.py): it resubmits and compensates failed orders
and answers reviews through the app's own ops API during a simulation, the report counts what it did
(``operator_actions``), and the invariants still judge each order by how it ended: a resubmitted order that ends
``Processed`` heard ``Failed`` and then ``Completed``, and a stale ending status heard after the final one is
caught (``stale_final_statuses``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

import activities.scheduler_steps as steps
from domain.states import ProcessState
from localrun.audit import Transition
from localrun.operator import OPERATOR
from localrun.profile import OperatorPlan, Profile, ProfileError
from localrun.report import _stale_final_statuses, _status_messages, build_report, restarted_at
from localrun.simulation import SimulationConfig, base_settings, run_simulation

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "examples" / "profiles" / "operator-actions.json"

# --- the profile ---------------------------------------------------------------------------------------


def test_no_operator_by_default_and_its_run_settings_unchanged() -> None:
    profile = Profile.parse({})
    assert profile.operator is None
    assert base_settings(profile).get("OPS_LOCAL_PRINCIPAL") != OPERATOR


def test_an_operator_section_is_parsed_with_its_defaults() -> None:
    plan = Profile.parse({"operator": {"resubmit_rate": 0.5, "answer_reviews": "retry"}}).operator
    assert plan == OperatorPlan(resubmit_rate=0.5, answer_reviews="retry")
    assert plan.after_s == (60.0, 600.0) and plan.max_actions_per_order == 3
    full = Profile.parse(
        {
            "operator": {
                "resubmit_rate": 0.25,
                "compensate_rate": 0.75,
                "answer_reviews": None,
                "after_s": [0, 30],
                "max_actions_per_order": 1,
            }
        }
    ).operator
    assert full == OperatorPlan(0.25, 0.75, None, (0.0, 30.0), 1)
    # the run's operator is signed in as the local principal, for this run only
    assert base_settings(Profile.parse({"operator": {}}))["OPS_LOCAL_PRINCIPAL"] == OPERATOR
    assert Profile.load(PROFILE).operator is not None


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ([], "operator must be an object"),
        ({"cancel_rate": 0.1}, "unknown key operator.cancel_rate"),
        ({"resubmit_rate": 1.5}, "operator.resubmit_rate must be a probability"),
        ({"resubmit_rate": 0.6, "compensate_rate": 0.6}, "resubmit_rate + compensate_rate must not exceed 1"),
        ({"answer_reviews": "approve"}, "operator.answer_reviews must be one of"),
        ({"after_s": [600, 60]}, "operator.after_s must be [lo, hi] seconds"),
        ({"after_s": [1]}, "operator.after_s must be [lo, hi] seconds"),
        ({"after_s": [-1, 5]}, "operator.after_s must be [lo, hi] seconds"),
        ({"max_actions_per_order": 0}, "operator.max_actions_per_order must be an integer from 1 to 10"),
        ({"max_actions_per_order": True}, "operator.max_actions_per_order must be an integer from 1 to 10"),
    ],
)
def test_a_bad_operator_section_is_refused_naming_it(section: Any, message: str) -> None:
    with pytest.raises(ProfileError) as refused:
        Profile.parse({"operator": section})
    assert message in str(refused.value)


# --- stale_final_statuses ---------------------------------------------------------------------------

T0 = datetime(2026, 3, 1, tzinfo=UTC)
OWNERS = {order: {"replyTo": "q1"} for order in "abcd"}


def _told(order_id: str, *statuses: str, queue: str = "q1") -> list[dict[str, Any]]:
    return [
        {"orderId": order_id, "status": s, "_queue": queue, "_enqueued": (T0 + timedelta(seconds=n), n)}
        for n, s in enumerate(statuses)
    ]


def test_an_ending_status_heard_after_the_final_one_is_stale() -> None:
    ended = {"a": {"processState": "Processed"}, "b": {"processState": "Error"}, "c": {"processState": "Compensated"}}
    fine = [
        *_told("a", "Received", "Processing", "Failed", "Processing", "Completed"),  # resubmitted, then Completed
        *_told("b", "Received", "Failed", "Processing", "Failed"),  # resubmitted, failed again
        *_told("c", "Received", "CompensationFailed", "Compensating", "Compensated"),  # compensated again
    ]
    assert _stale_final_statuses(fine, ended, OWNERS) == []
    stale = [*_told("a", "Received", "Failed", "Processing", "Completed", "Failed")]  # the first attempt's, late
    assert _stale_final_statuses(stale, ended, OWNERS) == ["a: ended Processed, heard Failed after Completed"]
    late = _told("c", "Received", "Failed", "Compensated", "CompensationFailed")
    assert _stale_final_statuses(late, ended, OWNERS) == [
        "c: ended Compensated, heard CompensationFailed after Compensated"
    ]


def test_only_the_orders_own_queue_and_a_final_status_heard_count() -> None:
    ended = {"a": {"processState": "Processed"}, "d": {"processState": "Processed"}}
    # never heard Completed: missing_statuses' to count; a status on another queue is misrouted_statuses'
    statuses = [*_told("d", "Received", "Failed"), *_told("a", "Completed"), *_told("a", "Failed", queue="q2")]
    assert _stale_final_statuses(statuses, ended, OWNERS) == []


def test_an_order_is_judged_from_when_it_last_left_a_failure_state() -> None:
    """``restarted_at``: when an operator's move took each order out of ``Error`` or ``CompensationFailed`` last
    (``silent_failures`` and ``outage_only_failures`` judge it from then on); a move between two failure states, or
    none out of one, does not restart it."""
    s = ProcessState
    moves = [
        ("a", s.PROCESSING, s.ERROR, 1),
        ("a", s.ERROR, s.PENDING, 2),  # resubmitted
        ("a", s.PENDING, s.PROCESSING, 3),
        ("a", s.PROCESSING, s.ERROR, 4),  # failed again: still judged from its resubmit
        ("b", s.ERROR, s.COMPENSATING, 5),
        ("b", s.COMPENSATING, s.COMPENSATION_FAILED, 6),
        ("b", s.COMPENSATION_FAILED, s.COMPENSATING, 7),  # compensated again
        ("c", s.PROCESSING, s.PROCESSED, 8),
        ("d", s.ERROR, s.COMPENSATION_FAILED, 9),  # from one failure state to the other
    ]
    transitions = [
        Transition(T0 + timedelta(seconds=at), order, before, after, "x", "y", None)
        for order, before, after, at in moves
    ]
    assert restarted_at(transitions) == {"a": T0 + timedelta(seconds=2), "b": T0 + timedelta(seconds=7)}


# --- a simulation with an operator ----------------------------------------------------------------


def test_a_run_without_an_operator_reports_none() -> None:
    report = build_report(run_simulation(SimulationConfig(orders=3, seed=1)))
    assert "operator_actions" not in report and report["invariants"]["stale_final_statuses"] == 0


def test_the_operator_acts_through_the_ops_api_and_every_invariant_holds() -> None:
    profile = Profile.load(PROFILE)
    result = run_simulation(SimulationConfig(orders=20, seed=1, profile=profile))
    report = build_report(result)
    assert report["invariants"] == dict.fromkeys(report["invariants"], 0), report["invariant_examples"]
    acted = report["operator_actions"]
    assert acted["resubmit"]["done"] > 0 and acted["review"]["done"] > 0, acted
    assert acted["compensate"].get("refused", 0) > 0, acted  # past the pivot: then resubmitted
    assert json.loads(json.dumps(report)) == report  # the report file is JSON
    # the moves were made by the app's ops API, as the run's operator, and took effect
    assert result.events.count("OperatorResubmitted") == acted["resubmit"]["done"]
    assert result.events.count("OperatorReviewed") == acted["review"]["done"]
    # a resubmitted order that ended Processed: its submitter heard Failed, then Received first and Completed last
    resubmitted = {m.order_id for m in result.operator_moves if m.action == "resubmit"}
    finals = {d["orderId"]: d["processState"] for d in result.states if "processState" in d}
    heard: dict[str, list[str]] = {}
    for status in sorted(_status_messages(result), key=lambda s: s["_enqueued"]):
        heard.setdefault(status["orderId"], []).append(status["status"])
    processed = [o for o in resubmitted if finals.get(o) == "Processed" and "Failed" in heard.get(o, [])]
    assert processed, (resubmitted, finals)
    for order in processed:
        told = heard[order]
        assert told[0] == "Received" and told[-1] == "Completed" and told.index("Failed") < told.index("Completed")


def test_the_report_catches_a_failure_status_sent_after_the_operator_moved_the_order_on() -> None:
    """Mutation: ``publish_status`` without its ``failure_moved_on`` check (the app before commit 70dd5e0) sends a
    ``Failed`` retried on durable timers after the operator resubmitted and then compensated the order (60 orders,
    seed 2 of operator-actions.json: ord-00016 hears it after its ``Compensated``); the fixed app, the same run,
    is checked by the runs in docs/local-runner.md and the test above."""
    profile = Profile.load(PROFILE)
    with mock.patch.object(steps, "failure_moved_on", lambda data, record: False):
        report = build_report(run_simulation(SimulationConfig(orders=60, seed=2, profile=profile)))
    assert report["invariants"]["stale_final_statuses"] >= 1, report["invariant_examples"]
    assert any("heard Failed after" in s for s in report["invariant_examples"]["stale_final_statuses"])
