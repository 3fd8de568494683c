"""The largest state record the app can produce stays one Cosmos DB item (2 MB at most, measured on the JSON
the service receives: learn.microsoft.com/azure/cosmos-db/concepts-limits, "Per-item limits"), whatever the
remote services and clients send within their contracts.

Every free-form text or value a record keeps is bounded: a history entry's detail (``DETAIL_LIMIT``, the
previous fix: tests/adapters/test_history_fits_an_item.py), and since this test the errors it keeps
(``lastError``, a step's ``error``, a compensation entry's ``error``: ``ERROR_LIMIT``) and a step's result
(``RESULT_LIMIT`` bytes as the store sends it: the app's agent refuses a bigger answer as it refuses one a
reply cannot carry, an unknown outcome). Before, an agent's reply could put up to 64 KB of result or error
into each of them, and the azure-cosmos SDK sends a character past ASCII escaped (an emoji 12 bytes for its 4
of UTF-8, DEL ``\\x7f`` 6 bytes for its 1: Python's ``json.dumps`` escapes it too; Azure/azure-sdk-for-python
#48914): one step's result was up to 390 KB as sent, and again in its compensation entry's ``data``.

The worst case is built through the domain's moves, each written with the real SDK to the local protocol
server, which refuses an item over 2 MiB as sent (``localrun/cosmos_guards.cjs``): every step's result the
largest the app's agent answers with (found by asking it, ``_largest_result``), every error the longest a
reply carries in the characters that escape largest, a review answered with the longest operator's reason,
the prepaid payment's texts the longest a client may send, and then every one of the 50 history entries as
long as a writer notes one (a cut detail of emoji by the longest operator name: more than any one sequence of
moves leaves, an upper bound). Two ends: the order that completed (three results, each with its undo data) and
the order whose compensation failed (two results with their data, the pivot's error, an undo's error and
answer)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.documents import document_of
from adapters.cosmos.state_store import update_once
from contracts.messages import MAX_TOTAL_CENTS, AgentReply, PaymentNotification
from contracts.names import STATE_CONTAINER
from contracts.parsing import MAX_BODY_BYTES, parse
from domain import compensation, review, transitions
from domain.compensation import complete_step_logged
from domain.ids import instance_id, request_id
from domain.payments import received, with_payment
from domain.records import DETAIL_LIMIT, HISTORY_LIMIT, StateRecord
from domain.states import ProcessState, StepStatus
from order_agents.circuit_gate import DependencyGate
from order_agents.runtime import run_agent_request
from tests.agents.support import START, ScriptedService, agent_settings, make_request
from tests.fakes import HealthStoreWithoutMemory

pytestmark = pytest.mark.cosmos
MAX_ITEM_BYTES = 2 * 1024 * 1024  # what the local server (and Azure) takes of one item, as sent
GRACE = timedelta(seconds=60)
ORDER_ID = "o" + "9" * 63  # the longest order id (domain.ids.ORDER_ID_PATTERN): it is in every owner and request id
EMOJI = "\U0001f600"  # 4 bytes of UTF-8, 12 as the SDK sends it
DEL = "\x7f"  # 1 byte of UTF-8, 6 as the SDK sends it
OPERATOR = EMOJI * 127 + "\u2026"  # the longest operator name (operations.auth.MAX_OPERATOR_NAME)
OPERATOR_REASON = EMOJI * 500  # the longest reason the ops API takes (operations.web.MAX_REASON_CHARS)
CLIENT_TEXT = EMOJI * 200  # the longest client text (contracts.messages.ShortText)


def sent_size(record: StateRecord) -> int:
    """The record's size as the SDK sends it: ``json.dumps`` of the document, ASCII only."""
    return len(json.dumps(document_of(record), separators=(",", ":")))


def _longest_error() -> str:
    """The longest error an agent's reply carries (the relay's ``parse``: a body of ``MAX_BODY_BYTES``), its
    characters those that escape largest: emoji first (12 bytes each, as far as a record keeps of an error),
    then DEL (6 bytes for each byte of the reply)."""
    head = EMOJI * DETAIL_LIMIT

    def reply(error: str) -> AgentReply:
        return AgentReply(
            request_id=request_id(instance_id(ORDER_ID, 1), "arrange-shipment", "shipping"),
            instance_id=instance_id(ORDER_ID, 1),
            order_id=ORDER_ID,
            step="arrange-shipment",
            outcome="failed",
            error=error,
        )

    room = MAX_BODY_BYTES - len(reply(head).to_json().encode())
    error = head + DEL * room
    parse(reply(error).to_json().encode(), {"AgentReply": AgentReply})  # the relay takes it
    return error


