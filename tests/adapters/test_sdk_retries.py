"""What the azure-cosmos SDK's own retry policies give the app, with the protocol server answering the statuses
Azure answers (``localrun/cosmos_faults.cjs``, the ``cosmos_faults`` fixture): the real SDK client the tests use
(the stock ``requests`` pipeline, as in production) retries or gives up between the app and the fault, and the
app must read what escapes as Azure means it (the SDK's behaviour: azure-cosmos 4.17.1's ``_retry_utility``, and
its docs/ErrorCodesAndRetries.md; docs/testing.md, "The SDK's own retries")."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from adapters.cosmos.errors import StoreUnavailable, mapped_errors
from adapters.cosmos.order_store import CosmosOrderStore, CreateOutcome
from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_CONTAINER, ORDERS_QUEUE, STATE_CONTAINER
from dependencies import AppContext
from domain.states import ProcessState
from localrun.cosmos_server import CosmosServer
from orchestrators import starter
from submission.intake import handle_orders_message
from tests.contexts import context_with
from tests.fakes import FakeReceivedMessage, RecordingSender
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos

ORDER = "ord-sdk-1"

# Cosmos DB's 404 with substatus 1002, ReadSessionNotAvailable: the replica that answered has not caught up with the
# session token the client sent, so a document that exists (this client wrote or saw it) is answered 404. The SDK
# retries it once in the primary region and then raises it as ``CosmosResourceNotFoundError`` with that substatus
# (ErrorCodesAndRetries.md, "404/1002"; learn.microsoft.com/azure/cosmos-db/nosql/troubleshoot-not-found: "Read
# session not available for the input session token", for an item that should or does exist).
READ_SESSION_NOT_AVAILABLE: dict[str, Any] = {"op": "read", "status": 404, "substatus": 1002, "times": 2}


def test_a_read_session_not_available_past_the_sdks_retry_is_no_answer_that_the_order_is_missing(
    cosmos_faults: CosmosServer, cosmos_db: Any
) -> None:
    """The same order created again (a redelivery, a duplicate submission) is a 409, and the stored order is read
    to compare. A read the replica could not serve is not "no order": taken as one, the identical order was a
    ``CONFLICT`` and its message dead-lettered ``ConflictingOrderData``."""
    orders = CosmosOrderStore(cosmos_db.get_container_client(ORDERS_CONTAINER))
    document = {**order(orderId=ORDER), "id": ORDER}
    assert orders.create_or_verify(document) is CreateOutcome.CREATED
    cosmos_faults.set_faults([{**READ_SESSION_NOT_AVAILABLE, "container": ORDERS_CONTAINER, "partitionKey": ORDER}])
    with pytest.raises(StoreUnavailable):
        orders.create_or_verify(document)
    assert [f["status"] for f in cosmos_faults.faults_answered()] == [404, 404]  # the SDK's one retry ran
    assert orders.create_or_verify(document) is CreateOutcome.IDENTICAL  # the replica caught up: the same order


def test_a_duplicate_submission_meeting_read_session_not_available_is_handled_again_not_dead_lettered(
    cosmos_faults: CosmosServer, app_context: AppContext
) -> None:
    body = json.dumps(order(orderId=ORDER)).encode()
    first = handle_orders_message(app_context, FakeReceivedMessage.of(body, message_id=ORDER))
    assert first.settlement.kind == "complete"
    cosmos_faults.set_faults([{**READ_SESSION_NOT_AVAILABLE, "container": ORDERS_CONTAINER, "partitionKey": ORDER}])
    again = handle_orders_message(app_context, FakeReceivedMessage.of(body, message_id=ORDER))
    assert cosmos_faults.faults_answered(), "the fault was not met"
    # a store failure: the message is sent again for later (submission/store_outage.py), nobody is alerted
    assert again.settlement.kind == "complete", again.settlement
    assert [json.loads(m.body)["orderId"] for m in sent_to(app_context, ORDERS_QUEUE)] == [ORDER]
    assert sent_to(app_context, OPERATOR_ALERTS_QUEUE) == []


def sent_to(ctx: AppContext, queue: str) -> list[Any]:
    assert isinstance(ctx.sender, RecordingSender)
    return [message for name, message in ctx.sender.sent if name == queue]


def test_a_state_record_read_the_replica_could_not_serve_is_no_missing_record(
    cosmos_faults: CosmosServer, app_context: AppContext
) -> None:
    """``StateStore.get`` None means no record: the submission creates one, the ops API answers 404, an owner's
    read raises ``FencingLost``. A 404/1002 is a read to make again."""
    body = json.dumps(order(orderId=ORDER)).encode()
    handle_orders_message(app_context, FakeReceivedMessage.of(body, message_id=ORDER))
    assert app_context.states.get(ORDER) is not None
    cosmos_faults.set_faults([{**READ_SESSION_NOT_AVAILABLE, "container": STATE_CONTAINER, "partitionKey": ORDER}])
    with pytest.raises(StoreUnavailable):
        app_context.states.get(ORDER)


# Cosmos DB's 410 Gone: the partition that held the key moved (a split or a merge: substatus 1002, 1007, 1008) or
# the replica went away; the request was not carried out (ErrorCodesAndRetries.md, "410/1002": "can occur
# regardless of the Consistency level"). The SDK refreshes its routing map and retries a query's page; a point
# operation it raises at once (``_retry_utility.Execute``: ``PartitionKeyRangeGoneRetryPolicy.ShouldRetry`` is False).
@pytest.mark.parametrize("substatus", [1002, 1007, None])
def test_a_partition_gone_on_a_point_operation_is_a_store_failure_to_try_again(
    cosmos_faults: CosmosServer, app_context: AppContext, substatus: int | None
) -> None:
    gone: dict[str, Any] = {"op": "read", "status": 410, "partitionKey": ORDER}
    if substatus is not None:
        gone["substatus"] = substatus
    cosmos_faults.set_faults([gone])
    with pytest.raises(StoreUnavailable):
        app_context.states.get(ORDER)
    assert [f["status"] for f in cosmos_faults.faults_answered()] == [410]  # raised, not retried, by the SDK


def test_an_order_meeting_a_partition_gone_is_sent_again_for_later_not_failed_until_dead_lettered(
    cosmos_faults: CosmosServer, app_context: AppContext
) -> None:
    """A handler that raises is abandoned and redelivered at once, five times in seconds, then dead-lettered
    ``MaxDeliveryCountExceeded``; a store failure is sent again for later (``submission/store_outage.py``)."""
    cosmos_faults.set_faults([{"op": "read", "status": 410, "substatus": 1002, "partitionKey": ORDER}])
    body = json.dumps(order(orderId=ORDER)).encode()
    result = handle_orders_message(app_context, FakeReceivedMessage.of(body, message_id=ORDER))
    assert cosmos_faults.faults_answered(), "the fault was not met"
    assert result.settlement.kind == "complete", result.settlement
    assert [json.loads(m.body)["orderId"] for m in sent_to(app_context, ORDERS_QUEUE)] == [ORDER]


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param({"status": 410, "substatus": 1002}, id="partition-gone"),
        pytest.param({"status": 404, "substatus": 1002, "times": 2}, id="read-session-not-available"),
        pytest.param({"status": "truncate", "times": 4}, id="answer-cut-four-times"),
    ],
)
def test_the_starter_postpones_a_claim_whose_order_read_met_a_transient_answer(
    cosmos_faults: CosmosServer, app_context: AppContext, fault: dict[str, Any]
) -> None:
    """The starter reads the order before claiming: a store failure postpones the claim to the next sweep; an
    answer retrying cannot change (no order, an error it does not know) claims the record and starts nothing, so
    the attempt fails and counts toward ``MAX_FAILURES``. Neither fault above is such an answer."""
    full = context_with(app_context, settings=replace(app_context.settings, max_in_flight=0))
    handle_orders_message(full, FakeReceivedMessage.of(json.dumps(order(orderId=ORDER)).encode(), message_id=ORDER))
    pending = app_context.states.get(ORDER)
    assert pending is not None and pending.process_state is ProcessState.PENDING
    app_context.clock.advance(starter.ORDER_VISIBLE_WITHIN * 2)  # type: ignore[attr-defined]  # not a new record
    cosmos_faults.set_faults([{"op": "read", "container": ORDERS_CONTAINER, "partitionKey": ORDER, **fault}])
    assert starter.try_claim(app_context, pending) is None
    assert cosmos_faults.faults_answered(), "the fault was not met"
    after = app_context.states.get(ORDER)
    assert after is not None and after.process_state is ProcessState.PENDING and after.attempt == pending.attempt
    [claim] = starter.sweep(app_context)  # the next sweep: the order reads, the attempt starts
    assert claim.order_id == ORDER and claim.plan


def _pending(app_context: AppContext) -> AppContext:
    """An order accepted ``Pending`` (no room in flight), then room again."""
    full = context_with(app_context, settings=replace(app_context.settings, max_in_flight=0))
    handle_orders_message(full, FakeReceivedMessage.of(json.dumps(order(orderId=ORDER)).encode(), message_id=ORDER))
    return context_with(full, settings=app_context.settings)


# The operator's cancel: one conditional replace of the state record, read back when its answer is lost
# (``update_once_or_reread``), through the SDK as each fault leaves it: (fault, the first answer's status).
CANCEL_CASES = [
    pytest.param({"status": 429, "retryAfterMs": 5, "times": 3}, 200, id="429-retried-by-the-sdk"),
    pytest.param({"status": 503, "times": 1}, 200, id="503-retried-by-the-sdk"),
    pytest.param({"status": 429, "retryAfterMs": 5, "times": 10}, 503, id="429-past-the-sdks-9-retries"),
    pytest.param({"status": 449, "times": 1}, 503, id="449-never-retried-by-the-sdk"),
    pytest.param({"status": 503, "times": 2}, 503, id="503-past-the-sdks-retry"),
    pytest.param({"status": 408, "commit": True}, 200, id="408-after-it-landed"),
    pytest.param({"status": 500, "commit": True}, 200, id="500-after-it-landed"),
    pytest.param({"status": "drop", "commit": True}, 200, id="answer-lost-after-it-landed"),
    # the answer cut in the middle of its body: azure-core's IncompleteReadError, which the SDK retries for a read
    # only (three times) and raises as it is
    pytest.param({"status": "truncate"}, 200, id="answer-cut-after-it-landed"),
    # not landed, and the read-back shows the version it replaced: made once more on it (it lands, or 412)
    pytest.param({"status": "drop"}, 200, id="answer-lost-before-it-landed"),
]


@pytest.mark.parametrize(("fault", "first"), CANCEL_CASES)
def test_an_operators_cancel_is_taken_once_whatever_the_sdk_gives_up_on(
    cosmos_faults: CosmosServer, app_context: AppContext, fault: dict[str, Any], first: int
) -> None:
    """A write the SDK gave up on is a 503, nothing taken, and posting again takes it; one that landed is a 200
    however its answer was lost; either way the record holds the cancel once."""
    from operations import actions

    ctx = _pending(app_context)
    cosmos_faults.set_faults([{"op": "replace", "container": STATE_CONTAINER, "partitionKey": ORDER, **fault}])
    reply = actions.cancel(ctx, ORDER, "op@example.com", "customer called")
    assert cosmos_faults.faults_answered(), "the fault was not met"
    assert reply.status == first, reply.body
    if first == 503:
        unchanged = ctx.states.get(ORDER)
        assert unchanged is not None and unchanged.process_state is ProcessState.PENDING
        reply = actions.cancel(ctx, ORDER, "op@example.com", "customer called")
        assert reply.status == 200, reply.body
    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.COMPENSATING
    assert [h.event for h in record.history].count(record.history[-1].event) == 1


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param({"status": 449}, id="449"),
        pytest.param({"status": 429, "retryAfterMs": 5, "times": 10}, id="429-past-the-sdks-retries"),
        pytest.param({"status": 408, "commit": True}, id="408-after-it-landed"),
        pytest.param({"status": "drop", "commit": True}, id="answer-lost-after-it-landed"),
    ],
)
def test_a_fenced_step_write_the_sdk_gave_up_on_is_made_once_when_durable_runs_the_activity_again(
    cosmos_faults: CosmosServer, app_context: AppContext, fault: dict[str, Any]
) -> None:
    """``begin_step``'s one fenced write meets the fault: the activity fails (Durable runs it again, with the same
    input), or, when the write landed and only its answer was lost, its read-back finds it made and the activity
    is done; the record ends with the step begun once, its request sent at least once (the agents are
    idempotent by its key)."""
    from activities.scheduler_steps import begin_step
    from contracts.activities import StepBegun
    from tests.submission.test_received_owed import first_step

    submitted = handle_orders_message(app_context, FakeReceivedMessage.of(json.dumps(order(orderId=ORDER)).encode()))
    assert submitted.claim is not None  # claimed at once: room in flight
    step = first_step(app_context, submitted.claim)
    cosmos_faults.set_faults([{"op": "replace", "container": STATE_CONTAINER, "partitionKey": ORDER, **fault}])
    if fault.get("commit"):
        assert isinstance(begin_step(app_context, step), StepBegun)  # found landed by its read-back
    else:
        with pytest.raises(StoreUnavailable):
            begin_step(app_context, step)
    assert isinstance(begin_step(app_context, step), StepBegun)  # Durable's next try (or a late run) of the activity
    record = app_context.states.get(ORDER)
    assert record is not None
    assert list(record.steps) == ["reserve-inventory"]
    events = [h.event for h in record.history]
    assert len(events) == len(set(events)), events  # each entry once: the write made once


PRODUCTION_DATABASE = "production-client"


@pytest.fixture
def production_client(cosmos_faults: CosmosServer) -> Iterator[Any]:
    """The app's own client (``create_client``, as ``dependencies.build_from_settings`` makes it) for the protocol
    server, with a database of its own holding the containers, dropped afterwards."""
    from adapters.cosmos.client import create_client, ensure_database
    from settings import Settings

    client = create_client(
        Settings.from_env(
            {"COSMOS_ENDPOINT": cosmos_faults.endpoint, "COSMOS_KEY": cosmos_faults.key, "COSMOS_VERIFY_TLS": "false"}
        )
    )
    ensure_database(client, PRODUCTION_DATABASE)
    yield client
    cosmos_faults.set_faults([])
    client.delete_database(PRODUCTION_DATABASE)


# An HTTP-triggered function answers within 230 s whatever functionTimeout says (Azure Load Balancer's idle timeout:
# learn.microsoft.com/azure/azure-functions/functions-scale, "Function app timeout duration"); past it the caller
# gets the platform's error, not the operator API's 503 "post it again".
HTTP_ANSWER_WITHIN_S = 230


def test_a_store_call_that_gets_no_answer_gives_up_in_time_for_the_operator_api_to_answer(
    cosmos_faults: CosmosServer, production_client: Any
) -> None:
    """The production client (``create_client``) against a Cosmos DB that takes the request and never answers (a
    black-holed connection, a stuck gateway): the SDK waits its read timeout, sends a read again three times and
    a write never, then raises. An operator's action makes a write and reads it back when its answer is lost, so
    both must give up well within the 230 s. Measured through the real SDK with the client's read timeout scaled
    down, then scaled back to the production client's own."""
    from adapters.cosmos.client import container

    policy = production_client.client_connection.connection_policy
    production, scaled = float(policy.ReadTimeout), 0.25
    policy.ReadTimeout = scaled  # what the SDK reads for each request
    states = container(production_client, PRODUCTION_DATABASE, STATE_CONTAINER)
    states.create_item({"id": ORDER, "orderId": ORDER})
    worst: dict[str, float] = {}
    for op, call in (
        ("read", lambda: states.read_item(ORDER, partition_key=ORDER)),
        ("replace", lambda: states.replace_item(ORDER, {"id": ORDER, "orderId": ORDER})),
    ):
        cosmos_faults.set_faults([{"op": op, "status": "hang", "times": 20}])
        started = time.monotonic()
        with pytest.raises(StoreUnavailable), mapped_errors():
            call()
        took = time.monotonic() - started
        tries = len(cosmos_faults.faults_answered())
        worst[op] = tries * production + max(took - tries * scaled, 0.0)  # its waits, and the SDK's backoffs
    assert worst["replace"] + worst["read"] < HTTP_ANSWER_WITHIN_S / 2, worst  # half: the action's other calls


@pytest.mark.parametrize("answer", [408, 500, "drop", "truncate"])
def test_the_production_client_never_sends_a_write_again_whose_answer_was_lost(
    cosmos_faults: CosmosServer, production_client: Any, answer: int | str
) -> None:
    """After a write that may have landed, the app reads back (``update_once_or_reread``, ``create_or_verify``). A
    client that sent it again itself (the SDK's ``retry_write``, off by default) would turn a landed create into a
    409 and a landed conditional replace into a 412, which the app takes for another writer's."""
    from adapters.cosmos.client import container
    from adapters.cosmos.errors import StoreOutcomeUnknown

    states = container(production_client, PRODUCTION_DATABASE, STATE_CONTAINER)
    cosmos_faults.set_faults([{"op": "create", "status": answer, "commit": True, "times": 5}])
    with pytest.raises(StoreOutcomeUnknown), mapped_errors():
        states.create_item({"id": ORDER, "orderId": ORDER})
    assert len(cosmos_faults.faults_answered()) == 1
    assert states.read_item(ORDER, partition_key=ORDER)["id"] == ORDER  # it landed, once
