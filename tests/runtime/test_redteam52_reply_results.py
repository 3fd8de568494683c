"""Red team (s52): a reply on ``agent-replies`` the app's own agent would never send, through the real runtime.

The app's agent refuses a forward step's result the state record cannot keep (``RESULT_LIMIT`` bytes as the store
sends it) or the requests carrying it on cannot hold (``CARRIED_LIMIT`` bytes in a message): ``ResultTooLarge``
(``order_agents.runtime``). The reply relay took any reply its contract reads, a body of up to 64 KiB: a reply from
another writer of the queue (an agent of another version or another team, a test tool pointed at the wrong
namespace) whose result is 60,000 DEL characters put 360 KB into one step of the record, six times the bound the
record's size rests on (``tests/adapters/test_record_fits_an_item.py``), and one whose ``chargeId`` is 65,000
characters made every refund request of the order unreadable to the payment agent (dead-lettered ``BodyTooLarge``).
Now the relay dead-letters such a reply ``ResultTooLarge`` on its first delivery, with the agent's reason: the
attempt hears nothing, as from a lost reply, and the supervisor retries it."""

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


CASES: dict[str, dict[str, Any]] = {
    "60,000 DEL characters (360 KB as the record is sent)": {"chargeId": "\x7f" * 60_000, "amountCents": 2500},
    "a chargeId of 65,000 characters (no refund request could carry it)": {"chargeId": "x" * 65_000},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_reply_whose_result_the_app_could_not_carry_is_dead_lettered_with_a_reason(waiting, case):
    body = _reply(CASES[case])
    assert len(body) <= 64 * 1024  # the contract reads it
    waiting.send(AGENT_REPLIES_QUEUE, body, "foreign-reply")
    waiting.host.run_until(waiting.clock.now() + timedelta(seconds=10))

    [letter] = waiting.broker.dead_letters(AGENT_REPLIES_QUEUE)
    assert (letter.message_id, letter.reason, letter.delivery_count) == ("foreign-reply", "ResultTooLarge", 1)
    assert letter.description and "charge-payment" in letter.description
    assert waiting.ctx is not None
    record = waiting.ctx.states.get(ORDER)
    assert record is not None
    step = record.steps["charge-payment"]
    assert step.status is not StepStatus.SUCCEEDED
    assert stored_size(step.result) <= RESULT_LIMIT
