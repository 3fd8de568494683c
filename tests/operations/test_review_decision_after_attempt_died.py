"""An operator's answer is noted and told 200; then the state store is out longer than the attempt's
close retries, so the attempt fails before it acts. Through the real runtime: once the store is back and
the attempt's deadline has passed, the supervisor carries the answer out (it used to retry the step as if
nobody had decided), and the same answer posted again hears that it was taken. Posted again before the
supervisor's run, the answer is not taken back (a red team found it was: the operator, told 200 first,
then heard 409 "nothing is decided" and the order was retried)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import azure.durable_functions as df
import pytest

from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.review import ClosedReview, noted_answer, review_closed
from domain.states import ProcessState
from domain.timefmt import text_or_none
from tests.fakes import StateStoreThatFails
from tests.operations.harness import OpsHarness, first_review, paused_for_review

pytestmark = pytest.mark.cosmos

OPERATOR = "ops@contoso.example"


@pytest.fixture
def paused(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = paused_for_review(cosmos_db, "o-died", "600")  # the default (settings) is compensate
    yield made
    made.close()


def answered_then_attempt_lost(paused: OpsHarness, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, str], datetime]:
    """``fail`` posted a second before the review deadline and told 200, its event accepted (202) but not
    yet delivered; then every state write fails until past the deadline (longer than the close's
    retries), so the attempt fails before it acts. The store is back when this returns. The answer posted
    and the review deadline."""
    assert paused.ctx is not None
    _, deadline = paused.waiting_review("o-died")
    paused.host.run_until(deadline - timedelta(seconds=1))

    async def accepted_not_yet_delivered(self: Any, instance_id: str, event_name: str, event_data: Any = None) -> None:
        return None  # accepted (202); the attempt's timer fires before it sees the event

    monkeypatch.setattr(df.DurableOrchestrationClient, "raise_event", accepted_not_yet_delivered)
    answer = {"reviewId": first_review("o-died"), "action": "fail", "reason": "card stolen"}
    status, body = paused.post("/api/ops/orders/o-died/review", answer)
    monkeypatch.undo()
    assert status == 200 and body["decision"] == "fail", body

    store = StateStoreThatFails(paused.ctx.states, "replace")  # every write fails: an outage
    paused.change_context(states=store)
    paused.host.run_until(deadline + timedelta(seconds=30))  # the close is tried 3 times, 2 s and 10 s apart
    paused.run_until_idle()
    _, detail = paused.get("/api/ops/orders/o-died")
    assert detail["attempts"][0]["runtimeStatus"] == "Failed", detail["attempts"]
    store.failing.clear()  # the store is back; the supervisor has not reached completeBy yet
    return answer, deadline


def run_past_the_supervisors_recovery(paused: OpsHarness, deadline: datetime) -> None:
    assert paused.ctx is not None
    paused.host.run_until(deadline + paused.ctx.settings.start_grace + timedelta(minutes=1))
    paused.run_until_idle()


def test_a_noted_answer_is_carried_out_by_the_supervisor_when_the_attempt_fails_before_acting(
    paused: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert paused.ctx is not None
    pending, _ = paused.waiting_review("o-died")
    answer, deadline = answered_then_attempt_lost(paused, monkeypatch)
    run_past_the_supervisors_recovery(paused, deadline)

    record = paused.ctx.states.get("o-died")
    assert record is not None
    assert record.process_state is ProcessState.ERROR, (
        f"the operator was told 200 fail; the order is {record.process_state.value}: {record.last_error}"
    )
    assert record.failure_count == 0  # the operator's decision, not a retry
    assert review_closed(record, pending.review_id) == ClosedReview(pending.review_id, "fail", OPERATOR)
    alerts = [json.loads(m.body) for m in paused.broker.peek(OPERATOR_ALERTS_QUEUE, 100)]
    assert "OrderFailed" in [a["kind"] for a in alerts if a["orderId"] == "o-died"]

    status, again = paused.post("/api/ops/orders/o-died/review", answer)
    assert status == 200 and again["decision"] == "fail" and again["takenAtDeadline"] is True, again


def test_the_same_answer_posted_again_after_the_attempt_died_does_not_revoke_the_decision(
    paused: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "Did my answer go through?": posted again while the attempt is gone and before the supervisor's
    run, the answer stands (200, ``carriedOutBy: supervisor``, ``notBefore`` the record's ``completeBy``)
    and the supervisor then carries it out."""
    assert paused.ctx is not None
    answer, deadline = answered_then_attempt_lost(paused, monkeypatch)

    status, again = paused.post("/api/ops/orders/o-died/review", answer)
    noted = paused.ctx.states.get("o-died")
    assert noted is not None
    assert status == 200 and again["decision"] == "fail" and again["carriedOutBy"] == "supervisor", again
    assert noted_answer(noted) is not None  # not taken back
    assert again["notBefore"] == text_or_none(noted.complete_by)

    run_past_the_supervisors_recovery(paused, deadline)
    record = paused.ctx.states.get("o-died")
    assert record is not None
    assert record.process_state is ProcessState.ERROR, (
        f"the operator was told 200 fail; after posting it again the order is {record.process_state.value} "
        f"(attempt {record.attempt}, failureCount {record.failure_count})"
    )
