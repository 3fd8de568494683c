"""The scheduler: one Durable orchestration per attempt of an order.

For each step of the workflow table it records the step's start and deadline (``completeBy``) with a fenced
write, invokes the step's agent, and races the reply against a durable timer at that deadline.

What the code relies on:
- Every state write is an activity fenced by ``lockedBy``, made through ``orchestrators.fenced.call_fenced``.
  Losing the record is one ``OwnershipLost``, caught once by ``process_order`` (``FencingLost``): the attempt
  ends quietly.
- A step's result is not a write of its own. It rides in ``Attempt.unrecorded`` into the next fenced write
  (the next ``begin_step`` or ``mark_processed``), so a result and the next start are one write. On the happy
  path an attempt is five activities.
- The write that makes a status true sends it: ``Processing`` from the attempt's first ``begin_step``,
  ``Completed`` from ``mark_processed``. ``begin_step`` also sends a Service Bus agent's request.
- Everything the attempt needs before its first write (``OrderPlan``) is in its input, read where the record
  was claimed (``orchestrators.attempt_plan``). The first fenced write checks the claim still holds.
- If the timer wins, the attempt ends without touching the record: the supervisor recovers it with its own
  conditional update, and a late reply finds no one waiting.
- A non-transient failure goes to the decision function (``domain.compensation_policy``): the step's fallback
  agent, compensation (handed over with a fenced write; the supervisor starts it), an operator review
  (``_review``, closed at its deadline by a fenced write: ``domain.review``), or Error.
- Orchestrator code is deterministic: time from ``context.current_utc_datetime``, settings from the plan in
  its recorded input, ids from ``domain.ids``; no I/O.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

from contracts.activities import (
    AgentAnswer,
    AttemptInput,
    AwaitReviewInput,
    BeginStepInput,
    CloseReviewInput,
    FailOrderInput,
    MarkProcessedInput,
    OrderPlan,
    ReleaseForRetryInput,
    RequestCompensationInput,
    StepResult,
    parse_begin_step,
    parse_close_review,
    parse_mark_processed,
    parse_write_result,
)
from domain.compensation_policy import (
    REVIEW_CHOICES,
    Action,
    ReviewPolicy,
    Situation,
    Trigger,
    decide_compensation,
    review_choices,
    review_outcome,
)
from domain.ids import idempotency_key, request_id
from domain.payloads import step_payload
from domain.workflow import STEPS, WORKFLOW, Step, StepKind, agent
from orchestrators import names
from orchestrators.agent_call import agent_request, invoke_agent
from orchestrators.external_events import abandon_wait, forget_delivered, keep_early_events
from orchestrators.fenced import FencedWrites, call_fenced, ends_quietly_when_fenced_out, hand_over
from orchestrators.payment_wait import await_payment, capture_request
from orchestrators.result import OrchestrationResult, orchestration_result
from orchestrators.state_activity import call_state_activity
from orchestrators.status import call_publish_status
from orchestrators.timers import cancel_open_timers, next_round_timer


@dataclass
class Attempt:
    """What one attempt knows as it goes: orchestrator memory, rebuilt identically on every replay.

    The flags from ``closes_reviews`` on choose between behaviours of scheduler versions. An instance started
    before a flag existed replays with it False, the way its history was recorded."""

    context: df.DurableOrchestrationContext
    writes: FencedWrites  # numbers the attempt's fenced writes (a late duplicate of one is refused)
    me: str  # this instance's id: what the fenced writes check ``lockedBy`` against
    order_id: str
    number: int
    plan: OrderPlan
    results: dict[str, dict[str, Any]]
    reviews: int = 0
    unanswered: int = 0  # reviews that timed out: the default re-runs a step once, then compensation
    unrecorded: StepResult | None = None  # the last step's result, recorded by the next fenced write
    announce: bool = False  # "Processing" not yet said: the next begin_step says it after its write
    # a "Received" perhaps never heard (the input's ``sayReceived``): the next begin_step says it before its write
    say_received: bool = False
    # process_order_v4: a review deadline is closed with a fenced write before acting; v3 takes the default at once
    closes_reviews: bool = True
    # ``timerPerRound``: after a skipped event, the next wait round races a timer of its own
    timer_per_round: bool = False
    # ``reviewsFitFallback``: a review's choices are read against the fallback that can take the step over for
    # this order (False: against the step's fallback)
    reviews_fit_fallback: bool = False
    # ``deadlineAtBegin``: a step's deadline is begin_step's time plus the timeout (False: the replay time plus it)
    deadline_at_begin: bool = False

    @property
    def detach_cancelled(self) -> Any:
        """The context ``cancel_timer`` needs to take a cancelled timer out of the SDK's open tasks; None on an
        instance started before ``timerPerRound``."""
        return self.context if self.timer_per_round else None

    def take_unrecorded(self) -> StepResult | None:
        result, self.unrecorded = self.unrecorded, None
        return result

    def take_announce(self) -> bool | None:
        announce, self.announce = self.announce, False
        return announce or None

    def take_say_received(self) -> bool | None:
        say, self.say_received = self.say_received, False
        return say or None

    @property
    def order(self) -> dict[str, Any]:
        return self.plan.order


@dataclass(frozen=True)
class Ended:
    """The attempt ends here, with this result."""

    result: OrchestrationResult


def process_order(
    context: df.DurableOrchestrationContext, *, closes_reviews: bool = True
) -> Generator[Any, Any, OrchestrationResult]:
    """Runs one attempt of an order. ``closes_reviews=False`` replays ``process_order_v3``, which takes a review's
    default at its deadline without the closing write (``_await_review``)."""
    keep_early_events(context)  # every event raised before its wait opens, in order (agent replies, reviews, payment)
    return (yield from ends_quietly_when_fenced_out(_run_attempt(context, closes_reviews)))


def _run_attempt(
    context: df.DurableOrchestrationContext, closes_reviews: bool
) -> Generator[Any, Any, OrchestrationResult]:
    started = AttemptInput.from_json(context.get_input())
    order_id, number, plan = started.order_id, started.attempt, started.plan
    me: str = context.instance_id
    # the first begin_step says "Processing", but not on an attempt waiting out an outage or a payment (said once)
    run = Attempt(
        context,
        FencedWrites(context),
        me,
        order_id,
        number,
        plan,
        dict(plan.completed),
        announce=not (plan.outage_wait or plan.payment_wait),
        say_received=bool(started.say_received),
        closes_reviews=closes_reviews,
        timer_per_round=bool(started.timer_per_round),
        reviews_fit_fallback=bool(started.reviews_fit_fallback),
        deadline_at_begin=bool(started.deadline_at_begin),
    )

    for step in WORKFLOW:
        if step.name in run.results:  # done by an earlier attempt: never run a step twice
            continue
        ended = yield from _run_step(run, step)
        if ended is not None:
            return ended.result

    processed = MarkProcessedInput(order_id=order_id, instance_id=me, attempt=number, completes=run.take_unrecorded())
    done = yield from hand_over(
        run.writes,
        names.MARK_PROCESSED,
        processed,
        parse_mark_processed,
        at="processed",
        order_id=order_id,
        state="Processed",
        attempt=number,
    )
    if done.status_sent is False:  # its one try failed: a final status is retried on durable timers
        yield from call_publish_status(context, order_id, "Completed", number, plan=plan)
    return orchestration_result("Processed")


def _run_step(run: Attempt, step: Step) -> Generator[Any, Any, Ended | None]:
    """Runs one step to its result (None: done, recorded) or to the end of the attempt."""
    # resume where an earlier attempt left the step: with its fallback agent, if it had got that far
    agent_name = run.plan.in_flight.get(step.name, step.agent)
    tries = 0
    while True:
        tries += 1
        reply = yield from _ask_agent(run, step, agent_name, tries)
        if isinstance(reply, Ended):
            return reply
        if reply.succeeded:
            result = reply.step_result
            run.results[step.name] = result
            run.unrecorded = StepResult(step=step.name, result=result)  # recorded by the next write
            return None
        if reply.transient:
            return (
                yield from _release_for_retry(
                    run, step, reply.error, still_working=reply.in_progress, dependency_open=reply.dependency_open
                )
            )
        # A non-transient failure: the decision function says what happens next.
        next_agent = yield from _handle_permanent_failure(run, step, agent_name, reply.error)
        if isinstance(next_agent, Ended):
            return next_agent
        agent_name = next_agent


def _ask_agent(run: Attempt, step: Step, agent_name: str, tries: int) -> Generator[Any, Any, AgentAnswer | Ended]:
    """Records the step's start and deadline, asks the agent, and races its reply against the deadline."""
    context = run.context
    deadline = context.current_utc_datetime + timedelta(seconds=run.plan.step_timeout_seconds)
    request = agent_request(
        request_id=_step_request_id(run.me, step.name, agent_name, tries),
        instance_id=run.me,
        order_id=run.order_id,
        step=step.name,
        action="do",
        attempt=run.number,
        deadline=deadline,
        idempotency_key=idempotency_key(run.order_id, step.name),
        payload=step_payload(step.name, run.order, run.results),
    )
    prepaid = step.prepaid_action is not None and bool(run.order.get("prepaid"))
    # the request goes out with the start, unless it waits for the payment (prepaid) or runs in-process
    queue = None if prepaid else agent(agent_name).request_queue
    begin = BeginStepInput(
        request=request,
        agent=agent_name,
        completes=run.take_unrecorded(),
        queue=queue,
        announce=run.take_announce(),
        say_received=run.take_say_received(),
        timeout_seconds=run.plan.step_timeout_seconds if run.deadline_at_begin else None,
    )
    began = yield from call_fenced(run.writes, names.BEGIN_STEP, begin, parse_begin_step, at=step.name)
    if run.deadline_at_begin and began.deadline is not None:
        # the deadline begin_step wrote and sent: its time plus the timeout, however long it waited for a worker
        deadline = began.deadline
        request = request.model_copy(update={"deadline": deadline})
    if prepaid and step.prepaid_action is not None:
        # A prepaid order: no charge; capture against the provider's notification.
        payment = yield from await_payment(context, began, deadline, detach=run.detach_cancelled)
        if payment is None:
            return Ended(orchestration_result("DeadlineExpired", step=step.name, waitingFor="PaymentNotification"))
        request = capture_request(request, step.prepaid_action, payment)

    reply = yield from invoke_agent(
        context, agent_name, request, deadline, timer_per_round=run.timer_per_round, sent=queue is not None
    )
    if reply is None:
        # The deadline passed first. Leave the record alone: the supervisor recovers it.
        return Ended(orchestration_result("DeadlineExpired", step=step.name))
    return reply


