"""What the scheduler's replay tests share: a sample order, the clock of the synthetic histories, and
the start of an attempt's history (the scheduler's input: the order, the attempt and its plan)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from domain import compensation, transitions
from domain.timefmt import to_text
from orchestrators import names
from tests.durable_history import History

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
STEP = timedelta(seconds=60)  # the step timeout the attempt's plan hands the scheduler
AGENT_OF = {"reserve-inventory": "inventory", "charge-payment": "payment", "arrange-shipment": "shipping"}


def sample_order(order_id: str = "o1", *, total_cents: int = 1000, prepaid: bool = False) -> dict[str, Any]:
    """An order document as submission stores it: one line of sku A, ``total_cents`` in EUR."""
    return {
        "id": order_id,
        "orderId": order_id,
        "customerId": "c1",
        "lines": [{"sku": "A", "quantity": 2, "unitPriceCents": total_cents // 2}],
        "currency": "EUR",
        "shipTo": "1 Main St",
        "totalCents": total_cents,
        "replyTo": "client-statuses",
        "prepaid": prepaid,
        "schemaVersion": 1,
    }


def started_attempt(
    instance: str,
    order: dict[str, Any],
    attempt: int,
    *,
    completed: dict[str, Any] | None = None,
    review: dict[str, Any] | None = None,
    timer_per_round: bool = True,
    say_received: bool = False,
    reviews_fit_fallback: bool = True,
    deadline_at_begin: bool = False,
) -> History:
    """The history of one scheduler attempt as it starts: its input holds the plan the claim read (the
    results of steps ``completed`` by earlier attempts), so the first thing the scheduler schedules is
    the first step's ``begin_step`` (announcing ``Processing``)."""
    plan: dict[str, Any] = {
        "order": order,
        "completed": completed or {},
        "stepTimeoutSeconds": STEP.total_seconds(),
    }
    if review is not None:
        plan["review"] = review
    started: dict[str, Any] = {"orderId": order["orderId"], "attempt": attempt, "plan": plan}
    if timer_per_round:  # what the starter starts since that change; without it, an instance from before
        started["timerPerRound"] = True
    if reviews_fit_fallback:  # the same (``AttemptInput.reviews_fit_fallback``)
        started["reviewsFitFallback"] = True
    if say_received:  # a claim that cannot tell whether the submitter heard Received (the starter's attempt 1)
        started["sayReceived"] = True
    if deadline_at_begin:  # what the starter starts since a step's deadline is its begin_step's time plus the timeout
        started["deadlineAtBegin"] = True
    return History(instance, started, start=T0, name=names.SCHEDULER)


def claimed_round(ctx: Any, start: datetime, timeout: timedelta, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A state record in ``ctx.states``: the payment charged (``C-1``), then a compensation round claimed at
    ``start``; the undo entry's ``seq`` and its undo request (``request`` as the round's, deadline ``start +
    timeout``), as a round's ``begin_undo`` takes them."""
    record = transitions.new_claimed_record("o1", None, start, ctx.settings.start_grace)
    record = transitions.begin_step(record, "o1:1", "charge-payment", "payment", "r", start + timeout, start)
    record = compensation.complete_step_logged(record, "o1:1", "charge-payment", {"chargeId": "C-1"}, start, start)
    record = compensation.enter_compensation(record, "op", "undo it", start)
    record = compensation.claim_compensation(record, start, ctx.settings.start_grace, 3, "supervisor")
    ctx.states.create(record)
    [entry] = record.compensation
    undo = {**request, "instanceId": str(record.locked_by), "action": "undo", "deadline": to_text(start + timeout)}
    return entry.seq, undo
