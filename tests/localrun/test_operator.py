"""The runner's operator (profile ``operator``, localrun/operator.py): it resubmits and compensates failed orders
and answers reviews through the app's own ops API during a simulation, the report counts what it did
(``operator_actions``), and the invariants still judge each order by how it ended: a resubmitted order that ends
``Processed`` heard ``Failed`` and then ``Completed``, and a stale ending status heard after the final one is
caught (``stale_final_statuses``). With ``cancel_rate`` it cancels orders too, from a generator of their own, and
an order whose cancel was taken never goes on (``left_compensation``)."""

from __future__ import annotations

import concurrent.futures
import json
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

import activities.scheduler_steps as steps
import operations.actions as actions
from domain.states import ProcessState
from localrun.audit import Transition
from localrun.operator import OPERATOR, ORIGIN, Operator, OperatorMove
from localrun.profile import OperatorPlan, Profile, ProfileError
from localrun.report import (
    _missing_statuses,
    _stale_final_statuses,
    _status_messages,
    build_report,
    left_compensation,
    restarted_at,
)
from localrun.simulation import SimulationConfig, base_settings, run_simulation
from localrun.worker.http import HttpAnswer, HttpRequestData

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
    assert full.cancel_rate == 0 and full.cancel_after_s == (0.0, 300.0)  # it cancels nothing unless asked
    cancels = Profile.parse({"operator": {"cancel_rate": 0.4, "cancel_after_s": [5, 90]}}).operator
    assert cancels == OperatorPlan(cancel_rate=0.4, cancel_after_s=(5.0, 90.0))
    # the run's operator is signed in as the local principal, for this run only
    assert base_settings(Profile.parse({"operator": {}}))["OPS_LOCAL_PRINCIPAL"] == OPERATOR
    assert Profile.load(PROFILE).operator is not None


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ([], "operator must be an object"),
        ({"cancel": 0.1}, "unknown key operator.cancel"),
        ({"cancel_rate": 1.5}, "operator.cancel_rate must be a probability"),
        ({"cancel_after_s": [60, 0]}, "operator.cancel_after_s must be [lo, hi] seconds"),
        ({"cancel_after_s": [0, 90_000]}, "operator.cancel_after_s must be [lo, hi] seconds"),
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


def test_a_progress_status_heard_after_the_final_one_is_stale_but_not_a_repeated_received() -> None:
    """Red team (s45): a round's ``Compensating`` sent again by a late run of its activity, past duplicate detection,
    after ``Compensated`` (tests/notifications/test_redteam45_compensating_run_late.py). ``Received`` (a message of
    the order handled again) and ``CancellationRejected`` (a cancellation answered) may come after the ending."""
    ended = {"a": {"processState": "Processed"}, "c": {"processState": "Compensated"}}
    late = _told("c", "Received", "Compensating", "Compensated", "Compensating")
    assert _stale_final_statuses(late, ended, OWNERS) == ["c: ended Compensated, heard Compensating after Compensated"]
    fine = _told("a", "Received", "Processing", "Completed", "Received", "CancellationRejected")
    assert _stale_final_statuses(fine, ended, OWNERS) == []


def test_only_the_orders_own_queue_and_a_final_status_heard_count() -> None:
    ended = {"a": {"processState": "Processed"}, "d": {"processState": "Processed"}}
    # never heard Completed: missing_statuses' to count; a status on another queue is misrouted_statuses'
    statuses = [*_told("d", "Received", "Failed"), *_told("a", "Completed"), *_told("a", "Failed", queue="q2")]
    assert _stale_final_statuses(statuses, ended, OWNERS) == []


