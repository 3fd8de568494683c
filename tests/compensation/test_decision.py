"""The decision function alone: every trigger, before and after the pivot."""

from __future__ import annotations

import pytest

from domain.compensation_policy import Action, ReviewPolicy, Situation, Trigger, decide_compensation

POLICY = ReviewPolicy(amount_threshold_cents=100_000)
SMALL, LARGE = 1_000, 250_000


def situation(trigger: Trigger, **facts: object) -> Situation:
    base: dict[str, object] = {"passed_pivot": False, "undo_pending": True, "amount_cents": SMALL}
    return Situation(trigger=trigger, **{**base, **facts})  # type: ignore[arg-type]


@pytest.mark.parametrize("trigger", list(Trigger))
def test_after_the_pivot_nothing_is_undone_whatever_the_trigger(trigger):
    decision = decide_compensation(
        situation(trigger, passed_pivot=True, fallback_left=True, amount_cents=LARGE), POLICY
    )
    assert decision.action is Action.REFUSE
    assert "point of no return" in decision.reason


def test_a_non_transient_failure_tries_the_fallback_agent_first():
    assert (
        decide_compensation(situation(Trigger.NON_TRANSIENT_FAILURE, fallback_left=True), POLICY).action
        is Action.USE_FALLBACK
    )


def test_a_non_transient_failure_after_the_fallback_also_failed_compensates():
    assert decide_compensation(situation(Trigger.NON_TRANSIENT_FAILURE), POLICY).action is Action.COMPENSATE


def test_a_non_transient_failure_with_nothing_to_undo_is_a_plain_failure():
    assert (
        decide_compensation(situation(Trigger.NON_TRANSIENT_FAILURE, undo_pending=False), POLICY).action is Action.FAIL
    )


def test_a_transient_failure_with_retries_left_is_retried_even_with_a_fallback():
    decision = decide_compensation(situation(Trigger.TRANSIENT_FAILURE, retries_left=True, fallback_left=True), POLICY)
    assert decision.action is Action.RETRY


def test_retries_exhausted_before_the_pivot_compensate():
    assert (
        decide_compensation(situation(Trigger.TRANSIENT_FAILURE, retries_left=False), POLICY).action
        is Action.COMPENSATE
    )


def test_retries_exhausted_with_nothing_to_undo_fail():
    decision = decide_compensation(situation(Trigger.TRANSIENT_FAILURE, undo_pending=False), POLICY)
    assert decision.action is Action.FAIL


@pytest.mark.parametrize("trigger", [Trigger.NON_TRANSIENT_FAILURE, Trigger.TRANSIENT_FAILURE])
def test_a_high_impact_failure_pauses_for_review(trigger):
    decision = decide_compensation(situation(trigger, amount_cents=LARGE), POLICY)
    assert decision.action is Action.REVIEW
    assert "250000" in decision.reason


def test_the_review_threshold_is_inclusive_and_zero_turns_review_off():
    assert (
        decide_compensation(situation(Trigger.NON_TRANSIENT_FAILURE, amount_cents=100_000), POLICY).action
        is Action.REVIEW
    )
    off = ReviewPolicy(amount_threshold_cents=0)
    assert (
        decide_compensation(situation(Trigger.NON_TRANSIENT_FAILURE, amount_cents=LARGE), off).action
        is Action.COMPENSATE
    )


def test_a_high_impact_failure_still_tries_the_fallback_before_review():
    decision = decide_compensation(
        situation(Trigger.NON_TRANSIENT_FAILURE, amount_cents=LARGE, fallback_left=True), POLICY
    )
    assert decision.action is Action.USE_FALLBACK


def test_a_cancellation_before_the_pivot_compensates_without_review():
    decision = decide_compensation(situation(Trigger.CANCEL_REQUESTED, amount_cents=LARGE), POLICY)
    assert decision.action is Action.COMPENSATE


def test_a_cancellation_with_nothing_done_still_compensates_an_empty_log():
    decision = decide_compensation(situation(Trigger.CANCEL_REQUESTED, undo_pending=False), POLICY)
    assert decision.action is Action.COMPENSATE
    assert "nothing to undo" in decision.reason


def test_a_cancellation_after_the_pivot_is_refused_with_a_reason():
    decision = decide_compensation(situation(Trigger.CANCEL_REQUESTED, passed_pivot=True), POLICY)
    assert decision.action is Action.REFUSE
    assert decision.reason
