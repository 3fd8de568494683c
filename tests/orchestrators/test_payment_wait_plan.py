"""An attempt of an order waiting for its payment notification (``paymentWaitSince``, docs/supervisor.md,
"Waiting for a payment") does not announce ``Processing`` again: the submitter heard "waiting for the
payment notification" once, when the wait began, not once per attempt of it."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from domain import transitions
from orchestrators import names
from orchestrators.attempt_plan import plan_attempt
from settings import Settings
from tests.durable_history import History
from tests.orchestrators.support import STEP, T0, sample_order

ORDER = sample_order(prepaid=True)


@pytest.fixture(scope="module")
def scheduler(functions: dict[str, Any]) -> Any:
    return functions[names.SCHEDULER].func


def test_the_plan_says_the_order_waits_for_its_payment_only_when_it_does() -> None:
    record = transitions.claim(transitions.new_record("o1", "client-statuses", T0), T0, STEP)
    plain = plan_attempt(Settings.from_env({}), record, ORDER)
    assert plain.payment_wait is None and "paymentWait" not in plain.to_json()
    waiting = plan_attempt(Settings.from_env({}), replace(record, payment_wait_since=T0), ORDER)
    assert waiting.payment_wait is True and waiting.to_json()["paymentWait"] is True


@pytest.mark.parametrize(("payment_wait", "announced"), [(None, True), (True, False)])
def test_an_attempt_of_a_payment_wait_does_not_announce_processing_again(
    scheduler: Any, payment_wait: bool | None, announced: bool
) -> None:
    plan: dict[str, Any] = {"order": ORDER, "completed": {}, "stepTimeoutSeconds": STEP.total_seconds()}
    if payment_wait is not None:
        plan["paymentWait"] = payment_wait
    started = {"orderId": "o1", "attempt": 4, "plan": plan, "timerPerRound": True}
    result = History("o1:4", started, start=T0, name=names.SCHEDULER).run(scheduler)
    [begin] = [json.loads(a["input"]) for a in result.actions if a.get("functionName") == names.BEGIN_STEP]
    assert (begin.get("announce") is True) is announced