def test_a_resubmitted_order_whose_last_failed_never_came_is_not_judged_on_its_first_failed() -> None:
    """Fuzz seed 8083 (300 orders): an order failed, was told ``Failed``, was resubmitted (``Processing`` of its next
    attempt heard) and failed again while its submitter's queue refused the app for good; its last ``Failed`` never
    came. ``stale_final_statuses`` took the first attempt's ``Failed`` as how the order ended and counted the next
    attempt's ``Processing`` stale, a correct app failed; and ``missing_statuses`` took the same ``Failed`` as the
    ending heard, so with the queue taking sends a lost last ``Failed`` was counted nowhere. Both judge the ending
    from when the order last left its failure (``restarted_at``)."""
    ended = {"b": {"processState": "Error"}}
    told = _told("b", "Received", "Failed", "Processing")  # the second attempt failed, its Failed not heard
    resubmitted = {"b": T0 + timedelta(seconds=1.5)}
    assert _stale_final_statuses(told, ended, OWNERS, resubmitted) == []
    assert _missing_statuses(told, ended, OWNERS, (), set(), resubmitted) == ["b"]
    # its queue refusing the app at the end (alerted, its statuses refused: ``unreachable`` holds the order), or the
    # status given up and told: not missing either
    assert _missing_statuses(told, ended, OWNERS, ("b",), set(), resubmitted) == []
    assert _missing_statuses(told, ended, OWNERS, (), {("b", "Failed")}, resubmitted) == []
    # heard after the resubmit: neither; a late first attempt's Failed after the last one still is stale
    again = [*told, *_told("b", *[""] * 3, "Failed")[3:]]
    assert _missing_statuses(again, ended, OWNERS, (), set(), resubmitted) == []
    assert _stale_final_statuses(again, ended, OWNERS, resubmitted) == []
    late = [*again, *_told("b", *[""] * 4, "Processing")[4:]]
    assert _stale_final_statuses(late, ended, OWNERS, resubmitted) == ["b: ended Error, heard Processing after Failed"]
    # never resubmitted: the first Failed is the ending
    assert _missing_statuses(_told("b", "Received", "Failed"), ended, OWNERS, (), set(), {}) == []


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
    ``Failed`` retried on durable timers after the operator resubmitted and then compensated the order. Only some
    runs have that timing (60 orders of operator-actions.json: seeds 7 and 9 as of 2026-12-05; seeds 4 to 6 did
    before that day's changes moved the timings), so the seeds are tried in turn until one shows it; the fixed app,
    the same runs, is checked by the runs in docs/local-runner.md and the test above."""
    profile = Profile.load(PROFILE)
    examples: list[str] = []
    for seed in (7, 9, 5):
        with mock.patch.object(steps, "failure_moved_on", lambda data, record: False):
            report = build_report(run_simulation(SimulationConfig(orders=60, seed=seed, profile=profile)))
        examples = report["invariant_examples"]["stale_final_statuses"]
        if report["invariants"]["stale_final_statuses"]:
            break
    assert any("heard Failed after" in s for s in examples), examples


# --- its cancels ----------------------------------------------------------------------------------------


class _Host:
    """Answers the operator's requests with the answers given, in turn (the app's ops API stands behind it in a
    simulation); keeps what was asked."""

    def __init__(self, *answers: HttpAnswer) -> None:
        self.answers = list(answers)
        self.asked: list[HttpRequestData] = []

    def submit_http(self, request: HttpRequestData) -> concurrent.futures.Future[HttpAnswer]:
        self.asked.append(request)
        future: concurrent.futures.Future[HttpAnswer] = concurrent.futures.Future()
        future.set_result(self.answers.pop(0))
        return future


def _answer(status: int, **body: Any) -> HttpAnswer:
    return HttpAnswer(status, {}, json.dumps(body).encode())


def _written(order: str, at: int, *then: tuple[ProcessState, ProcessState, int]) -> list[Transition]:
    """An order's first writes (created Pending, claimed), and ``then`` (before, after, seconds)."""
    s = ProcessState
    moves = [(None, s.PENDING, at), (s.PENDING, s.PROCESSING, at), *then]
    return [Transition(T0 + timedelta(seconds=t), order, b, a, "x", "y", None) for b, a, t in moves]


