"""Red team (rt-adapters-new), held: a state write whose answer was lost is read back at once
(``adapters.cosmos.state_store._read_back``), through the real azure-cosmos SDK against the protocol server's faults
(``cosmos_faults``): the write's fault and then its read-back's. Whatever the read-back meets (throttled past the
SDK's retries, a 503, a replica without the session's writes, no answer at all), a write that did not land is never
answered as made, and one that did is never made twice: the activity fails and Durable's next run of it finds the
write made or makes it; the operator's cancel is a 503 and posting it again takes it once."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from adapters.cosmos.errors import StoreUnavailable
from contracts.names import STATE_CONTAINER
from dependencies import AppContext
from domain.states import ProcessState
from localrun.cosmos_server import CosmosServer
from submission.intake import handle_orders_message
from tests.adapters.test_sdk_retries import ORDER, _pending
from tests.fakes import FakeReceivedMessage
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos

READ_BACK_FAULTS = [
    pytest.param({"status": 429, "retryAfterMs": 5, "times": 10}, id="429-past-the-sdks-retries"),
    pytest.param({"status": 503, "times": 2}, id="503-past-the-sdks-retry"),
    pytest.param({"status": 404, "substatus": 1002, "times": 2}, id="read-session-not-available"),
    pytest.param({"status": "drop", "times": 4}, id="no-answer"),
]
WRITE_FAULTS = [
    pytest.param({"status": "drop", "commit": True}, id="landed"),
    pytest.param({"status": "drop"}, id="not-landed"),
]


def _faults(write: dict[str, Any], read: dict[str, Any], reads_before: int = 0) -> list[dict[str, Any]]:
    """``write`` answering the replace, ``read`` its read-back (after ``reads_before`` reads let through)."""
    where = {"container": STATE_CONTAINER, "partitionKey": ORDER}
    return [{"op": "replace", **where, **write}, {"op": "read", **where, "skip": reads_before, **read}]


@pytest.mark.parametrize("read", READ_BACK_FAULTS)
@pytest.mark.parametrize("write", WRITE_FAULTS)
def test_a_fenced_write_whose_read_back_fails_fails_its_activity_and_is_made_once(
    cosmos_faults: CosmosServer,
    app_context: AppContext,
    write: dict[str, Any],
    read: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    from activities.scheduler_steps import begin_step
    from contracts.activities import StepBegun
    from tests.submission.test_received_owed import first_step

    submitted = handle_orders_message(app_context, FakeReceivedMessage.of(json.dumps(order(orderId=ORDER)).encode()))
    assert submitted.claim is not None
    step = first_step(app_context, submitted.claim)
    cosmos_faults.set_faults(_faults(write, read))
    with caplog.at_level(logging.INFO), pytest.raises(StoreUnavailable):
        begin_step(app_context, step)
    assert [f["op"] for f in cosmos_faults.faults_answered()][:2] == ["replace", "read"]
    unconfirmed = [r for r in caplog.records if getattr(r, "event", None) == "StateWriteUnconfirmed"]
    assert len(unconfirmed) == 1 and getattr(unconfirmed[0], "transition", None) == "StepStarted"
    assert not [r for r in caplog.records if getattr(r, "event", None) == "StateTransition"]

    cosmos_faults.set_faults([])
    assert isinstance(begin_step(app_context, step), StepBegun)  # Durable's next run of the activity
    record = app_context.states.get(ORDER)
    assert record is not None and list(record.steps) == ["reserve-inventory"]
    events = [h.event for h in record.history]
    assert events.count("StepStarted") == 1, events


@pytest.mark.parametrize("read", READ_BACK_FAULTS)
@pytest.mark.parametrize("write", WRITE_FAULTS)
def test_an_operators_cancel_whose_read_back_fails_is_a_503_and_taken_once_when_posted_again(
    cosmos_faults: CosmosServer, app_context: AppContext, write: dict[str, Any], read: dict[str, Any]
) -> None:
    from operations import actions

    ctx = _pending(app_context)
    cosmos_faults.set_faults(_faults(write, read, reads_before=1))  # the action reads the record first
    reply = actions.cancel(ctx, ORDER, "op@example.com", "customer called")
    assert reply.status == 503, reply.body
    assert [f["op"] for f in cosmos_faults.faults_answered()][:2] == ["replace", "read"]
    cosmos_faults.set_faults([])
    reply = actions.cancel(ctx, ORDER, "op@example.com", "customer called")
    assert reply.status in (200, 409), reply.body
    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.COMPENSATING
    assert [h.event for h in record.history].count("CompensationRequested") == 1


@pytest.mark.parametrize(
    "again",
    [
        pytest.param({"status": 503, "times": 2}, id="refused"),
        pytest.param({"status": "drop", "commit": True}, id="landed-answer-lost-again"),
        pytest.param({"status": "drop"}, id="lost-again"),
    ],
)
def test_a_lost_fenced_write_made_once_more_on_the_version_read_back_is_never_made_twice(
    cosmos_faults: CosmosServer, app_context: AppContext, again: dict[str, Any]
) -> None:
    """Not landed, its read-back shows the version it replaced: the same write is made once more on that version
    (``_read_back``), and that one meets a fault too."""
    from activities.scheduler_steps import begin_step
    from contracts.activities import StepBegun
    from tests.submission.test_received_owed import first_step

    submitted = handle_orders_message(app_context, FakeReceivedMessage.of(json.dumps(order(orderId=ORDER)).encode()))
    assert submitted.claim is not None
    step = first_step(app_context, submitted.claim)
    where = {"container": STATE_CONTAINER, "partitionKey": ORDER}
    cosmos_faults.set_faults([{"op": "replace", **where, "status": "drop"}, {"op": "replace", **where, **again}])
    with pytest.raises(StoreUnavailable):
        begin_step(app_context, step)
    assert [f["op"] for f in cosmos_faults.faults_answered()] == ["replace"] * (1 + again.get("times", 1))
    cosmos_faults.set_faults([])
    assert isinstance(begin_step(app_context, step), StepBegun)
    record = app_context.states.get(ORDER)
    assert record is not None
    events = [h.event for h in record.history]
    assert events.count("StepStarted") == 1, events


def test_a_write_refused_whose_read_back_gets_no_answer_is_not_logged_as_one_that_may_have_landed(
    cosmos_faults: CosmosServer, app_context: AppContext, caplog: pytest.LogCaptureFixture
) -> None:
    """Red team (rt-adapters-new): a 503 says the write was not carried out (``StoreUnavailable``, not
    ``StoreOutcomeUnknown``), so nothing is made again on the version read back. Its read-back losing its own answer
    logged ``StateWriteUnconfirmed`` ("it may have landed") for the cancel all the same: a move that never happened,
    shown as one that perhaps did."""
    from operations import actions

    ctx = _pending(app_context)
    cosmos_faults.set_faults(_faults({"status": 503, "times": 2}, {"status": "drop", "times": 4}, reads_before=1))
    with caplog.at_level(logging.INFO):
        reply = actions.cancel(ctx, ORDER, "op@example.com", "customer called")
    assert reply.status == 503, reply.body
    assert [f["op"] for f in cosmos_faults.faults_answered()] == ["replace"] * 2 + ["read"] * 4
    assert not [r for r in caplog.records if getattr(r, "event", None) == "StateWriteUnconfirmed"]


def _rule_matches(record: logging.LogRecord) -> bool:
    """Whether the ordersFailed rule (``infra/modules/alerts.bicep``) counts ``record``: an event its query names,
    moving to a state it names."""
    import re
    from pathlib import Path

    bicep = (Path(__file__).resolve().parents[2] / "infra" / "modules" / "alerts.bicep").read_text(encoding="utf-8")
    rule = bicep[bicep.index("resource ordersFailed") :]
    query = re.search(r"query: '([^']*)'", rule)
    assert query is not None
    states = {ProcessState.ERROR.value, ProcessState.COMPENSATION_FAILED.value}
    names = set(re.findall(r'"(\w+)"', query.group(1))) - states
    return getattr(record, "event", None) in names and getattr(record, "toState", None) in states


def test_an_order_failed_whose_answer_and_read_back_were_lost_reaches_the_failed_orders_alert(
    cosmos_faults: CosmosServer, app_context: AppContext, caplog: pytest.LogCaptureFixture
) -> None:
    """Red team (rt-adapters-new): ``fail_order``'s write (``Processing -> Error``) lands, its answer is lost and its
    read-back throttled past the SDK's retries: ``StateWriteUnconfirmed``, the activity fails. Durable's next run
    finds the write made (``WriteAlreadyMade``: nothing written, nothing logged), so no event the ordersFailed rule
    counts was ever logged for an order in Error: the case the read-back at once was made for, when the read-back
    fails (the failed-orders alert stayed silent; only the OrderFailed message paged)."""
    from activities.scheduler_steps import begin_step, fail_order
    from contracts.activities import OWNED, FailOrderInput
    from tests.submission.test_received_owed import first_step

    submitted = handle_orders_message(app_context, FakeReceivedMessage.of(json.dumps(order(orderId=ORDER)).encode()))
    assert submitted.claim is not None
    begin_step(app_context, first_step(app_context, submitted.claim))
    failed = FailOrderInput(
        order_id=ORDER,
        instance_id=submitted.claim.instance_id,
        step="reserve-inventory",
        attempt=submitted.claim.attempt,
        error="out of stock",
        write_number=2,
    )
    throttled = {"status": 429, "retryAfterMs": 5, "times": 10}
    cosmos_faults.set_faults(_faults({"status": "drop", "commit": True}, throttled))
    with caplog.at_level(logging.INFO):
        with pytest.raises(StoreUnavailable):
            fail_order(app_context, failed)
        cosmos_faults.set_faults([])
        assert fail_order(app_context, failed) == OWNED  # Durable's next run: found made
    record = app_context.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.ERROR
    assert [r for r in caplog.records if _rule_matches(r)], "no event the failed-orders alert counts"
