"""Red team: what an ``AgentReply`` on ``agent-replies`` can make the reply relay do, through the real
runtime. The relay (order_agents/reply_relay.py ``relay_reply``) hands the reply's ``instanceId``
(any 1-200 characters: ``ShortText``) to the SDK's ``DurableOrchestrationClient.raise_event``, which
pastes it into the Durable HTTP API's URL unescaped: ``{rpcBaseUrl}instances/{instanceId}/raiseEvent/{name}``
(azure/durable_functions/models/DurableOrchestrationClient.py ``_get_raise_event_url``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest

from adapters.remote.services import remote_services
from adapters.remote.simulators.config import SimulatorConfig
from contracts.names import AGENT_REPLIES_QUEUE, ORDERS_QUEUE
from domain.states import ProcessState
from tests.operations.harness import OPERATOR, OpsHarness
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos

ORDER = "o-victim"
ATTEMPT = f"{ORDER}:1"


@pytest.fixture
def paused(cosmos_db) -> Iterator[OpsHarness]:
    """An attempt paused for review (payment declined by both providers on a high-value order): a
    running orchestration instance that waits for an event, as every attempt waiting for an agent does."""
    made = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR, REVIEW_TIMEOUT_SECONDS="600")
    assert made.ctx is not None
    declined = SimulatorConfig(permanent_error_rate=1.0)
    made.change_context(
        remote=remote_services(made.ctx.settings, made.clock, {"payment": declined, "payment_backup": declined}, seed=3)
    )
    body = order(orderId=ORDER, lines=[{"sku": "SKU-9", "quantity": 1, "unitPriceCents": 150000}])
    made.send(ORDERS_QUEUE, json.dumps(body), ORDER)
    made.run_until_idle()
    instance = made.host.engine.instance(ATTEMPT)
    assert instance is not None and not instance.is_finished
    yield made
    made.close()


def _reply(instance_id: str) -> bytes:
    return json.dumps(
        {
            "type": "AgentReply",
            "schemaVersion": 1,
            "requestId": "r-forged",
            "instanceId": instance_id,
            "orderId": ORDER,
            "step": "charge-payment",
            "outcome": "succeeded",
        }
    ).encode()


@pytest.mark.parametrize(
    "instance_id",
    [
        f"{ATTEMPT}/terminate?reason=a-reply&x=",
        f"{ATTEMPT}/terminate#",
        f"x/../{ATTEMPT}/terminate?",
    ],
)
def test_a_reply_cannot_terminate_an_orchestration_through_its_instance_id(paused, instance_id):
    """FINDING. A reply whose ``instanceId`` is ``<attempt>/terminate?reason=...&x=`` makes the relay POST
    ``instances/<attempt>/terminate?reason=...&x=/raiseEvent/AgentReply``: the Durable HTTP API
    terminates that attempt (202, which ``raise_event`` takes for success, so the relay logs the reply as
    raised and completes it). Any message on ``agent-replies`` can end any orchestration, forward
    attempt or compensation round. Expected: the instance id is refused (dead-letter) or escaped."""
    paused.send(AGENT_REPLIES_QUEUE, _reply(instance_id), "forged-reply")
    paused.host.run_until(paused.clock.now() + timedelta(seconds=30))

    instance = paused.host.engine.instance(ATTEMPT)
    assert instance is not None
    assert not instance.is_finished, f"the reply {instance_id!r} ended {ATTEMPT}: {instance.status}"
    assert paused.ctx is not None and paused.ctx.states.get(ORDER).process_state is ProcessState.PROCESSING


@pytest.mark.parametrize(
    "instance_id",
    ["a/b", "a?b", "a#b", "a\\b", "..", ".", "%", "%2F", "a b", "\u00e9\u4e2d", "a\u0001b", "a\nb", "x" * 200, "+"],
)
def test_a_reply_for_an_odd_unknown_instance_id_is_settled_on_its_first_delivery(cosmos_db, instance_id):
    """A late reply for an instance that does not exist is completed (or dead-lettered) at once, never
    abandoned delivery after delivery to ``MaxDeliveryCountExceeded``.

    FINDING for ``.`` and ``%2F``: the unescaped id turns ``get_status``'s ``GET instances/{id}`` into
    the list-instances call (``instances/`` once the URL is normalised or decoded). The emulator
    answers 501; the extension answers 200 with a JSON array, which the SDK's
    ``DurableOrchestrationStatus.from_json`` cannot take (``cls(**list)``). Either way ``get_status``
    raises, and order_agents/reply_relay.py ``relay_reply`` abandons ("raise_event failed and so did
    get_status") on every delivery: dead-lettered by Service Bus after 5, with no reason of the app's."""
    made = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR)
    try:
        made.send(AGENT_REPLIES_QUEUE, _reply(instance_id), "odd-reply")
        made.host.run_until(made.clock.now() + timedelta(minutes=10))
        counters = made.broker.counters(AGENT_REPLIES_QUEUE)
        dead = made.broker.dead_letters(AGENT_REPLIES_QUEUE)
        assert counters.completed + len(dead) == 1, (instance_id, counters, dead)
        if dead:
            assert dead[0].reason != "MaxDeliveryCountExceeded" and dead[0].delivery_count == 1, dead[0]
    finally:
        made.close()