def _release_for_retry(
    run: Attempt, step: Step, error: Any, *, still_working: bool = False, dependency_open: bool = False
) -> Generator[Any, Any, Ended]:
    """Ends the attempt after the agent used up its retries before the deadline.

    Pulls ``completeBy`` to now, so the supervisor's next run retries the order (it owns the retry budget). The
    write's answer is not read: the attempt ends whether or not it still held the record. ``still_working``: the
    service said it still works on the step (an earlier call with its key), so the supervisor waits instead of
    counting a retry. ``dependency_open``: the agent made no call, the service's circuit open: the supervisor waits
    the outage out, whichever clock dated the circuit's closing."""
    release = ReleaseForRetryInput(
        order_id=run.order_id,
        instance_id=run.me,
        step=step.name,
        attempt=run.number,
        error=error,
        still_working=True if still_working else None,  # None: left out of the input, as older versions wrote it
        dependency_open=True if dependency_open else None,  # likewise
    )
    yield from call_state_activity(run.context, names.RELEASE_FOR_RETRY, run.writes.numbered(release).to_json())
    return Ended(orchestration_result("TransientFailure", step=step.name, error=error))


def _handle_permanent_failure(
    run: Attempt, step: Step, agent_name: str, error: Any
) -> Generator[Any, Any, str | Ended]:
    """Decides what follows a non-transient failure of ``agent_name``.

    Returns the agent to try the step with next (fallback, operator's retry or alternative), or the end of the
    attempt (compensation requested, or Failed)."""
    # a prepaid order was paid at its provider: no other provider can take over (``Step.fallback_for``)
    fallback = step.fallback_for(bool(run.order.get("prepaid")))
    decision = decide_compensation(
        Situation(
            trigger=Trigger.NON_TRANSIENT_FAILURE,
            passed_pivot=step.kind is StepKind.RETRIABLE,
            undo_pending=any(STEPS[name].kind is StepKind.COMPENSABLE for name in run.results),
            amount_cents=int(run.order.get("totalCents", 0)),
            fallback_left=fallback is not None and agent_name != fallback,
        ),
        ReviewPolicy(run.plan.review.amount_threshold_cents),
    )
    action, reason = decision.action, decision.reason
    if action is Action.USE_FALLBACK and fallback is not None:
        return fallback
    if action is Action.REVIEW:
        # an attempt started before ``reviewsFitFallback`` reads its review against the step's fallback, as recorded
        if not run.reviews_fit_fallback:
            fallback = step.fallback_agent
        choice, reason = yield from _review(run, step, error, reason, fallback)
        outcome = review_outcome(choice, fallback)
        if outcome in ("retry", "alternative"):
            return step.agent if outcome == "retry" else fallback or step.agent
        action = Action.COMPENSATE if outcome == "compensate" else Action.FAIL
    if action is Action.COMPENSATE:
        handed = RequestCompensationInput(
            order_id=run.order_id, instance_id=run.me, step=step.name, attempt=run.number, error=error, reason=reason
        )
        yield from call_fenced(run.writes, names.REQUEST_COMPENSATION, handed, parse_write_result, at="compensate")
        return Ended(orchestration_result("CompensationRequested", step=step.name, error=error))
    failed = FailOrderInput(order_id=run.order_id, instance_id=run.me, step=step.name, attempt=run.number, error=error)
    written = yield from call_fenced(run.writes, names.FAIL_ORDER, failed, parse_write_result, at="fail")
    if not written.moved_on:  # moved on: an operator resubmitted the order since, the submitter hears its next word
        yield from call_publish_status(
            run.context, run.order_id, "Failed", run.number, f"{step.name}: {error}", plan=run.plan
        )
    return Ended(orchestration_result("Failed", step=step.name, error=error))


