"""The 64-bit rule belongs to typed integer fields; free-form JSON values the app passes through
(``result``, ``payload``, ``details``) keep any integer within the digit guard, exactly."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from contracts.messages import AgentReply, AgentRequest, OperatorAlert, StatusUpdate
from contracts.parsing import MAX_INT_DIGITS, MAX_STORED_INT, InvalidMessage, parse, read_outside_json

BIG = 2**64 - 1
AT = datetime(2026, 5, 1, 9, tzinfo=UTC)


def _request(payload: dict[str, Any]) -> AgentRequest:
    return AgentRequest(
        request_id="r-1",
        instance_id="o-1:1",
        order_id="o-1",
        step="charge-payment",
        action="undo",
        attempt=1,
        deadline=AT,
        idempotency_key="o-1:charge-payment:undo",
        payload=payload,
    )


def _reply(result: dict[str, Any]) -> AgentReply:
    return AgentReply(
        request_id="r-1", instance_id="o-1:1", order_id="o-1", step="charge-payment", outcome="succeeded", result=result
    )


@pytest.mark.parametrize("number", [BIG, -(2**70), 10**4299, -(10**4299)])
def test_free_form_integers_round_trip_exactly(number: int) -> None:
    reply = parse(_reply({"authorization": number, "nested": [{"n": number}]}).to_json(), {"AgentReply": AgentReply})
    assert reply.result == {"authorization": number, "nested": [{"n": number}]}
    undo = parse(_request({"charge": {"authorization": number}}).to_json(), {"AgentRequest": AgentRequest})
    assert undo.payload == {"charge": {"authorization": number}}
    alert = OperatorAlert(alert_id="a", kind="K", severity="error", summary="s", details={"n": number}, at=AT)
    assert parse(alert.to_json(), {"OperatorAlert": OperatorAlert}).details == {"n": number}


def test_the_digit_guard_still_holds_in_free_form_values() -> None:
    text = _reply({"n": 0}).to_json().replace('"n":0', '"n":' + "9" * (MAX_INT_DIGITS + 1))
    with pytest.raises(InvalidMessage) as caught:
        parse(text, {"AgentReply": AgentReply})
    assert caught.value.reason == "InvalidFields" and "'result.n'" in caught.value.description


@pytest.mark.parametrize("attempt", [2**63, 2**64, 10**30])
def test_typed_integers_keep_their_bound(attempt: int) -> None:
    body = json.loads(_request({}).to_json())
    with pytest.raises(InvalidMessage) as caught:
        parse(json.dumps({**body, "attempt": attempt}), {"AgentRequest": AgentRequest})
    assert caught.value.reason == "InvalidFields" and "attempt" in caught.value.description
    status = json.loads(StatusUpdate(order_id="o-1", status="Processing", attempt=1, at=AT).to_json())
    with pytest.raises(InvalidMessage) as caught:
        parse(json.dumps({**status, "attempt": attempt}), {"StatusUpdate": StatusUpdate})
    assert "attempt" in caught.value.description


def test_a_uint64_step_result_crosses_the_activity_protocol_exactly() -> None:
    from contracts.activities import BeginStepInput, StepResult, UndoEntry

    result = {"chargeId": "ch-1", "authorization": BIG, "legs": [{"id": -(2**70)}]}
    begin = BeginStepInput(request=_request({"charge": result}), agent="payment", completes=StepResult("c", result))
    crossed = BeginStepInput.from_json(json.loads(json.dumps(begin.to_json())))  # what a history records
    assert crossed.completes is not None and crossed.completes.result == result
    assert crossed.request.payload == {"charge": result}
    entry = UndoEntry(seq=1, step="charge-payment", agent="payment", data=result)
    assert UndoEntry.from_json(json.loads(json.dumps(entry.to_json()))).data == result


@pytest.mark.cosmos
@pytest.mark.parametrize(
    ("number", "kept"),
    [(MAX_STORED_INT, True), (-MAX_STORED_INT, True), (BIG, False)],
    ids=["2**53-1", "-(2**53-1)", "uint64"],
)
def test_what_the_state_store_keeps_exactly_is_what_the_entry_point_accepts(
    app_context: Any, number: int, kept: bool
) -> None:
    """Why ``read_outside_json`` refuses integers past 2**53: a Cosmos DB document rounds them (the
    protocol server here does), so a step result or an undo's data would change after the call."""
    from dataclasses import replace

    from domain import transitions
    from domain.records import CompensationEntry, StepState
    from domain.states import StepStatus

    result = {"chargeId": "ch-1", "authorization": number, "legs": [{"id": number}]}

    record = transitions.new_record("o-big", None, AT)
    record = replace(
        record,
        steps={
            "charge-payment": StepState(
                status=StepStatus.SUCCEEDED, agent="payment", request_id="r", attempt=1, started_at=AT, result=result
            )
        },
        compensation=[
            CompensationEntry(
                seq=1, step="charge-payment", agent="payment", undo_action="refund", data=result, attempt=1, at=AT
            )
        ],
    )
    app_context.states.create(record)
    stored = app_context.states.get("o-big")
    assert (stored.steps["charge-payment"].result == result and stored.compensation[0].data == result) is kept
    with pytest.raises(ValueError, match="cannot be carried exactly") if not kept else contextlib.nullcontext():
        assert read_outside_json(json.dumps(result)) == result