def _operator(plan: OperatorPlan, host: Any, seed: int = 1) -> Operator:
    cancels = random.Random(f"{seed}:operator-cancel") if plan.cancel_rate > 0 else None
    return Operator(plan, random.Random(f"{seed}:operator"), host, cancels)


WRITES = [
    *_written("a", 0, (ProcessState.PROCESSING, ProcessState.ERROR, 30)),
    *_written("b", 2, (ProcessState.PROCESSING, ProcessState.PROCESSED, 9)),
    *_written("c", 3, (ProcessState.PROCESSING, ProcessState.ERROR, 50)),
    *_written("d", 4),
]


def test_its_cancels_draw_from_their_own_generator_and_leave_every_other_draw_as_it_was() -> None:
    """A seed reproduces the runs made before the operator could cancel: with ``cancel_rate`` 0 it draws nothing
    more, and with one its cancels come from ``seed:operator-cancel``, so its reactions to failures are what they
    were (same draws from ``seed:operator``, same actions planned)."""
    before = OperatorPlan(resubmit_rate=0.5, compensate_rate=0.4)
    quiet, cancelling = _operator(before, _Host()), _operator(replace(before, cancel_rate=1.0), _Host())
    quiet.observe(WRITES)
    cancelling.observe(WRITES)
    assert quiet._rng.getstate() == cancelling._rng.getstate() == _drawn_as_before(before)
    assert sorted(p for p in cancelling._planned if p.action != "cancel") == sorted(quiet._planned)
    planned = sorted((p.order_id, p.at) for p in cancelling._planned if p.action == "cancel")
    assert [o for o, _ in planned] == ["a", "b", "c", "d"]  # once an order, at its first write (not its claim)
    assert all(T0 <= at <= T0 + timedelta(seconds=304) for _, at in planned)  # within cancel_after_s' 300 s
    with pytest.raises(ValueError, match="needs a generator"):
        Operator(replace(before, cancel_rate=0.1), random.Random(1), mock.Mock())


def _drawn_as_before(plan: OperatorPlan) -> object:
    """The ``seed:operator`` generator's state after the draws the operator made before it could cancel: one for
    each order reaching ``Error`` and one for each delay of an action it planned."""
    rng = random.Random("1:operator")
    for _ in ("a", "c"):
        if rng.random() < plan.resubmit_rate + plan.compensate_rate:
            rng.uniform(*plan.after_s)
    return rng.getstate()


def test_a_cancel_is_posted_when_due_and_each_answer_counted() -> None:
    plan = OperatorPlan(cancel_rate=1.0, cancel_after_s=(10.0, 10.0))
    host = _Host(
        _answer(200, action="cancel"),  # a: taken
        _answer(409, error="order b is Processed: nothing to cancel"),  # b: refused
        _answer(503, error="the state store is unavailable"),  # c: tried again later
        _answer(200, action="cancel", repeated=True),  # c: its first write had landed
    )
    operator = _operator(plan, host)
    operator.observe(_written("a", 0) + _written("b", 1) + _written("c", 2))
    assert operator.next_due() == T0 + timedelta(seconds=10)
    operator.act(T0 + timedelta(seconds=9))
    assert host.asked == []  # not yet due
    operator.act(T0 + timedelta(seconds=12))
    operator.act(T0 + timedelta(seconds=12))  # takes the answers
    assert [(r.method, r.url) for r in host.asked] == [
        ("POST", f"{ORIGIN}/api/ops/orders/{order}/cancel") for order in "abc"
    ]
    assert json.loads(host.asked[0].body) == {"reason": "localrun operator: cancel after its first write"}
    assert operator.busy() and operator.next_due() is not None  # c's cancel, 1-3 minutes later
    retry_at = operator.next_due()
    assert retry_at is not None and timedelta(seconds=72) <= retry_at - T0 <= timedelta(seconds=192)
    operator.act(retry_at)
    operator.act(retry_at)
    assert host.asked[-1].body == host.asked[2].body  # the same request again: the app sees it repeated
    assert not operator.busy()
    assert operator.report() == {"cancel": {"done": 1, "refused": 1, "repeated": 1, "unavailable": 1}}
    assert operator.moves == [OperatorMove(T0 + timedelta(seconds=12), "a", "cancel")]


