"""The one decision function: when an order cannot go forward as planned, what happens next.

Pure: it reads a ``Situation`` (facts about the order, gathered by the caller) and a
``ReviewPolicy`` (from the settings) and returns a ``CompensationDecision``. The scheduler (non-transient step
failure), the supervisor (retries exhausted) and the cancellation handler (``CancelOrder``) all ask
it, so the rules live in one place:

1. Past the pivot (the shipment was arranged, or may have been: it is in flight) nothing is undone:
   a cancellation is refused (``CancellationRejected``), a failure goes to ``Error`` for an operator.
2. A transient failure with retries left is retried (the supervisor's budget).
3. A non-transient failure of a step that names a fallback agent not yet tried: try the fallback.
4. Nothing to undo: a failure is a plain ``Error``; a cancellation still compensates (an empty log
   ends ``Compensated`` at once, which is what "cancelled before anything happened" means).
5. High impact (the order total is at least ``REVIEW_AMOUNT_THRESHOLD_CENTS``): a failure pauses for
   human review. A customer's cancellation is not ambiguous and never waits for review.
6. Otherwise: compensate.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# What an operator may answer to a review pause (the ``action`` of a ``ReviewDecision`` event):
# undo the completed steps, run the step again, run it through its fallback agent, or fail the order
# (Error, nothing undone).
REVIEW_CHOICES: tuple[str, ...] = ("compensate", "retry", "alternative", "fail")


def review_outcome(choice: str, fallback_agent: str | None) -> str:
    """What a review's ``choice`` does to a step whose fallback agent is ``fallback_agent`` (the one that
    can take the step over for the order: ``Step.fallback_for``): the choice itself, except
    ``alternative`` with no fallback, which fails the order (nothing else can run the step: a step
    without a fallback, a prepaid order's payment). The attempt acting on its review and the supervisor
    acting on a review the attempt left (``domain.compensation.act_on_left_decision``) both read a choice
    through this."""
    return "fail" if choice == "alternative" and fallback_agent is None else choice


def review_choices(fallback_agent: str | None) -> tuple[str, ...]:
    """The answers offered for a review of a step whose fallback agent is ``fallback_agent`` (as in
    ``review_outcome``): every choice, but ``alternative`` only where a fallback can take over (else it
    would only mean ``fail``). The review alert, the ops API and the console offer these."""
    return REVIEW_CHOICES if fallback_agent is not None else tuple(c for c in REVIEW_CHOICES if c != "alternative")


class Trigger(StrEnum):
    NON_TRANSIENT_FAILURE = "NonTransientFailure"  # an agent's error reply that retrying cannot fix
    TRANSIENT_FAILURE = "TransientFailure"  # a deadline missed or retries used up inside one attempt
    CANCEL_REQUESTED = "CancelRequested"  # a client's CancelOrder


class Action(StrEnum):
    RETRY = "Retry"  # leave it to the supervisor's retry budget
    USE_FALLBACK = "UseFallback"  # run the same step through its fallback agent
    COMPENSATE = "Compensate"  # undo the completed steps, newest first
    REVIEW = "Review"  # pause; an operator decides (compensate / retry / alternative)
    REFUSE = "Refuse"  # past the pivot: undo nothing (cancellation rejected, failure -> Error)
    FAIL = "Fail"  # nothing to undo: Error, an operator is alerted


@dataclass(frozen=True)
class Situation:
    trigger: Trigger
    passed_pivot: bool  # the pivot step succeeded, or its outcome is unknown (in flight)
    undo_pending: bool  # the log has entries not yet undone, or a compensable step's outcome is unknown
    amount_cents: int  # the order total
    fallback_left: bool = False  # the failing step has a fallback agent that has not been tried
    retries_left: bool = False  # for TRANSIENT_FAILURE: the supervisor's threshold is not reached


@dataclass(frozen=True)
class ReviewPolicy:
    amount_threshold_cents: int = 0  # 0: never pause for review

    def is_high_impact(self, amount_cents: int) -> bool:
        return self.amount_threshold_cents > 0 and amount_cents >= self.amount_threshold_cents


@dataclass(frozen=True)
class CompensationDecision:
    action: Action
    reason: str


def decide_compensation(situation: Situation, policy: ReviewPolicy) -> CompensationDecision:
    s = situation
    if s.passed_pivot:
        return CompensationDecision(
            Action.REFUSE, "the shipment is arranged (or being arranged): past the point of no return"
        )
    if s.trigger is Trigger.TRANSIENT_FAILURE and s.retries_left:
        return CompensationDecision(Action.RETRY, "transient failure; the supervisor retries within its budget")
    if s.trigger is Trigger.NON_TRANSIENT_FAILURE and s.fallback_left:
        return CompensationDecision(Action.USE_FALLBACK, "the step's agent failed for good; trying its fallback agent")
    if not s.undo_pending:
        if s.trigger is Trigger.CANCEL_REQUESTED:
            return CompensationDecision(Action.COMPENSATE, "cancelled before any step completed: nothing to undo")
        return CompensationDecision(Action.FAIL, "failed before any compensable step completed: nothing to undo")
    if s.trigger is not Trigger.CANCEL_REQUESTED and policy.is_high_impact(s.amount_cents):
        return CompensationDecision(
            Action.REVIEW,
            f"order total {s.amount_cents} cents is at least the review threshold "
            f"{policy.amount_threshold_cents}: an operator decides",
        )
    if s.trigger is Trigger.CANCEL_REQUESTED:
        return CompensationDecision(Action.COMPENSATE, "cancelled by the client before the pivot")
    return CompensationDecision(Action.COMPENSATE, "the order cannot go forward: undoing the completed steps")
