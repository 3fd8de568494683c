"""The typed activity protocol (``contracts.activities``) speaks exactly the JSON of the dict-based
protocol before it: orchestrations in flight replay their recorded inputs and results with the new
code. For every activity, an input and each kind of result as the old code wrote them parse into
the typed value and serialise back to the same JSON, key order included. The scheduler's ``_v2``
(issue 15) added optional keys (``begin_step``'s ``completes`` and ``queue``, ``mark_processed``'s
``completes`` and its ``statusSent`` answer), and ``_v3`` ``begin_step``'s ``announce`` and its
``statusSent`` answer: the examples hold inputs with and without them, as each version writes them.
``_v3``'s own input (``AttemptInput``, the plan ``load_order`` used to answer) is checked the same way."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from contracts import activities as protocol
from contracts.messages import AgentRequest
from orchestrators import names

ORDER = {
    "id": "o1",
    "orderId": "o1",
    "customerId": "c1",
    "lines": [{"sku": "A", "quantity": 2, "unitPriceCents": 500}],
    "currency": "EUR",
    "shipTo": "1 Main St",
    "totalCents": 1000,
    "replyTo": "client-statuses",
    "prepaid": False,
    "schemaVersion": 1,
}
# An agent request as the old scheduler built it (a dict, no ``type``/``schemaVersion``).
REQUEST = {
    "requestId": "o1:1:charge-payment:payment",
    "instanceId": "o1:1",
    "orderId": "o1",
    "step": "charge-payment",
    "action": "do",
    "attempt": 1,
    "deadline": "2026-03-01T08:01:00.000000Z",
    "idempotencyKey": "o1:charge-payment",
    "payload": {"amountCents": 1000, "currency": "EUR", "customerId": "c1", "prepaid": False},
}
UNDO_REQUEST = {
    **REQUEST,
    "requestId": "o1:compensate:3:charge-payment:payment:undo:1",
    "instanceId": "o1:compensate:3",
    "action": "undo",
    "attempt": 3,
    "idempotencyKey": "o1:charge-payment:undo",
    "payload": {"chargeId": "C-1", "seq": 2},
}
FENCED = {"orderId": "o1", "instanceId": "o1:1"}
STEP = {**FENCED, "step": "charge-payment", "attempt": 1}
# A step result carried by the scheduler into its next fenced write (the previous step's result).
COMPLETES = {"step": "reserve-inventory", "result": {"reservationId": "R-1"}}
OWNED = {"owned": True}
NOT_OWNED = {"owned": False}
ENTRY = {
    "seq": 2,
    "step": "charge-payment",
    "agent": "payment",
    "data": {"chargeId": "C-1"},
    "outcome": None,
    "at": "2026-03-01T08:00:30.000000Z",
}

# The plan of an attempt, as the scheduler's input carries it (``AttemptInput.plan``).
PLAN: dict[str, Any] = {
    "replyTo": "client-statuses",
    "order": ORDER,
    "completed": {},
    "inFlight": {},
    "outageWait": False,
    "stepTimeoutSeconds": 60.0,
    "review": {"amountThresholdCents": 0, "timeoutSeconds": 3600.0, "defaultAction": "fail"},
}
# The scheduler's inputs as the starter and submission write them.
ATTEMPT_INPUTS: list[dict[str, Any]] = [
    {"orderId": "o1", "attempt": 1, "plan": PLAN},
    {
        "orderId": "o1",
        "attempt": 2,
        "plan": {
            "replyTo": "client-statuses",
            "order": ORDER,
            "completed": {"reserve-inventory": {"reservationId": "R-1"}},
            "inFlight": {"charge-payment": "payment-backup"},
            "outageWait": False,
            "stepTimeoutSeconds": 60.0,
            "review": {"amountThresholdCents": 100000, "timeoutSeconds": 86400.0, "defaultAction": "compensate"},
        },
    },
    {"orderId": "o1", "attempt": 3, "plan": {**PLAN, "replyTo": None, "outageWait": True}},
    # the starter's attempt 1 (or a fast-path claim whose Received mark was given up): Received said first
    {"orderId": "o1", "attempt": 1, "plan": PLAN, "timerPerRound": True, "sayReceived": True},
    # since a review's choices fit the fallback that can take the step over (a prepaid order's payment: none)
    {"orderId": "o1", "attempt": 1, "plan": PLAN, "timerPerRound": True, "reviewsFitFallback": True},
    {"orderId": "o1", "attempt": 1, "plan": PLAN, "timerPerRound": True, "deadlineAtBegin": True},
]

# name: (input type, inputs as recorded, result parser or None, results as recorded)
RECORDED: dict[str, tuple[Any, list[dict[str, Any]], Any, list[dict[str, Any]]]] = {
    names.BEGIN_STEP: (
        protocol.BeginStepInput,
        [
            {"request": REQUEST, "agent": "payment"},  # in-process, a prepaid payment, or a first step
            {"request": REQUEST, "agent": "payment", "completes": COMPLETES},  # prepaid: the request waits
            {"request": REQUEST, "agent": "payment", "queue": "payment-requests"},
            {"request": REQUEST, "agent": "payment", "queue": "payment-requests", "announce": True},  # _v3's first
            {"request": REQUEST, "agent": "payment", "announce": True},  # _v3's first, in-process or prepaid
            {"request": REQUEST, "agent": "payment-backup", "completes": COMPLETES, "queue": "payment-requests"},
            {
                "request": {**REQUEST, "step": "arrange-shipment"},
                "agent": "shipping",
                "completes": {"step": "charge-payment", "result": {}},  # an empty result is a result
                "queue": "shipping-requests",
            },
            {"request": REQUEST, "agent": "payment", "queue": "payment-requests", "writeNumber": 2},  # numbered
            {  # the first write of an attempt unsure its submitter heard Received
                "request": REQUEST,
                "agent": "payment",
                "queue": "payment-requests",
                "announce": True,
                "writeNumber": 1,
                "sayReceived": True,
            },
            # an attempt started with deadlineAtBegin: the deadline is the write's time plus the timeout
            {
                "request": REQUEST,
                "agent": "payment",
                "queue": "payment-requests",
                "writeNumber": 2,
                "timeoutSeconds": 60.0,
            },
        ],
        protocol.parse_begin_step,
        [
            OWNED,
            NOT_OWNED,
            {"owned": True, "statusSent": True},  # asked to announce the attempt: Processing went out
            {"owned": True, "statusSent": False},  # asked, and the send failed
            {"owned": True, "deadline": "2026-03-01T08:01:30.000000Z"},  # asked with timeoutSeconds: as written
            {
                "owned": True,
                "payment": {
                    "notificationId": "N-1",
                    "providerReference": "PR-1",
                    "amountCents": 1000,
                    "currency": "EUR",
                    "receivedAt": "2026-03-01T07:59:00.000000Z",
                },
            },
        ],
    ),
    names.SEND_AGENT_REQUEST: (
        protocol.SendAgentRequestInput,
        [{"queue": "shipping-requests", "request": {**REQUEST, "step": "arrange-shipment"}}],
        None,
        [],
    ),
    names.RELEASE_FOR_RETRY: (
        protocol.ReleaseForRetryInput,
        [
            {**STEP, "error": "timeout talking to the bank"},
            {**STEP, "error": None},
            {**STEP, "error": None, "writeNumber": 3},
        ],
        protocol.parse_write_result,
        [OWNED, NOT_OWNED],
    ),
    names.FAIL_ORDER: (
        protocol.FailOrderInput,
        [{**STEP, "error": "card declined"}, {**STEP, "error": None}, {**STEP, "error": "declined", "writeNumber": 4}],
        protocol.parse_write_result,
        [OWNED, NOT_OWNED],
    ),
    names.MARK_PROCESSED: (
        protocol.MarkProcessedInput,
        [
            {**FENCED, "attempt": 2},  # every step done by earlier attempts: nothing left to record
            {**FENCED, "attempt": 2, "completes": {"step": "arrange-shipment", "result": {"trackingId": "T-1"}}},
            {**FENCED, "attempt": 2, "writeNumber": 4},
        ],
        protocol.parse_mark_processed,
        [
            {"owned": True, "statusSent": True},
            {"owned": True, "statusSent": False},
            {"owned": True, "statusSent": None},  # no replyTo, or a queue that refuses: nothing to retry
            NOT_OWNED,
        ],
    ),
    names.SETTLE_RETIRED_ATTEMPT: (
        protocol.SettleRetiredInput,
        [{"orderId": "o1", "instanceId": "o1:1", "attempt": 1}],
        protocol.parse_retired_settled,
        [
            {"released": True, "completedStatus": None},
            {"released": False, "completedStatus": True},
            {"released": False, "completedStatus": False},
            {"released": False, "completedStatus": None},
        ],
    ),
    names.PUBLISH_STATUS: (
        protocol.PublishStatusInput,
        [
            {"orderId": "o1", "status": "Processing", "attempt": 1, "replyTo": "client-statuses"},
            {"orderId": "o1", "status": "Failed", "attempt": 1, "replyTo": "q", "reason": "charge-payment: no"},
            {"orderId": "o1", "status": "Completed", "attempt": 1},  # replyTo not known: read from the record
            {"orderId": "o1", "status": "Received", "attempt": 0, "replyTo": None},  # the courier's
            {"orderId": "o1", "status": "Completed", "attempt": 1, "replyTo": "q", "receivedTriesLeft": 9},
            {
                "orderId": "o1",
                "status": "Completed",
                "attempt": 1,
                "replyTo": "q",
                "lastTry": True,
                "receivedTriesLeft": 0,
            },
        ],
        protocol.parse_publish_status,  # None (sent, or nothing to send), a refusal of the reply queue, or the
        # Received owed before the status not sent (its timers count those tries apart):
        [
            {"refused": True, "error": "'client-statuses' refuses this app"},
            {"unsent": "Received", "error": "send to 'client-statuses' failed"},
        ],
    ),
    names.SEND_ALERT: (
        protocol.SendAlertInput,
        [
            {
                "alert": {
                    "type": "OperatorAlert",
                    "schemaVersion": 1,
                    "alertId": "alert:OrderRejected:p1:42",
                    "kind": "OrderRejected",
                    "severity": "warning",
                    "orderId": "p1",
                    "summary": "order p1 rejected: 1000 orders pending (MAX_PENDING)",
                    "details": {"sequenceNumber": 42},
                    "at": "2026-03-01T08:00:00.000000Z",
                }
            }
        ],
        None,
        [],
    ),
    names.REQUEST_COMPENSATION: (
        protocol.RequestCompensationInput,
        [{**STEP, "error": "card declined", "reason": "operator review chose compensate"}],
        protocol.parse_write_result,
        [OWNED, NOT_OWNED],
    ),
    names.AWAIT_REVIEW: (
        protocol.AwaitReviewInput,
        [
            {
                **STEP,
                "reviewId": "o1:1:charge-payment:review:1",
                "until": "2026-03-02T08:01:00.000000Z",
                "error": "card declined",
                "reason": "high-impact order: review",
                "defaultAction": "compensate",
                "amountCents": 250000,
            },
            {  # an attempt started with reviewsFitFallback: the answers the alert offers (a prepaid payment's)
                **STEP,
                "reviewId": "o1:1:charge-payment:review:1",
                "until": "2026-03-02T08:01:00.000000Z",
                "error": "capture refused",
                "reason": "high-impact order: review",
                "defaultAction": "fail",
                "amountCents": 250000,
                "writeNumber": 3,
                "choices": ["compensate", "retry", "fail"],
            },
        ],
        protocol.parse_write_result,
        [OWNED, NOT_OWNED],
    ),
    names.CLOSE_REVIEW: (
        protocol.CloseReviewInput,
        [{**FENCED, "attempt": 1, "reviewId": "o1:1:charge-payment:review:1", "defaultAction": "compensate"}],
        protocol.parse_close_review,
        [
            {"owned": True, "action": "compensate", "operator": None},
            {"owned": True, "action": "fail", "operator": "ops@contoso.example"},
            NOT_OWNED,
        ],
    ),
    names.LOAD_COMPENSATION: (
        protocol.LoadCompensationInput,
        [{"orderId": "o1", "instanceId": "o1:compensate:3"}],
        protocol.parse_load_compensation,
        [
            NOT_OWNED,
            {
                "owned": True,
                "replyTo": "client-statuses",
                "outageWait": False,
                "entries": [ENTRY, {**ENTRY, "seq": 1, "step": "reserve-inventory", "outcome": "Undone"}],
                "stepTimeoutSeconds": 60.0,
                "undoTries": 3,
                "retryBaseSeconds": 10.0,
                "retryMaxSeconds": 300.0,
            },
        ],
    ),
    names.BEGIN_UNDO: (
        protocol.BeginUndoInput,
        [
            {"request": UNDO_REQUEST, "agent": "payment", "seq": 2},
            {"request": UNDO_REQUEST, "agent": "payment", "seq": 2, "writeNumber": 2},
            {"request": UNDO_REQUEST, "agent": "payment", "seq": 2, "writeNumber": 2, "timeoutSeconds": 60.0},
        ],
        protocol.parse_begin_undo,
        # a round started with deadlineAtBegin is answered its deadline as written
        [OWNED, NOT_OWNED, {"owned": True, "deadline": "2026-03-01T08:01:30.000000Z"}],
    ),
    names.HOLD_UNDO: (
        protocol.HoldUndoInput,
        [
            {"orderId": "o1", "instanceId": "o1:compensate:3", "seq": 2, "until": "2026-03-01T09:00:12.000000Z"},
            {
                "orderId": "o1",
                "instanceId": "o1:compensate:3",
                "seq": 2,
                "until": "2026-03-01T09:00:12.000000Z",
                "writeNumber": 3,
            },
        ],
        protocol.parse_write_result,
        [OWNED, NOT_OWNED],
    ),
    names.RELEASE_UNDO: (
        protocol.ReleaseUndoInput,
        [
            {
                "orderId": "o1",
                "instanceId": "o1:compensate:3",
                "seq": 2,
                "error": "payment unavailable (circuit open): not called",
                "writeNumber": 3,
            },
            {"orderId": "o1", "instanceId": "o1:compensate:3", "seq": 2, "error": None, "writeNumber": 3},
        ],
        protocol.parse_write_result,
        [OWNED, NOT_OWNED],
    ),
    names.RECORD_UNDO: (
        protocol.RecordUndoInput,
        [
            {"orderId": "o1", "instanceId": "o1:compensate:3", "seq": 2},
            {
                "orderId": "o1",
                "instanceId": "o1:compensate:3",
                "seq": 2,
                "result": {"refundId": None, "amountCents": 0},
            },
        ],
        protocol.parse_write_result,
        [OWNED, NOT_OWNED],
    ),
    names.FINISH_COMPENSATION: (
        protocol.FinishCompensationInput,
        [
            {"orderId": "o1", "instanceId": "o1:compensate:3"},
            {"orderId": "o1", "instanceId": "o1:compensate:3", "writeNumber": 6},
        ],
        protocol.parse_write_result,
        [OWNED, NOT_OWNED],
    ),
    names.FAIL_COMPENSATION: (
        protocol.FailCompensationInput,
        [
            {
                "orderId": "o1",
                "instanceId": "o1:compensate:3",
                "seq": 2,
                "error": "refund refused (transient; 3 tries)",
            },
            {"orderId": "o1", "instanceId": "o1:compensate:3", "seq": 2, "error": None},
            {
                "orderId": "o1",
                "instanceId": "o1:compensate:3",
                "seq": 2,
                "error": "503 (transient; 3 tries used up)",
                "writeNumber": 4,
                "usedUpTries": True,
            },
        ],
        protocol.parse_write_result,
        [OWNED, NOT_OWNED],
    ),
}


def test_every_activity_of_the_orchestrations_has_recorded_examples() -> None:
    activities = {
        value
        for key, value in vars(names).items()
        if key.isupper()
        and isinstance(value, str)
        and not re.search(r"_v[0-9]+$", value)  # an orchestration's versioned name
        and value != names.REVIEW_DECISION_EVENT
    }
    assert activities == set(RECORDED)
    assert names.SCHEDULER not in activities and not {"complete_step", "load_order"} & activities


def _same_json(a: Any, b: Any) -> bool:
    """Equal, and the same text: key order too."""
    return a == b and json.dumps(a) == json.dumps(b)


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_a_recorded_input_parses_and_serialises_back_unchanged(name: str) -> None:
    input_type, inputs, _, _ = RECORDED[name]
    for recorded in inputs:
        typed = input_type.from_json(recorded)
        assert _same_json(typed.to_json(), recorded)
        assert input_type.from_json(json.loads(json.dumps(typed.to_json()))) == typed


@pytest.mark.parametrize("name", sorted(n for n, r in RECORDED.items() if r[2] is not None))
def test_a_recorded_result_parses_into_the_typed_result_and_serialises_back_unchanged(name: str) -> None:
    _, _, parse, results = RECORDED[name]
    for recorded in results:
        typed = parse(recorded)
        assert isinstance(typed, protocol.NotOwned) is (recorded == NOT_OWNED)
        if "owned" in recorded:  # a fenced activity's (settle_retired_attempt is not fenced: it reads first)
            assert getattr(typed, "owned", None) is recorded["owned"]
        assert _same_json(typed.to_json(), recorded)


def test_a_recorded_scheduler_input_parses_and_serialises_back_unchanged() -> None:
    for recorded in ATTEMPT_INPUTS:
        typed = protocol.AttemptInput.from_json(recorded)
        assert _same_json(typed.to_json(), recorded)
        assert typed.plan.reply_to_known and typed.attempt == recorded["attempt"]
    waiting = protocol.AttemptInput.from_json(ATTEMPT_INPUTS[2]).plan
    assert (waiting.reply_to, waiting.outage_wait) == (None, True)


def test_results_recorded_by_older_shapes_still_parse_with_the_old_defaults() -> None:
    """The scheduler read ``inFlight``, ``outageWait`` and ``review`` with defaults, and a plan without
    ``replyTo`` made the status activity read the record: the typed plan keeps those meanings."""
    plan = protocol.OrderPlan.from_json({"order": ORDER, "completed": {}, "stepTimeoutSeconds": 60.0})
    assert (plan.in_flight, plan.outage_wait, plan.reply_to_known) == ({}, False, False)
    assert plan.review == protocol.ReviewSettings(0, 86400.0, "compensate")
    rounds = protocol.parse_load_compensation(
        {"owned": True, "entries": [], "stepTimeoutSeconds": 60.0, "undoTries": 3, "retryBaseSeconds": 10.0}
        | {"retryMaxSeconds": 300.0}
    )
    assert isinstance(rounds, protocol.CompensationPlan)
    assert (rounds.outage_wait, rounds.reply_to_known) == (False, False)


def test_the_lean_keys_are_optional_and_absent_means_the_old_meaning() -> None:
    """Without ``announce`` begin_step announces nothing; without ``completes`` a write records no
    step result; without ``queue`` begin_step sends nothing; an owned mark_processed answer without
    ``statusSent`` (as ``_v1`` recorded it) means the status was not sent, so the scheduler sends it."""
    begin = protocol.BeginStepInput.from_json({"request": REQUEST, "agent": "payment"})
    assert (begin.completes, begin.queue, begin.announce) == (None, None, None)
    assert "announce" not in begin.to_json()
    assert protocol.parse_begin_step(OWNED) == protocol.StepBegun()
    processed = protocol.MarkProcessedInput.from_json({**FENCED, "attempt": 1})
    assert processed.completes is None
    old = protocol.parse_mark_processed(OWNED)
    assert old == protocol.Processed(status_sent=False)


def test_the_carried_result_is_typed_the_same_in_begin_step_and_mark_processed() -> None:
    begin = protocol.BeginStepInput.from_json({"request": REQUEST, "agent": "payment", "completes": COMPLETES})
    processed = protocol.MarkProcessedInput.from_json({**FENCED, "attempt": 1, "completes": COMPLETES})
    assert begin.completes == processed.completes == protocol.StepResult("reserve-inventory", {"reservationId": "R-1"})
    queued = protocol.BeginStepInput.from_json({"request": REQUEST, "agent": "payment", "queue": "payment-requests"})
    assert queued.queue == "payment-requests"


def test_the_agent_request_the_orchestrations_build_is_the_old_dict() -> None:
    """Built once from ``AgentRequest``; handed to activities without ``type``/``schemaVersion``,
    with the deadline in the old text form."""
    request = AgentRequest(
        request_id=REQUEST["requestId"],
        instance_id="o1:1",
        order_id="o1",
        step="charge-payment",
        action="do",
        attempt=1,
        deadline=datetime(2026, 3, 1, 8, 1, tzinfo=UTC),
        idempotency_key="o1:charge-payment",
        payload=REQUEST["payload"],
    )
    assert _same_json(request.activity_json(), REQUEST)


@pytest.mark.parametrize(
    ("input_type", "bad"),
    [
        (protocol.BeginStepInput, {"request": REQUEST, "agent": "payment", "completes": {"step": "x"}}),  # no result
        (protocol.BeginStepInput, {"request": REQUEST, "agent": "payment", "completes": {"result": {}}}),  # no step
        (protocol.BeginStepInput, {"request": REQUEST, "agent": "payment", "queue": 7}),
        (protocol.MarkProcessedInput, {**FENCED, "attempt": 1, "completes": {"step": "x", "result": []}}),
        (protocol.MarkProcessedInput, {**FENCED, "attempt": 1, "completes": "arrange-shipment"}),
        (protocol.BeginStepInput, {"request": REQUEST, "agent": "payment", "announce": "yes"}),
        (protocol.AttemptInput, {"orderId": "o1", "attempt": "2", "plan": PLAN}),
        (protocol.AttemptInput, {"orderId": "o1", "attempt": 1}),  # no plan: an input of _v2
        (protocol.AttemptInput, {"orderId": "o1", "attempt": 1, "plan": {**PLAN, "order": None}}),
        (protocol.RecordUndoInput, {"orderId": "o1", "instanceId": "x", "seq": "2"}),
        (protocol.PublishStatusInput, {"orderId": "o1", "status": "Shipped", "attempt": 1}),
        (protocol.AwaitReviewInput, {**STEP, "reviewId": "r", "until": "tomorrow", "defaultAction": "fail"}),
        (protocol.CloseReviewInput, {**FENCED, "attempt": 1, "reviewId": "r"}),
    ],
)
def test_an_input_that_is_not_the_protocol_is_refused_by_name(input_type: Any, bad: dict[str, Any]) -> None:
    with pytest.raises(protocol.ProtocolError):
        input_type.from_json(bad)


def test_a_result_that_is_not_the_protocol_is_refused() -> None:
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_write_result({"owned": "yes"})
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_begin_step(None)
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_mark_processed({"owned": "yes"})
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_mark_processed(None)
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_publish_status({"refused": False})
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_publish_status({"unsent": "Completed"})
    assert protocol.parse_publish_status(None) is None  # every answer recorded before refusals were answered
