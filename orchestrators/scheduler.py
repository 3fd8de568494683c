"""The scheduler: one Durable orchestration per attempt of an order.

For each step of the workflow table it (1) records, with a fenced write, that the step started
and its deadline (``completeBy``), (2) invokes the step's agent, (3) races the agent's reply
against a durable timer at that deadline. Every state write is an activity fenced by
``lockedBy``; the moment this attempt no longer owns the record it ends quietly.

If the timer wins, the orchestration ends *without touching the record*: recovery is the
supervisor's job, with its own conditional update. A late reply then finds no one waiting.

A non-transient failure goes to the decision function (``domain.compensation_policy``): the step's
fallback agent first, then compensation (handed over with a fenced write; the supervisor starts the
compensation orchestration), a pause for human review (high-impact orders), or Error.

Orchestrator code is deterministic: time comes from ``context.current_utc_datetime``, settings
from the ``load_order`` activity's recorded result, ids from ``domain.ids``; no I/O here.
"""

from __future__ import annotations

from collections.abc import Generator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

from domain.compensation_policy import REVIEW_CHOICES, Action, ReviewPolicy, Situation, Trigger, decide_compensation
from domain.ids import idempotency_key, request_id
from domain.payloads import step_payload
from domain.timefmt import to_text
from domain.workflow import STEPS, WORKFLOW, StepKind
from orchestrators import names
from orchestrators.agent_call import invoke_agent
from orchestrators.payment_wait import await_payment, capture_request
from orchestrators.result import OrchestrationResult, orchestration_result
from orchestrators.state_activity import call_state_activity
from orchestrators.status import call_publish_status


def process_order(context: df.DurableOrchestrationContext) -> Generator[Any, Any, OrchestrationResult]:
    started = context.get_input()
    order_id: str = started["orderId"]
    attempt: int = started["attempt"]
    me: str = context.instance_id

    plan = yield from call_state_activity(context, names.LOAD_ORDER, {"orderId": order_id, "instanceId": me})
    if not plan["owned"]:
        return orchestration_result("FencingLost", at="load")
    order: dict[str, Any] = plan["order"]
    results: dict[str, dict[str, Any]] = dict(plan["completed"])
    step_timeout = timedelta(seconds=plan["stepTimeoutSeconds"])
    if not plan.get("outageWait"):  # a retry of an outage wait: "waiting for ..." was said once
        yield from call_publish_status(context, order_id, "Processing", attempt, plan=plan)

    review: dict[str, Any] = plan.get("review") or {}
    policy = ReviewPolicy(int(review.get("amountThresholdCents", 0)))
    reviews = 0
    unanswered = 0  # reviews that timed out: the default re-runs a step once, then compensation

    for step in WORKFLOW:
        if step.name in results:  # done by an earlier attempt: never run a step twice
            continue
        # resume where an earlier attempt left the step: with its fallback agent, if it had got that far
        agent_name = (plan.get("inFlight") or {}).get(step.name, step.agent)
        tries = 0
        while True:
            tries += 1
            deadline = context.current_utc_datetime + step_timeout
            request = {
                "requestId": _step_request_id(me, step.name, agent_name, tries),
                "instanceId": me,
                "orderId": order_id,
                "step": step.name,
                "action": "do",
                "attempt": attempt,
                "deadline": to_text(deadline),
                "idempotencyKey": idempotency_key(order_id, step.name),
                "payload": step_payload(step.name, order, results),
            }
            began = yield from call_state_activity(context, names.BEGIN_STEP, {"request": request, "agent": agent_name})
            if not began["owned"]:
                return orchestration_result("FencingLost", at=step.name)
            if step.prepaid_action is not None and order.get("prepaid"):
                # A prepaid order: no charge; capture against the provider's notification.
                payment = yield from await_payment(context, began, deadline)
                if payment is None:
                    return orchestration_result("DeadlineExpired", step=step.name, waitingFor="PaymentNotification")
                request = capture_request(request, step.prepaid_action, payment)

            reply = yield from invoke_agent(context, agent_name, request, deadline)
            if reply is None:
                # The deadline passed first. Leave the record alone: the supervisor recovers it.
                return orchestration_result("DeadlineExpired", step=step.name)

            fenced = {"orderId": order_id, "instanceId": me, "step": step.name, "attempt": attempt}
            if reply["outcome"] == "succeeded":
                done = yield from call_state_activity(
                    context, names.COMPLETE_STEP, {**fenced, "result": reply.get("result") or {}}
                )
                if not done["owned"]:
                    return orchestration_result("FencingLost", at=step.name)
                results[step.name] = reply.get("result") or {}
                break
            if reply.get("transient"):
                # The agent used up its retries before the deadline. Pull completeBy to now so the
                # supervisor's next run retries the order (it owns the retry budget).
                yield from call_state_activity(
                    context, names.RELEASE_FOR_RETRY, {**fenced, "error": reply.get("error")}
                )
                return orchestration_result("TransientFailure", step=step.name, error=reply.get("error"))

            # A non-transient failure: the decision function says what happens next.
            error = reply.get("error")
            decision = decide_compensation(
                Situation(
                    trigger=Trigger.NON_TRANSIENT_FAILURE,
                    passed_pivot=step.kind is StepKind.RETRIABLE,
                    undo_pending=any(STEPS[name].kind is StepKind.COMPENSABLE for name in results),
                    amount_cents=int(order.get("totalCents", 0)),
                    # a prepaid order's payment was captured at its provider: no other provider can take over
                    fallback_left=step.fallback_agent is not None
                    and agent_name != step.fallback_agent
                    and not order.get("prepaid"),
                ),
                policy,
            )
            action, reason = decision.action, decision.reason
            if action is Action.USE_FALLBACK and step.fallback_agent is not None:
                agent_name = step.fallback_agent
                continue
            if action is Action.REVIEW:
                reviews += 1
                answer = yield from _await_review(context, fenced, review, error, reason, order, reviews)
                if answer is None:
                    return orchestration_result("FencingLost", at="review")
                choice, answered = answer
                reason = f"operator review chose {choice}"
                if not answered:
                    unanswered += 1
                    reason = f"review not answered in time: default {choice}"
                    if unanswered > 1:  # nobody is deciding: stop re-running the step on the default
                        choice, reason = "compensate", "reviews not answered in time twice: compensating"
                if choice == "retry" or (choice == "alternative" and step.fallback_agent is not None):
                    agent_name = step.agent if choice == "retry" else step.fallback_agent or step.agent
                    continue
                action = Action.COMPENSATE if choice == "compensate" else Action.FAIL
            if action is Action.COMPENSATE:
                handed = yield from call_state_activity(
                    context, names.REQUEST_COMPENSATION, {**fenced, "error": error, "reason": reason}
                )
                if not handed["owned"]:
                    return orchestration_result("FencingLost", at="compensate")
                return orchestration_result("CompensationRequested", step=step.name, error=error)
            failed = yield from call_state_activity(context, names.FAIL_ORDER, {**fenced, "error": error})
            if not failed["owned"]:
                return orchestration_result("FencingLost", at="fail")
            yield from call_publish_status(context, order_id, "Failed", attempt, f"{step.name}: {error}", plan=plan)
            return orchestration_result("Failed", step=step.name, error=error)

    done = yield from call_state_activity(
        context, names.MARK_PROCESSED, {"orderId": order_id, "instanceId": me, "attempt": attempt}
    )
    if not done["owned"]:
        return orchestration_result("FencingLost", at="processed")
    yield from call_publish_status(context, order_id, "Completed", attempt, plan=plan)
    return orchestration_result("Processed")


