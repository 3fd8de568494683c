"""A prepaid order's payment step under review, replayed: no other provider can take the capture over
(the customer paid at the first provider), so a review's ``alternative`` is read as on a step without
a fallback (``fail``: Error, nothing undone), its default too, and the alert offers no ``alternative``.

Attempts started before that change (no ``reviewsFitFallback`` in their input) replay as recorded: an
``alternative`` runs the capture through the backup provider, as their history says it did."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from contracts.names import AGENT_REPLY_EVENT
from orchestrators import names
from tests.compensation.test_scheduler_failure_replay import ME, new_inputs, reply
from tests.durable_history import History, ReplayResult
from tests.orchestrators.early_histories import PAYMENT
from tests.orchestrators.support import STEP, sample_order, started_attempt

REVIEW_FOR = timedelta(hours=1)
CAPTURE = f"{ME}:charge-payment:payment"


@pytest.fixture(scope="module")
def scheduler(functions: dict[str, Any]) -> Any:
    return functions[names.SCHEDULER].func


def _capture_refused(scheduler: Any, fits: bool, default_action: str = "compensate") -> tuple[History, dict[str, Any]]:
    """A high-value prepaid order: reserved, its payment on the record, the capture refused for good:
    the attempt pauses for review (the backup provider is not tried: a prepaid order never falls back)."""
    review = {
        "amountThresholdCents": 100_000,
        "timeoutSeconds": REVIEW_FOR.total_seconds(),
        "defaultAction": default_action,
    }
    # ``fits``: what the starter starts since the change; without it, an instance started before
    h = started_attempt(
        ME, sample_order(total_cents=250_000, prepaid=True), 1, review=review, reviews_fit_fallback=fits
    )
    h.activity_completed(names.BEGIN_STEP, {"owned": True}, at=h.now)
    call = h.activity_scheduled(names.in_process_agent("inventory"))
    h.timer_created_not_fired(h.now + STEP)
    value = reply("reserve-inventory", f"{ME}:reserve-inventory:inventory", result={"reservationId": "R-1"})
    h.complete_activity(call, value, at=h.now + timedelta(seconds=1))
    h.activity_completed(names.BEGIN_STEP, {"owned": True, "payment": PAYMENT}, at=h.now)
    h.activity_completed(names.SEND_AGENT_REQUEST, None, at=h.now)
    h.timer_created_not_fired(h.now + STEP)
    refused = reply("charge-payment", CAPTURE, ok=False, error="capture refused")
    h.event_raised(AGENT_REPLY_EVENT, refused, at=h.now + timedelta(seconds=2))
    [(function, paused)] = new_inputs(h.run(scheduler))
    assert function == names.AWAIT_REVIEW
    h.activity_completed(names.AWAIT_REVIEW, {"owned": True}, at=h.now)
    paused["timer"] = h.timer_created_not_fired(datetime.fromisoformat(paused["until"]))
    return h, paused


def _answered(scheduler: Any, h: History, paused: dict[str, Any], action: str) -> ReplayResult:
    decision = {"reviewId": paused["reviewId"], "action": action, "operator": "ana"}
    h.event_raised(names.REVIEW_DECISION_EVENT, decision, at=h.now + timedelta(minutes=5))
    return h.run(scheduler)


def test_an_attempt_started_before_replays_an_alternative_through_the_backup_as_recorded(scheduler: Any) -> None:
    h, paused = _capture_refused(scheduler, fits=False)
    assert paused["defaultAction"] == "compensate" and "choices" not in paused
    [(function, begin)] = new_inputs(_answered(scheduler, h, paused, "alternative"))
    assert function == names.BEGIN_STEP and begin["agent"] == "payment-backup"


def test_an_alternative_that_reaches_a_new_attempt_fails_the_order(scheduler: Any) -> None:
    h, paused = _capture_refused(scheduler, fits=True)
    assert paused["choices"] == ["compensate", "retry", "fail"]
    [(function, failed)] = new_inputs(_answered(scheduler, h, paused, "alternative"))
    assert function == names.FAIL_ORDER and failed["step"] == "charge-payment"


@pytest.mark.parametrize("fits", [False, True])
def test_a_retry_runs_the_capture_again_with_the_first_provider(scheduler: Any, fits: bool) -> None:
    h, paused = _capture_refused(scheduler, fits=fits)
    [(function, begin)] = new_inputs(_answered(scheduler, h, paused, "retry"))
    assert function == names.BEGIN_STEP and begin["agent"] == "payment"
    assert "queue" not in begin  # a capture's request goes out after the payment is known


@pytest.mark.parametrize(
    ("fits", "default", "then"), [(False, "alternative", names.BEGIN_STEP), (True, "fail", names.FAIL_ORDER)]
)
def test_a_default_alternative(scheduler: Any, fits: bool, default: str, then: str) -> None:
    h, paused = _capture_refused(scheduler, fits=fits, default_action="alternative")
    assert paused["defaultAction"] == default  # what the alert tells the operator happens by default
    h.fire_timer(paused["timer"], datetime.fromisoformat(paused["until"]))  # nobody answered
    [(function, closing)] = new_inputs(h.run(scheduler))
    assert function == names.CLOSE_REVIEW
    h.activity_completed(names.CLOSE_REVIEW, {"owned": True, "action": default, "operator": None}, at=h.now)
    assert closing["defaultAction"] == default
    [(function, data)] = new_inputs(h.run(scheduler))
    assert function == then
    if then == names.BEGIN_STEP:
        assert data["agent"] == "payment-backup"
