"""The plan of an attempt, read where its record is claimed and handed over in the scheduler's input.

Whoever claims a record for an attempt holds it and the order already (submission's fast path wrote
both; the starter's claim returns the record and reads the order), so the attempt needs no activity
of its own to learn them: its first fenced write (``begin_step`` or ``mark_processed``) is what checks
that it still holds the record. Nothing in the plan changes while the attempt holds the record: only
the holder writes steps, the order is immutable, and a supervisor's or operator's move takes the
record away (the first write then finds it ``NotOwned``)."""

from __future__ import annotations

from typing import Any

from contracts.activities import OrderPlan, ReviewSettings
from domain.records import StateRecord
from domain.states import StepStatus
from settings import Settings


def review_policy(settings: Settings) -> ReviewSettings:
    """What the scheduler needs to decide on review."""
    return ReviewSettings(
        amount_threshold_cents=settings.review_amount_threshold_cents,
        timeout_seconds=settings.review_timeout.total_seconds(),
        default_action=settings.review_default_action,
    )


def plan_attempt(settings: Settings, record: StateRecord, order: dict[str, Any]) -> OrderPlan:
    """The plan of the attempt ``record`` was just claimed for: the order, the results of steps done by
    earlier attempts, the agents of steps they left in flight, and the rules (settings) it runs by."""
    completed = {name: step.result or {} for name, step in record.steps.items() if step.status is StepStatus.SUCCEEDED}
    # A step an earlier attempt started and never finished, and the agent it last went to: this
    # attempt resumes with that agent (it may be the fallback, which may already have acted).
    in_flight = {name: step.agent for name, step in record.steps.items() if step.status is StepStatus.IN_PROGRESS}
    return OrderPlan(
        reply_to=record.reply_to,
        order=order,
        completed=completed,
        in_flight=in_flight,
        # waiting an outage out: the submitter was told so once (supervisor/outage.py), not per retry
        outage_wait=record.outage_wait_since is not None,
        step_timeout_seconds=settings.step_timeout.total_seconds(),
        review=review_policy(settings),
        # waiting for the payment notification: told once as well (supervisor/payment_wait.py)
        payment_wait=True if record.payment_wait_since is not None else None,
    )