def _step_request_id(instance: str, step_name: str, agent_name: str, tries: int) -> str:
    """The first try of a step in an attempt keeps the plain id; a retry (fallback, review) gets its
    own, so duplicate detection and reply matching never confuse two tries."""
    plain = request_id(instance, step_name, agent_name)
    return plain if tries == 1 else f"{plain}:{tries}"


def _await_review(
    context: df.DurableOrchestrationContext,
    fenced: dict[str, Any],
    review: dict[str, Any],
    error: Any,
    reason: str,
    order: dict[str, Any],
    number: int,
) -> Generator[Any, Any, tuple[str, bool] | None]:
    """Pauses for an operator's ``ReviewDecision`` (an alert says what to decide) until the review
    deadline; then the configured default. Returns the choice and whether an operator made it, or
    None when fencing was lost."""
    review_id = f"{fenced['instanceId']}:{fenced['step']}:review:{number}"
    until = context.current_utc_datetime + timedelta(seconds=float(review.get("timeoutSeconds", 86400)))
    default = str(review.get("defaultAction", "compensate"))
    paused = yield from call_state_activity(
        context,
        names.AWAIT_REVIEW,
        {
            **fenced,
            "reviewId": review_id,
            "until": to_text(until),
            "error": error,
            "reason": reason,
            "defaultAction": default,
            "amountCents": order.get("totalCents"),
        },
    )
    if not paused["owned"]:
        return None
    timer = context.create_timer(until)
    while True:
        event = context.wait_for_external_event(names.REVIEW_DECISION_EVENT)
        winner = yield context.task_any([event, timer])
        if winner == timer:
            return default, False
        answer = event.result if isinstance(event.result, dict) else {}
        if answer.get("reviewId") == review_id and answer.get("action") in REVIEW_CHOICES:
            timer.cancel()
            return str(answer["action"]), True
        # An answer to another review (or malformed): keep waiting until the same deadline.
