"""Red team: an ``OrderSubmitted`` whose ``replyTo`` names one of the app's own queues, through the real
runtime. ``replyTo`` is any Service Bus queue name (contracts/messages.py ``QueueName``), and the app
can send to every queue of its namespace: a submitter can make the app post its ``StatusUpdate``s onto
``orders``, ``agent-replies``, ``operator-alerts`` or an agent's request queue."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from contracts.names import ALL_QUEUES, EXAMPLE_STATUS_QUEUE, ORDERS_QUEUE
from tests.runtime.harness import RuntimeHarness
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos

APP_QUEUES = sorted(q for q in ALL_QUEUES if q != EXAMPLE_STATUS_QUEUE)


@pytest.fixture
def harness(cosmos_db) -> Iterator[RuntimeHarness]:
    made = RuntimeHarness(cosmos_db=cosmos_db)
    yield made
    made.close()


@pytest.mark.parametrize("queue", APP_QUEUES)
def test_a_reply_to_naming_one_of_the_apps_own_queues_sends_no_status_there(harness, queue):
    """FINDING. Nothing refuses a ``replyTo`` that is one of the app's queues: the ``Received`` status
    (and every later one) is sent there. On ``operator-alerts`` it reads as an alert (the ops summary's
    ``recentAlerts`` lists it); on ``orders``, ``agent-replies`` and the request queues it is a message of
    the wrong type, dead-lettered ``UnknownType`` by the app's own triggers. Expected: the order is
    dead-lettered ``InvalidFields`` naming ``replyTo``, or at least no status goes to the app's queues."""
    harness.send(ORDERS_QUEUE, json.dumps(order(orderId="ord-rt-own", replyTo=queue)), "ord-rt-own")
    harness.run_until_idle()

    statuses = [m for m in harness.broker.peek(queue, 100) if json.loads(m.body).get("type") == "StatusUpdate"] + [
        d for d in harness.broker.dead_letters(queue) if d.message_id.startswith("ord-rt-own:")
    ]
    assert statuses == [], f"status updates sent to the app's own queue {queue!r}: {[s.message_id for s in statuses]}"
