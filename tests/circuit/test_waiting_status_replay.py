"""An attempt (or compensation round) that retries an outage wait does not send its progress status
again: the submitter was told "waiting for <dependency>" once by the supervisor. The scheduler's
``Processing`` is sent by ``load_order`` itself (``process_order_v2``), which reads the wait on the
record: replayed by the Durable SDK's own engine over synthetic histories (tests/durable_history.py),
the scheduler schedules no status activity either way; run against the Cosmos protocol server,
``load_order`` sends ``Processing`` unless the record is in an outage wait."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from activities import scheduler_steps
from domain import transitions
from orchestrators import names
from tests.activity_calls import run
from tests.durable_history import History
from tests.orchestrators.support import STEP, T0, sample_order

ORDER = sample_order()


@pytest.fixture(scope="module")
def scheduler(functions: dict[str, Any]) -> Any:
    return functions[names.SCHEDULER].func


def first_actions(scheduler: Any, outage_wait: bool | None) -> list[tuple[str, Any]]:
    plan: dict[str, Any] = {
        "owned": True,
        "order": ORDER,
        "completed": {},
        "stepTimeoutSeconds": STEP.total_seconds(),
        "replyTo": "replies-1",
    }
    if outage_wait is not None:
        plan["outageWait"] = outage_wait
    h = History("o1:3", {"orderId": "o1", "attempt": 3}, start=T0, name=names.SCHEDULER)
    h.activity_completed(names.LOAD_ORDER, plan, at=T0)
    result = h.run(scheduler)
    loads = [json.loads(a["input"]) for a in result.actions if a.get("functionName") == names.LOAD_ORDER]
    assert loads == [{"orderId": "o1", "instanceId": "o1:3", "attempt": 3}]  # load_order decides on the status
    return [
        (a.get("functionName", a.get("actionType", "")), json.loads(a.get("input") or "null"))
        for a in result.new_actions
    ]


@pytest.mark.parametrize("outage_wait", [True, False, None])  # None: a plan of a version without the key
def test_the_scheduler_goes_straight_from_the_load_to_its_first_step(scheduler, outage_wait):
    [(function, begin)] = first_actions(scheduler, outage_wait)
    assert function == names.BEGIN_STEP
    assert begin["request"]["step"] == "reserve-inventory"


def _claimed_record(app_context: Any, *, waiting: bool) -> str:
    """o1 claimed by its first attempt; ``waiting``: it is retrying an outage wait. Its instance id."""
    now = app_context.clock.now()
    app_context.orders.create_or_verify(ORDER)
    record = app_context.states.create(transitions.new_record("o1", "replies-1", now))
    claimed = transitions.claim(record, now, app_context.settings.start_grace)
    if waiting:
        claimed = replace(claimed, outage_wait_since=now)
    app_context.states.replace(replace(claimed, version=record.version))
    assert claimed.locked_by is not None
    return claimed.locked_by


@pytest.mark.cosmos
def test_load_order_of_a_retry_of_an_outage_wait_sends_no_status(app_context, sender):
    me = _claimed_record(app_context, waiting=True)
    plan = run(scheduler_steps.load_order, app_context, {"orderId": "o1", "instanceId": me, "attempt": 1})
    assert plan["owned"] and plan["outageWait"] is True
    assert sender.bodies("replies-1") == []


@pytest.mark.cosmos
def test_load_order_of_any_other_attempt_tells_the_submitter_it_is_processing(app_context, sender):
    me = _claimed_record(app_context, waiting=False)
    plan = run(scheduler_steps.load_order, app_context, {"orderId": "o1", "instanceId": me, "attempt": 1})
    assert plan["owned"] and plan["outageWait"] is False
    assert [(b["status"], b["attempt"]) for b in sender.bodies("replies-1")] == [("Processing", 1)]
    # without an attempt (as a v1 scheduler asked), the load announces nothing
    run(scheduler_steps.load_order, app_context, {"orderId": "o1", "instanceId": me})
    assert len(sender.bodies("replies-1")) == 1
