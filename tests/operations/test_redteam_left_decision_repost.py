"""Red team of 10ee105: an answer told 200 is revoked by posting it again.

10ee105 makes a noted answer left by an attempt that died a decision the supervisor carries out (the
operator "had been told 200"). But the same answer posted again while the attempt is gone and before
the supervisor's run (the record's ``completeBy`` is the review deadline plus ``START_GRACE``) goes to
``take_back_answer``: the note is taken back (``ReviewRequested`` written again), the operator now hears
409 "nothing is decided", and the supervisor retries the step as if nobody had decided, which is what
the change set out to stop. A repeat of an answer is documented as harmless (``delivery_uncertain``:
"post the same answer again ... (a repeat is harmless)"; docs/compensation.md: an answer posted again
after the attempt acted is 200 under ``_v4``), and nothing else can decide the review any more (the
deadline has passed: any answer is refused 409).

Expected: the repeat is answered 200 (the decision stands: the supervisor carries it out), and the
order ends in Error as the first 200 said. Actual: 409, the note is taken back, and the order is retried.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df
import pytest

from domain.states import ProcessState
from tests.fakes import StateStoreThatFails
from tests.operations.harness import OpsHarness, first_review, paused_for_review

pytestmark = pytest.mark.cosmos


@pytest.fixture
def paused(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = paused_for_review(cosmos_db, "o-repost", "600")
    yield made
    made.close()


def test_the_same_answer_posted_again_after_the_attempt_died_does_not_revoke_the_decision(
    paused: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert paused.ctx is not None
    _, deadline = paused.waiting_review("o-repost")
    paused.host.run_until(deadline - timedelta(seconds=1))

    async def accepted_not_yet_delivered(self: Any, instance_id: str, event_name: str, event_data: Any = None) -> None:
        return None  # accepted (202); the attempt's timer fires before it sees the event

    monkeypatch.setattr(df.DurableOrchestrationClient, "raise_event", accepted_not_yet_delivered)
    answer = {"reviewId": first_review("o-repost"), "action": "fail", "reason": "card stolen"}
    status, body = paused.post("/api/ops/orders/o-repost/review", answer)
    monkeypatch.undo()
    assert status == 200 and body["decision"] == "fail", body

    store = StateStoreThatFails(paused.ctx.states, "replace")  # an outage longer than the close's retries
    paused.change_context(states=store)
    paused.host.run_until(deadline + timedelta(seconds=30))
    paused.run_until_idle()
    store.failing.clear()  # the store is back; the supervisor has not reached completeBy yet
    _, detail = paused.get("/api/ops/orders/o-repost")
    assert detail["attempts"][0]["runtimeStatus"] == "Failed", detail["attempts"]

    status, again = paused.post("/api/ops/orders/o-repost/review", answer)  # "did my answer go through?"
    grace = paused.ctx.settings.start_grace
    paused.host.run_until(deadline + grace + timedelta(minutes=1))
    paused.run_until_idle()
    record = paused.ctx.states.get("o-repost")
    assert record is not None

    assert status == 200 and again.get("decision") == "fail", (status, again)
    assert record.process_state is ProcessState.ERROR, (
        f"the operator was told 200 fail; after posting it again the order is {record.process_state.value} "
        f"(attempt {record.attempt}, failureCount {record.failure_count})"
    )