def _answered(step: str, result: dict[str, Any]) -> bool:
    """Whether the app's agent answers ``succeeded`` to a forward request its service answered with ``result``."""
    clock = ManualClock(START)
    settings = agent_settings()
    gate = DependencyGate(HealthStoreWithoutMemory(), clock, settings.circuit_policy)
    service = ScriptedService(clock, [result])
    reply = run_agent_request(make_request(step), service, clock, settings, random.Random(1), gate)
    return reply is not None and reply.outcome == "succeeded"


def _largest_result(step: str, shape: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """The largest result of ``shape(text)`` (``text`` of DEL, 6 bytes each as sent) the app's agent answers with."""
    low, high = 0, MAX_BODY_BYTES
    while low < high:
        middle = (low + high + 1) // 2
        if _answered(step, shape(DEL * middle)):
            low = middle
        else:
            high = middle - 1
    return shape(DEL * low)


# The step's undo data holds the whole result: its compensation entry copies all of it.
RESULTS: dict[str, Callable[[str], dict[str, Any]]] = {
    "reserve-inventory": lambda text: {"reservationId": text},
    "charge-payment": lambda text: {"chargeId": text, "amountCents": 2**53 - 1},
    "arrange-shipment": lambda text: {"shipmentId": text},
}


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, Any]]:
    return {step: _largest_result(step, shape) for step, shape in RESULTS.items()}


@pytest.fixture(scope="module")
def longest_error() -> str:
    return _longest_error()


class Writer:
    """Each move written as the app writes it: a conditional replace of the version read, through the SDK."""

    def __init__(self, ctx: Any, clock: Any) -> None:
        self.ctx, self.clock = ctx, clock
        self.record: StateRecord

    def create(self, record: StateRecord) -> StateRecord:
        created: StateRecord = self.ctx.states.create(record)
        self.record = created
        return created

    def __call__(self, change: Callable[[StateRecord], StateRecord]) -> StateRecord:
        self.clock.advance(timedelta(seconds=1))
        written = update_once(self.ctx.states, self.record, change)
        self.record = written
        return written


def _charging(ctx: Any, clock: Any, results: dict[str, dict[str, Any]]) -> tuple[Writer, str]:
    """A prepaid order claimed, its inventory reserved with the largest result, its charge begun."""
    write = Writer(ctx, clock)
    owner = _prepaid_and_claimed(write, clock.now())
    _begin(write, owner, "reserve-inventory", "inventory")
    _begin(write, owner, "charge-payment", "payment", ("reserve-inventory", results["reserve-inventory"]))
    return write, owner


def _prepaid_and_claimed(write: Writer, now: Any) -> str:
    write.create(transitions.new_record(ORDER_ID, "q" * 260, now, submitted_as=2**63 - 1))
    note = PaymentNotification(
        type="PaymentNotification",
        schema_version=1,
        notification_id=CLIENT_TEXT,
        order_id=ORDER_ID,
        amount_cents=MAX_TOTAL_CENTS,
        currency="EUR",
        provider_reference=CLIENT_TEXT,
    )
    write(lambda r: with_payment(r, received(note, 2**63 - 1, write.clock.now()), write.clock.now()))
    claimed = write(lambda r: transitions.claim(r, write.clock.now(), GRACE))
    return str(claimed.locked_by)


def _begin(
    write: Writer, owner: str, step: str, agent: str, completes: tuple[str, dict[str, Any]] | None = None
) -> None:
    """``begin_step`` as the activity writes it: the previous step's result (``completes``) in the same write."""

    def move(r: StateRecord) -> StateRecord:
        now = write.clock.now()
        if completes is not None:
            r = complete_step_logged(r, owner, completes[0], completes[1], now, now)
        request = request_id(owner, step, agent) + ":" + "9" * 20
        return transitions.begin_step(r, owner, step, agent, request, now + timedelta(minutes=5), now)

    write(move)


def _history_filled(write: Writer) -> StateRecord:
    """Every one of the record's 50 history entries as long as a writer notes one, in one more write: a detail cut to
    ``DETAIL_LIMIT`` characters of emoji (an agent's error quoted), by the longest operator name."""

    def noted(record: StateRecord) -> StateRecord:
        for _ in range(HISTORY_LIMIT):
            record = record.with_changes(write.clock.now(), "StepTransientFailure", OPERATOR, EMOJI * DETAIL_LIMIT)
        return record

    return write(noted)


def _assert_fits(cosmos_db: Any, record: StateRecord) -> None:
    size = sent_size(record)
    stored = cosmos_db.get_container_client(STATE_CONTAINER).read_item(ORDER_ID, partition_key=ORDER_ID)
    assert stored["_etag"] == record.version  # the last write is the one measured
    print(f"\nworst case {record.process_state.value}: {size:,} bytes as sent ({MAX_ITEM_BYTES:,} at most)")
    assert size <= MAX_ITEM_BYTES


