"""Red team (s52): a reply on ``agent-replies`` the app's own agent would never send, through the real runtime.

The app's agent refuses a forward step's result the state record cannot keep (``RESULT_LIMIT`` bytes as the store
sends it) or the requests carrying it on cannot hold (``CARRIED_LIMIT`` bytes in a message): ``ResultTooLarge``
(``order_agents.runtime``). The reply relay took any reply its contract reads, a body of up to 64 KiB: a reply from
another writer of the queue (an agent of another version or another team, a test tool pointed at the wrong
namespace) whose result is 60,000 DEL characters put 360 KB into one step of the record, six times the bound the
record's size rests on (``tests/adapters/test_record_fits_an_item.py``), and one whose ``chargeId`` is 65,000
characters made every refund request of the order unreadable to the payment agent (dead-lettered ``BodyTooLarge``).
So did an integer a Cosmos DB document cannot keep exactly (past +-(2**53 - 1): rounded, or as null past a
double's range), which the app refuses where a remote answer enters (``contracts.parsing.read_outside_json``): a
uint64 ``chargeId`` was recorded as another number, and the refund named that one. Now the relay dead-letters such a
reply on its first delivery (``ResultTooLarge``, ``ResultNotExact``), with the reason the agent gives: the attempt
hears nothing, as from a lost reply, and the supervisor retries it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from adapters.remote.services import remote_services
from contracts.names import AGENT_REPLIES_QUEUE, ORDERS_QUEUE
from domain.records import RESULT_LIMIT, stored_size
from domain.states import StepStatus
from tests.operations.harness import OPERATOR, OpsHarness
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos

ORDER = "o-reply52"


@pytest.fixture
def waiting(cosmos_db: Any) -> Iterator[OpsHarness]:
    """An attempt waiting for its payment agent's reply (the agent has no service: it never answers)."""
    made = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR)
    assert made.ctx is not None
    remote = remote_services(made.ctx.settings, made.clock, {}, seed=3)
    del remote["payment"]
    made.change_context(remote=remote)
    made.send(ORDERS_QUEUE, json.dumps(order(orderId=ORDER)), ORDER)
    made.host.run_until(made.clock.now() + timedelta(seconds=3))
    yield made
    made.close()


def _reply(result: dict[str, Any]) -> bytes:
    body = {
        "type": "AgentReply",
        "schemaVersion": 1,
        "requestId": f"{ORDER}:1:charge-payment:payment",
        "instanceId": f"{ORDER}:1",
        "orderId": ORDER,
        "step": "charge-payment",
        "outcome": "succeeded",
        "result": result,
    }
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


CASES: dict[str, tuple[dict[str, Any], str]] = {
    "60,000 DEL characters (360 KB as the record is sent)": (
        {"chargeId": "\x7f" * 60_000, "amountCents": 2500},
        "ResultTooLarge",
    ),
    "a chargeId of 65,000 characters (no refund request could carry it)": (
        {"chargeId": "x" * 65_000},
        "ResultTooLarge",
    ),
    # Cosmos DB documents keep numbers as doubles: the record kept 18446744073709552000, and the refund named it
    "a uint64 chargeId (the record rounds it)": ({"chargeId": 2**64 - 1}, "ResultNotExact"),
    # ... and an integer of 4,000 digits (the contract keeps up to 4,300) as null
    "an integer of 4,000 digits (the record keeps null)": (
        {"chargeId": "c", "authorization": 10**4000},
        "ResultNotExact",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_reply_whose_result_the_app_could_not_carry_is_dead_lettered_with_a_reason(waiting, case):
    result, reason = CASES[case]
    body = _reply(result)
    assert len(body) <= 64 * 1024  # the contract reads it
    waiting.send(AGENT_REPLIES_QUEUE, body, "foreign-reply")
    waiting.host.run_until(waiting.clock.now() + timedelta(seconds=10))

    [letter] = waiting.broker.dead_letters(AGENT_REPLIES_QUEUE)
    assert (letter.message_id, letter.reason, letter.delivery_count) == ("foreign-reply", reason, 1)
    assert letter.description and "charge-payment" in letter.description
    assert waiting.ctx is not None
    record = waiting.ctx.states.get(ORDER)
    assert record is not None
    step = record.steps["charge-payment"]
    assert step.status is not StepStatus.SUCCEEDED
    assert stored_size(step.result) <= RESULT_LIMIT
    assert step.result in (None, {})
