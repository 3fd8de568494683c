"""Red team 5: the review answer is noted, then raised, and taken back when the raise fails
(operations/blueprint.py ``ops_review``, operations/actions.py ``take_back_answer``). Through the real
runtime, with a real paused attempt (the fixture of test_review_flow.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df
import pytest

from adapters.cosmos.errors import StoreUnavailable
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.review import review_answer
from domain.states import ProcessState
from tests.operations.harness import OpsHarness, first_review, paused_for_review

pytestmark = pytest.mark.cosmos

REVIEW_ID = "o-big:1:charge-payment:review:1"


@pytest.fixture
def paused(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = paused_for_review(cosmos_db, "o-big", "600")
    yield made
    made.close()


def test_an_answer_the_attempt_received_is_never_taken_back_and_no_second_answer_is_said_applied(
    paused: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FINDING. ``raise_event``'s response is lost after the extension took the event (a timeout, a
    5xx after the enqueue: the SDK raises a plain Exception for both). ``ops_review`` treats every
    exception as "not delivered": ``take_back_answer`` writes ``ReviewRequested`` again, the first
    operator hears 409 "did not take the answer", and the review is answerable again. A second answer
    (here ``compensate``) is then noted and answered 200, while the attempt acts on the first
    (``fail``): the record's answer (``review_answer``: the last note) and the 200 say compensate, the
    order is Error. Only a definite "no such instance / not running" (404/410) may take the note back."""
    assert paused.ctx is not None
    original = df.DurableOrchestrationClient.raise_event
    calls: list[str] = []

    async def lost_response(self: Any, instance_id: str, event_name: str, event_data: Any = None, **kw: Any) -> None:
        await original(self, instance_id, event_name, event_data, **kw)  # the extension took it
        calls.append(str((event_data or {}).get("action")))
        if len(calls) == 1:
            raise Exception("the response of the raise-event request was lost (timeout)")

    monkeypatch.setattr(df.DurableOrchestrationClient, "raise_event", lost_response)

    status, body = paused.post(
        "/api/ops/orders/o-big/review", {"reviewId": first_review("o-big"), "action": "fail", "reason": "card blocked"}
    )
    assert calls == ["fail"], calls  # delivered, whatever the response said
    second_status, second = paused.post(
        "/api/ops/orders/o-big/review",
        {"reviewId": first_review("o-big"), "action": "compensate", "reason": "refund instead"},
    )
    paused.run_until_idle()

    record = paused.ctx.states.get("o-big")
    assert record is not None
    acted = record.process_state  # the attempt acted on the first event it got: fail
    noted = review_answer(record, REVIEW_ID)
    assert acted is ProcessState.ERROR, acted
    assert noted is not None and noted.action == "fail", (
        f"the attempt failed the order on the first answer (told {status}: {body.get('error')}), but the record "
        f"says {noted} and the second answer was told {second_status} {second.get('decision')}"
    )
    assert second_status == 409, second


def test_the_ops_view_of_a_review_gives_the_deadline_the_attempt_decides_at(paused: OpsHarness) -> None:
    """FINDING (older than today's fixes, in the view the fixes build on). The ``ReviewRequired`` alert
    says "decide by" the attempt's real deadline (``until``); the record's ``ReviewRequested`` detail,
    which ``pending_review`` reads and the ops console shows as ``decideBy``, holds
    ``until + START_GRACE`` (activities/compensation_steps.py ``await_review`` passes ``keep_until``
    to ``compensation.await_review`` for both ``completeBy`` and the detail). An operator answering
    between the two is told 200, and the attempt has already taken its default."""
    assert paused.ctx is not None
    alerts = [json.loads(m.body) for m in paused.broker.peek(OPERATOR_ALERTS_QUEUE, 100)]
    required = [a for a in alerts if a["kind"] == "ReviewRequired"]
    assert len(required) == 1, [a["kind"] for a in alerts]
    status, detail = paused.get("/api/ops/orders/o-big")
    assert status == 200 and detail["review"] is not None, detail
    assert detail["review"]["decideBy"] == required[0]["details"]["decideBy"], (
        f"console decideBy {detail['review']['decideBy']} vs the alert's {required[0]['details']['decideBy']} "
        f"(start grace {paused.ctx.settings.start_grace})"
    )


def test_an_answer_after_the_review_deadline_is_not_said_applied(paused: OpsHarness) -> None:
    """The attempt's timer won (the default is taken) but its next write has not landed yet: the record
    still reads ``ReviewRequested`` and the instance still runs. ``review_to_answer`` never compares
    ``decideBy`` with the clock, so the answer is noted and the operator told 200 with a decision the
    attempt does not take."""
    assert paused.ctx is not None
    paused.clock.advance_to(paused.clock.now() + timedelta(seconds=601))  # past the review deadline
    # the default is compensate (the alert says so): answer something else
    status, body = paused.post(
        "/api/ops/orders/o-big/review", {"reviewId": first_review("o-big"), "action": "fail", "reason": "late"}
    )
    paused.run_until_idle()
    record = paused.ctx.states.get("o-big")
    assert record is not None
    assert status == 409 or record.process_state is ProcessState.ERROR, (
        f"told {status} {body.get('decision')} after the deadline; the attempt took its default and the order is "
        f"{record.process_state.value}; the record notes {review_answer(record, REVIEW_ID)}"
    )


def test_an_answer_whose_note_lost_its_response_still_reaches_the_attempt(
    paused: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FINDING. ``claim_answer`` notes the answer with ``update_once``, which does not read back a write
    whose response was lost (``update_once_or_reread`` does, for the starter and the supervisor). The
    note lands, the operator gets 503 and no event is raised; answering again is 409 "not waiting for a
    review" (the record's last entry is the note). The review is stuck: the attempt waits for an
    answer nobody can give, then takes its default, and the record says the operator answered."""
    assert paused.ctx is not None
    store = paused.ctx.states
    replace_record = store.replace
    lost: list[str] = []

    def lose_the_notes_response(record: Any) -> Any:
        written = replace_record(record)
        if not lost and record.history and record.history[-1].event == "ReviewAnswered":
            lost.append(record.history[-1].detail)
            raise StoreUnavailable("Cosmos DB 408: the response was lost after the write")
        return written

    monkeypatch.setattr(store, "replace", lose_the_notes_response)
    first = paused.post(
        "/api/ops/orders/o-big/review", {"reviewId": first_review("o-big"), "action": "fail", "reason": "card blocked"}
    )
    again = paused.post(
        "/api/ops/orders/o-big/review", {"reviewId": first_review("o-big"), "action": "fail", "reason": "card blocked"}
    )
    paused.run_until_idle()

    record = paused.ctx.states.get("o-big")
    assert record is not None
    assert lost, "the note was never written"
    assert record.process_state is ProcessState.ERROR, (
        f"answered {first[0]} then {again[0]} ({again[1].get('error')}); the order is {record.process_state.value}, "
        f"its record notes {review_answer(record, REVIEW_ID)}, and the attempt still waits for the answer"
    )
