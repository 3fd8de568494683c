"""Triggers through the real runtime's invocation path, as the runner's host delivers them: Service Bus
messages arrive as the extension encodes them and are settled through the extension's own
``ServiceBusMessageActions`` over gRPC to the host's settlement service; a ``durableClient`` is the SDK's
own client calling the host's Durable HTTP API. Each test fails if the host called functions directly."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from contracts.names import ORDERS_QUEUE
from tests.runtime.harness import RuntimeHarness
from tests.submission.corpus import MALFORMED, order

pytestmark = pytest.mark.cosmos


@pytest.fixture
def harness(cosmos_db) -> Iterator[RuntimeHarness]:
    made = RuntimeHarness(cosmos_db=cosmos_db)
    yield made
    made.close()


def test_every_malformed_message_is_dead_lettered_with_its_reason_through_grpc_settlement(harness, cosmos_db):
    for number, (_, body, _, _) in enumerate(MALFORMED):
        harness.send(ORDERS_QUEUE, body, f"bad-{number}")
    harness.run_until_idle()

    dead = {d.message_id: d for d in harness.broker.dead_letters(ORDERS_QUEUE)}
    for number, (case, _, reason, word) in enumerate(MALFORMED):
        letter = dead.get(f"bad-{number}")
        assert letter is not None, case
        assert (letter.reason, letter.delivery_count) == (reason, 1), case
        assert word in (letter.description or ""), case
    assert harness.host.settlement.calls["Deadletter"] == len(MALFORMED)
    assert harness.host.executions["submit_order"] == len(MALFORMED)
    assert list(cosmos_db.get_container_client("state").read_all_items()) == []


def test_orders_are_completed_over_grpc_and_their_orchestrations_started_over_http(harness):
    """Two orders, two invocations of ``submit_order``, each starting its orchestration with the SDK's
    client: the second start works only because both invocations ran on the worker's one event loop
    (the SDK keeps one aiohttp session per process, bound to the loop that created it)."""
    for order_id in ("ord-rt-1", "ord-rt-2"):
        harness.send(ORDERS_QUEUE, json.dumps(order(orderId=order_id, replyTo="client-statuses")), order_id)
    harness.run_until_idle()

    assert harness.broker.counters(ORDERS_QUEUE).completed == 2
    assert harness.host.settlement.calls["Complete"] >= 2
    for order_id in ("ord-rt-1", "ord-rt-2"):
        assert harness.host.engine.instance(f"{order_id}:1") is not None, order_id  # started over HTTP
        assert harness.ctx is not None and harness.ctx.states.get(order_id) is not None
    assert harness.host.durable_api.requests >= 2


def test_every_invocation_is_an_invocation_request_the_runtime_handled(harness, caplog):
    caplog.set_level(logging.INFO, logger="azure.functions")  # the runtime's own logger
    harness.send(ORDERS_QUEUE, json.dumps(order(orderId="ord-rt-2")), "ord-rt-2")
    harness.run_until_idle()

    handled = [r for r in caplog.records if r.getMessage().startswith("Function name: ")]
    assert harness.host.invocation_requests == sum(harness.host.executions.values()) == len(handled) > 0
