"""Red team: a lone surrogate (JSON ``"\\udc80"``, which ``json.loads`` returns in a ``str`` and no UTF-8 encoder
takes) in a free-form value from outside: an ``AgentReply``'s ``result`` on ``agent-replies``, a remote service's
HTTP answer. Through the real runtime (``RuntimeHarness``).

Found on ed08fef. The contracts refused a lone surrogate in their typed text fields (pydantic's constrained
strings, ``ClientText``), not inside a free-form value (``result``, ``payload``, ``details``: ``dict[str, Any]``),
nor in ``error`` (a plain ``str``), nor ``contracts.parsing.read_outside_json`` in a service's answer:

- a reply whose ``result`` held one was relayed and recorded as the step's result; the undo request built from it
  later could not be serialized (``PydanticSerializationError`` in ``send_agent_request``), and every compensation
  round's orchestration failed: the charge was never refunded, and the order ended ``CompensationFailed``;
- a service answering one made the agent's reply unsendable: the request failed its trigger on every delivery (the
  service called again each time) until Service Bus dead-lettered it ``MaxDeliveryCountExceeded``, no reason given.

Now any lone surrogate anywhere in a body (a value or a key, at any depth) is ``InvalidFields`` naming where, and
one in a service's answer is a transient ``RemoteError`` (the call acted; its answer cannot be carried:
tests/agents/test_redteam_malformed_http_answers.py, through the runtime too)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest

from adapters.remote.services import remote_services
from adapters.remote.simulators.config import SimulatorConfig
from contracts.names import AGENT_REPLIES_QUEUE, ORDERS_QUEUE
from domain.workflow import request_queues
from tests.runtime.harness import RuntimeHarness
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos

ORDER = "ord-ls1"


@pytest.fixture
def waiting_for_payment(cosmos_db) -> Iterator[RuntimeHarness]:
    """An attempt waiting for the payment agent's reply (the payment agent's trigger left out, so that the reply
    the test sends is the one the attempt gets), whose shipment will be refused (so a compensation round undoes
    the charge with the charge's result)."""
    made = RuntimeHarness(cosmos_db=cosmos_db)
    assert made.ctx is not None
    refused = SimulatorConfig(permanent_error_rate=1.0)
    made.change_context(remote=remote_services(made.ctx.settings, made.clock, {"shipping": refused}, seed=1))
    made.host.queues.pop(request_queues()["payment"])
    made.send(ORDERS_QUEUE, json.dumps(order(orderId=ORDER)), ORDER)
    made.host.run_until(made.clock.now() + timedelta(seconds=20))
    assert made.broker.counters(request_queues()["payment"]).sent == 1
    yield made
    made.close()


def _reply(**fields: object) -> bytes:
    body = {
        "type": "AgentReply",
        "schemaVersion": 1,
        "requestId": f"{ORDER}:1:charge-payment:payment",
        "instanceId": f"{ORDER}:1",
        "orderId": ORDER,
        "step": "charge-payment",
        "outcome": "succeeded",
    }
    return json.dumps(body | fields).encode()


REPLIES = {
    "result value": (_reply(result={"chargeId": "ch-\udc80"}), "result.chargeId"),
    "result in a list": (_reply(result={"refs": ["ok", "\ud800"]}), "result.refs.1"),
    "error": (_reply(outcome="failed", error="declined \udc80"), "error"),
}


@pytest.mark.parametrize("case", sorted(REPLIES))
def test_a_reply_holding_a_lone_surrogate_is_dead_lettered_and_no_orchestration_fails(waiting_for_payment, case):
    harness = waiting_for_payment
    body, field = REPLIES[case]
    harness.send(AGENT_REPLIES_QUEUE, body, "odd-reply")
    harness.host.run_until(harness.clock.now() + timedelta(minutes=10))

    failed = [(i.instance_id, i.output) for i in harness.host.engine.instances() if i.status.name == "Failed"]
    assert failed == [], failed
    dead = [d for d in harness.broker.dead_letters(AGENT_REPLIES_QUEUE) if d.message_id == "odd-reply"]
    assert [(d.reason, d.delivery_count) for d in dead] == [("InvalidFields", 1)], dead
    assert field in (dead[0].description or "") and "surrogate" in (dead[0].description or ""), dead[0].description
