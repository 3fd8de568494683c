"""Queues and Cosmos DB containers. The infrastructure declares exactly these (checked by a test)."""

from __future__ import annotations

from domain.workflow import request_queues

ORDERS_QUEUE = "orders"
AGENT_REPLIES_QUEUE = "agent-replies"
OPERATOR_ALERTS_QUEUE = "operator-alerts"
# One request queue per remote (Service Bus) agent, from the workflow table.
AGENT_REQUEST_QUEUES: dict[str, str] = request_queues()
# Example submitter status queue (deployed with a role assignment scoped to it alone).
EXAMPLE_STATUS_QUEUE = "client-statuses"

# The queues the app itself reads or alerts on: never a submitter's ``replyTo``.
APP_QUEUES: tuple[str, ...] = (
    ORDERS_QUEUE,
    AGENT_REPLIES_QUEUE,
    OPERATOR_ALERTS_QUEUE,
    *AGENT_REQUEST_QUEUES.values(),
)

ALL_QUEUES: tuple[str, ...] = (*APP_QUEUES, EXAMPLE_STATUS_QUEUE)
_APP_QUEUES_FOLDED = frozenset(q.casefold() for q in APP_QUEUES)


def is_app_queue(name: str) -> bool:
    """Whether ``name`` is one of ``APP_QUEUES`` (Service Bus entity names are case-insensitive)."""
    return name.casefold() in _APP_QUEUES_FOLDED


ORDERS_CONTAINER = "orders"
STATE_CONTAINER = "state"
PARTITION_KEY_PATH = "/orderId"
# The ``state`` container's time to live (Cosmos DB's ``defaultTtl``, infra/modules/cosmos.bicep): -1 turns it on
# with no default, so only a document with a ``ttl`` of its own expires (the alert marks: domain/alert_marks.py);
# without it an item's ``ttl`` is ignored. The ``orders`` container has none.
STATE_DEFAULT_TTL = -1

# Connection setting prefix shared by the Service Bus triggers and the SDK clients.
SERVICE_BUS_CONNECTION = "ServiceBusConnection"

# The Durable external event an agent's reply is raised as (by the reply relay).
AGENT_REPLY_EVENT = "AgentReply"
# The Durable external event a prepaid order's PaymentNotification is raised as, when it arrives
# while the payment step waits for it (by submission).
PAYMENT_NOTIFIED_EVENT = "PaymentNotified"

# Queue policy shared by every queue (the Bicep declares the same; a test checks it).
# Lock duration covers one agent request: AGENT_MAX_ATTEMPTS calls with backoff fit in a step deadline.
QUEUE_LOCK_DURATION_SECONDS = 60
QUEUE_MAX_DELIVERY_COUNT = 5
QUEUE_DUPLICATE_DETECTION_MINUTES = 10
# How long a queue keeps a message, deferred or not, before it dead-letters it (TTLExpiredException): the
# Bicep's defaultMessageTimeToLive. Settings that wait on a deferred message stay under it (settings.py).
QUEUE_MESSAGE_TTL_DAYS = 14