def test_an_order_that_went_on_after_its_undoing_began_is_caught() -> None:
    """``left_compensation``: once an order is ``Compensating`` (a cancel taken), no write takes it anywhere but
    ``Compensated`` or ``CompensationFailed`` (and back to ``Compensating``: an operator's compensate); a cancel
    the app answered taken must end the order in one of those three."""
    s = ProcessState
    fine = [
        *_written("a", 0, (s.PROCESSING, s.COMPENSATING, 5), (s.COMPENSATING, s.COMPENSATED, 9)),
        *_written(
            "b", 0, (s.PROCESSING, s.ERROR, 5), (s.ERROR, s.COMPENSATING, 7), (s.COMPENSATING, s.COMPENSATION_FAILED, 8)
        ),
        *_written("b2", 0, (s.PROCESSING, s.PROCESSED, 5)),
        Transition(T0 + timedelta(seconds=9), "b", s.COMPENSATION_FAILED, s.COMPENSATING, "x", "op", None),
    ]
    finals = {"a": "Compensated", "b": "Compensating", "b2": "Processed"}
    assert left_compensation(fine, finals, [("a", T0), ("b", T0)]) == []
    went_on = [*_written("c", 0, (s.PROCESSING, s.COMPENSATING, 5), (s.COMPENSATING, s.PROCESSED, 6))]
    assert left_compensation(went_on, {"c": "Processed"}) == [
        f"c: Compensating -> Processed (x by y) at {T0 + timedelta(seconds=6)}, after Compensating at "
        f"{T0 + timedelta(seconds=5)}"
    ]
    # answered taken, and no write of it: the order ended Processed all the same
    assert left_compensation(fine, finals | {"b2": "Processed"}, [("b2", T0)]) == [
        f"b2: cancel taken at {T0}, ended Processed"
    ]


CANCELS = ROOT / "examples" / "profiles" / "operator-cancels.json"


def test_the_operators_cancels_are_taken_before_the_pivot_and_every_invariant_holds() -> None:
    result = run_simulation(SimulationConfig(orders=30, seed=1, profile=Profile.load(CANCELS)))
    report = build_report(result)
    assert report["invariants"] == dict.fromkeys(report["invariants"], 0), report["invariant_examples"]
    cancels = report["operator_actions"]["cancel"]
    assert cancels["done"] > 0 and cancels["refused"] > 0, cancels  # taken before the pivot, refused after
    assert result.events.count("OperatorCancelled") == cancels["done"] + cancels.get("repeated", 0)
    finals = {d["orderId"]: d["processState"] for d in result.states if "processState" in d}
    cancelled = {m.order_id for m in result.operator_moves if m.action == "cancel"}
    assert {finals[o] for o in cancelled} <= {"Compensated", "CompensationFailed"}, finals


def test_the_report_catches_a_cancel_answered_taken_that_did_not_stop_the_order() -> None:
    """Mutation: the ops API answers a cancel 200 without writing it (``update_once_or_reread`` handing back the
    record as it was): the order goes on to ``Processed``, and ``left_compensation`` names it, as does
    ``operator_answers_broken``."""
    with mock.patch.object(actions, "update_once_or_reread", lambda store, record, change: record):
        result = run_simulation(SimulationConfig(orders=30, seed=1, profile=Profile.load(CANCELS)))
    report = build_report(result)
    assert report["invariants"]["left_compensation"] >= 1, report["invariant_examples"]
    assert any("ended Processed" in s for s in report["invariant_examples"]["left_compensation"])
    # and the answer itself was untrue: no cancel of the operator's was ever written (``operator_answers_broken``)
    broken = report["invariant_examples"]["operator_answers_broken"]
    assert broken and all("cancel answered 200" in s and "no CompensationRequested write" in s for s in broken), broken
