"""An attempt (or compensation round) that retries an outage wait does not send its progress status
again: the submitter was told "waiting for <dependency>" once by the supervisor. The scheduler's
``Processing`` is sent by the attempt's first ``begin_step`` (``process_order_v3``) when the
scheduler asks it to (``announce``), and the scheduler asks unless the plan the claim read says the
record is in an outage wait: replayed by the Durable SDK's own engine over synthetic histories
(tests/durable_history.py), the scheduler schedules no status activity either way and announces only
outside a wait; run against the Cosmos protocol server, the starter's claim reads the wait into the
plan."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from domain import transitions
from orchestrators import names, starter
from tests.durable_history import History
from tests.orchestrators.support import STEP, T0, sample_order

ORDER = sample_order()


@pytest.fixture(scope="module")
def scheduler(functions: dict[str, Any]) -> Any:
    return functions[names.SCHEDULER].func


def first_actions(scheduler: Any, outage_wait: bool | None) -> list[tuple[str, Any]]:
    plan: dict[str, Any] = {
        "order": ORDER,
        "completed": {},
        "stepTimeoutSeconds": STEP.total_seconds(),
        "replyTo": "replies-1",
    }
    if outage_wait is not None:
        plan["outageWait"] = outage_wait
    h = History("o1:3", {"orderId": "o1", "attempt": 3, "plan": plan}, start=T0, name=names.SCHEDULER)
    result = h.run(scheduler)
    return [
        (a.get("functionName", a.get("actionType", "")), json.loads(a.get("input") or "null"))
        for a in result.new_actions
    ]


@pytest.mark.parametrize("outage_wait", [True, False, None])  # None: a plan written without the key
def test_the_scheduler_starts_with_its_first_step_and_no_status_activity(scheduler, outage_wait):
    [(function, begin)] = first_actions(scheduler, outage_wait)
    assert function == names.BEGIN_STEP
    assert begin["request"]["step"] == "reserve-inventory"


def test_a_retry_of_an_outage_wait_does_not_announce_processing(scheduler):
    [(_, begin)] = first_actions(scheduler, True)
    assert "announce" not in begin


@pytest.mark.parametrize("outage_wait", [False, None])
def test_any_other_attempt_announces_processing_with_its_first_write(scheduler, outage_wait):
    [(_, begin)] = first_actions(scheduler, outage_wait)
    assert begin["announce"] is True


def _pending_record(app_context: Any, *, waiting: bool) -> Any:
    """o1 Pending for its first attempt; ``waiting``: it is retrying an outage wait."""
    now = app_context.clock.now()
    app_context.orders.create_or_verify(ORDER)
    record = app_context.states.create(transitions.new_record("o1", "replies-1", now))
    if waiting:
        record = app_context.states.replace(replace(record, outage_wait_since=now))
    return record


@pytest.mark.cosmos
@pytest.mark.parametrize("waiting", [True, False])
def test_the_starters_claim_reads_the_wait_and_the_order_into_the_plan(app_context, waiting):
    claim = starter.try_claim(app_context, _pending_record(app_context, waiting=waiting))
    assert claim is not None
    assert claim.plan.outage_wait is waiting
    assert claim.plan.order == ORDER and claim.plan.reply_to == "replies-1"
    started = claim.orchestration_input()
    assert (started["orderId"], started["attempt"], started["plan"]["outageWait"]) == ("o1", 1, waiting)