def _review(
    run: Attempt, step: Step, error: Any, reason: str, fallback: str | None
) -> Generator[Any, Any, tuple[str, str]]:
    """Awaits an operator's review of the failure; returns the choice and the reason it is recorded with.

    An unanswered review takes the configured default; a second unanswered one in the attempt compensates.
    ``fallback``: the agent that can take the step over (``review_outcome``)."""
    run.reviews += 1
    choice, answered = yield from _await_review(run, step, error, reason, fallback)
    if answered:
        return choice, f"operator review chose {choice}"
    run.unanswered += 1
    if run.unanswered > 1:  # nobody is deciding: stop re-running the step on the default
        return "compensate", "reviews not answered in time twice: compensating"
    return choice, f"review not answered in time: default {choice}"


def _step_request_id(instance: str, step_name: str, agent_name: str, tries: int) -> str:
    """The request id of a try of a step: the plain id for the first try, a numbered one for a retry (fallback,
    review), so duplicate detection and reply matching never confuse two tries."""
    plain = request_id(instance, step_name, agent_name)
    return plain if tries == 1 else f"{plain}:{tries}"


def _await_review(
    run: Attempt, step: Step, error: Any, reason: str, fallback: str | None
) -> Generator[Any, Any, tuple[str, bool]]:
    """Waits for an operator's ``ReviewDecision`` until the review deadline; returns the choice and whether an
    operator made it.

    An alert says what to decide. At the deadline ``_close_review`` takes an answer noted in time, else the
    configured default. With ``reviewsFitFallback`` the alert offers ``review_choices(fallback)`` and the default is
    what it does there (``alternative`` with no fallback: ``fail``); an older instance offers every choice. Raises
    ``OwnershipLost`` when the record is lost."""
    context = run.context
    review = run.plan.review
    review_id = f"{run.me}:{step.name}:review:{run.reviews}"
    until = context.current_utc_datetime + timedelta(seconds=float(review.timeout_seconds))
    # a second review left unanswered compensates (``_review``): its alert and its close say so
    default = review.default_action if run.unanswered == 0 else "compensate"
    choices = None
    if run.reviews_fit_fallback:
        default, choices = review_outcome(default, fallback), list(review_choices(fallback))
    paused = AwaitReviewInput(
        order_id=run.order_id,
        instance_id=run.me,
        step=step.name,
        attempt=run.number,
        review_id=review_id,
        until=until,
        error=error,
        reason=reason,
        default_action=default,
        amount_cents=run.order.get("totalCents"),
        choices=choices,
    )
    yield from call_fenced(run.writes, names.AWAIT_REVIEW, paused, parse_write_result, at="review")
    timer = context.create_timer(until)
    timers = [timer]
    while True:
        event = context.wait_for_external_event(names.REVIEW_DECISION_EVENT)
        winner = yield context.task_any([event, timer])
        forget_delivered(context, names.REVIEW_DECISION_EVENT)  # an answer to another review comes once
        if winner == timer:
            abandon_wait(context, names.REVIEW_DECISION_EVENT, event)  # a later review's answer is not for it
            cancel_open_timers(timers, context=run.detach_cancelled)  # an earlier round's, due now too
            if not run.closes_reviews:
                return default, False
            return (yield from _close_review(run, review_id, default))
        answer = event.result if isinstance(event.result, dict) else {}
        if answer.get("reviewId") == review_id and answer.get("action") in REVIEW_CHOICES:
            cancel_open_timers(timers, context=run.detach_cancelled)
            return str(answer["action"]), True
        # An answer to another review (or malformed): keep waiting until the same deadline.
        timer = next_round_timer(context, timers, until, timer_per_round=run.timer_per_round)


def _close_review(run: Attempt, review_id: str, default: str) -> Generator[Any, Any, tuple[str, bool]]:
    """Closes the review at its deadline with one fenced write, so no answer is noted after it.

    An answer the record noted before the close wins, even if its event is still on its way (its operator was told
    it was taken); otherwise the default."""
    closing = CloseReviewInput(
        order_id=run.order_id, instance_id=run.me, attempt=run.number, review_id=review_id, default_action=default
    )
    closed = yield from call_fenced(run.writes, names.CLOSE_REVIEW, closing, parse_close_review, at="review")
    if closed.action not in REVIEW_CHOICES:  # a note the ops API would not have written: not an answer
        return default, False
    return closed.action, closed.operator is not None
