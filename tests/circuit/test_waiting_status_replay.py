"""An attempt (or compensation round) that retries an outage wait does not send its progress status
again: the submitter was told "waiting for <dependency>" once by the supervisor. Replayed by the
Durable SDK's own engine over synthetic histories (tests/durable_history.py)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrators import names
from tests.durable_history import History
from tests.orchestrators.support import STEP, T0, sample_order

ORDER = sample_order()


@pytest.fixture(scope="module")
def scheduler(functions: dict[str, Any]) -> Any:
    return functions[names.SCHEDULER].func


def first_actions(scheduler: Any, outage_wait: bool | None) -> list[str]:
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
    return [a.get("functionName", a.get("actionType", "")) for a in h.run(scheduler).new_actions]


def test_a_retry_of_an_outage_wait_goes_straight_to_its_step(scheduler):
    assert first_actions(scheduler, True)[0] == names.BEGIN_STEP


@pytest.mark.parametrize("outage_wait", [False, None])  # None: a plan of a version without the key
def test_any_other_attempt_tells_the_submitter_it_is_processing(scheduler, outage_wait):
    assert first_actions(scheduler, outage_wait)[0] == names.PUBLISH_STATUS