def test_the_largest_completed_order_is_one_item(
    app_context: Any, cosmos_db: Any, clock: Any, results: dict[str, dict[str, Any]], longest_error: str
) -> None:
    write, owner = _charging(app_context, clock, results)
    # the charge refused for good: paused for review (lastError quotes the refusal), answered, closed
    review_id = "r" * 64
    until = clock.now() + timedelta(hours=24)
    write(
        lambda r: compensation.await_review(
            r,
            owner,
            "charge-payment",
            review_id,
            until,
            clock.now(),
            keep_until=until + GRACE,
            error=longest_error,
            default_action="compensate",
        )
    )
    write(lambda r: review.note_review_answer(r, review_id, OPERATOR, "retry", OPERATOR_REASON, clock.now()))
    write(lambda r: review.close_review(r, owner, review_id, "compensate", clock.now()))
    _begin(write, owner, "charge-payment", "payment")
    _begin(write, owner, "arrange-shipment", "shipping", ("charge-payment", results["charge-payment"]))
    done = write(
        lambda r: transitions.mark_processed(
            complete_step_logged(r, owner, "arrange-shipment", results["arrange-shipment"], clock.now(), clock.now()),
            owner,
            clock.now(),
        )
    )
    assert done.process_state is ProcessState.PROCESSED and len(done.compensation) == 2
    assert all(s.result == results[name] for name, s in done.steps.items()) and done.last_error
    _assert_fits(cosmos_db, _history_filled(write))


def test_the_largest_order_whose_compensation_failed_is_one_item(
    app_context: Any, cosmos_db: Any, clock: Any, results: dict[str, dict[str, Any]], longest_error: str
) -> None:
    write, owner = _charging(app_context, clock, results)
    _begin(write, owner, "arrange-shipment", "shipping", ("charge-payment", results["charge-payment"]))
    # the pivot refused for good: compensation requested (activities.compensation_steps.request_compensation)
    reason = f"arrange-shipment: {longest_error}; {'x' * 200}"
    write(
        lambda r: compensation.enter_compensation(
            r, owner, reason, clock.now(), owner=owner, failed_step="arrange-shipment"
        )
    )
    round_owner = str(
        write(lambda r: compensation.claim_compensation(r, clock.now(), GRACE, 3, transitions.SUPERVISOR)).locked_by
    )
    deadline = clock.now() + timedelta(hours=1)
    write(lambda r: compensation.begin_undo(r, round_owner, 2, "u" * 200, deadline, clock.now()))
    answer = {"refundId": EMOJI * 1000, "amountCents": 2**53 - 1}
    write(lambda r: compensation.record_undo(r, round_owner, 2, deadline, clock.now(), answer))
    write(lambda r: compensation.begin_undo(r, round_owner, 1, "u" * 200, deadline, clock.now()))
    failed = write(lambda r: compensation.fail_compensation(r, round_owner, 1, longest_error, clock.now()))
    assert failed.process_state is ProcessState.COMPENSATION_FAILED
    assert failed.steps["arrange-shipment"].status is StepStatus.FAILED and failed.steps["arrange-shipment"].error
    assert [e.data for e in failed.compensation] == [results["reserve-inventory"], results["charge-payment"]]
    assert failed.compensation[0].error and failed.compensation[1].undo_result and failed.last_error
    _assert_fits(cosmos_db, _history_filled(write))


def test_a_write_larger_than_an_item_is_a_named_store_error_and_logged(
    app_context: Any, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A record that does not fit (none the app makes, above: a bug) is refused by the service with 413; the
    store says so (``ItemTooLarge``, not transient) and logs ``ItemTooLarge`` naming the document, instead of
    an unmapped SDK error."""
    from adapters.cosmos.errors import ItemTooLarge, StoreUnavailable
    from domain.records import StepState

    record = transitions.new_record(ORDER_ID, None, clock.now())
    step = StepState(
        status=StepStatus.SUCCEEDED,
        agent="inventory",
        request_id="r",
        attempt=1,
        started_at=clock.now(),
        result={"reservationId": DEL * (MAX_ITEM_BYTES // 6)},  # 2 MiB as sent, 350 KB of UTF-8
    )
    with caplog.at_level("ERROR"), pytest.raises(ItemTooLarge) as refused:
        app_context.states.create(replace(record, steps={"reserve-inventory": step}))
    assert not isinstance(refused.value, StoreUnavailable) and "413" in str(refused.value)
    logged = [r for r in caplog.records if getattr(r, "event", None) == "ItemTooLarge"]
    assert [getattr(r, "item", None) for r in logged] == [ORDER_ID]
    assert app_context.states.get(ORDER_ID) is None  # nothing written
