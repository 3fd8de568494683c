"""Driving the registered ``submit_order`` trigger from the in-process broker, as the host does."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from adapters.servicebus.sender import OutgoingMessage
from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE
from localrun.servicebus import InProcessBroker

TOTAL = 2500  # the order below: 2 x 1250


def order(order_id: str = "p1", *, prepaid: bool = True, **more: Any) -> dict[str, Any]:
    return {
        "type": "OrderSubmitted",
        "schemaVersion": 1,
        "orderId": order_id,
        "customerId": "cust-1",
        "lines": [{"sku": "SKU-1", "quantity": 2, "unitPriceCents": 1250}],
        "currency": "EUR",
        "shipTo": "1 Main St",
        "replyTo": "client-statuses",
        "prepaid": prepaid,
        **more,
    }


def notification(
    order_id: str = "p1", *, amount: int = TOTAL, notification_id: str = "n-1", **more: Any
) -> dict[str, Any]:
    return {
        "type": "PaymentNotification",
        "schemaVersion": 1,
        "notificationId": notification_id,
        "orderId": order_id,
        "amountCents": amount,
        "currency": "EUR",
        "providerReference": f"psp-{notification_id}",
        **more,
    }


def send(broker: InProcessBroker, body: dict[str, Any], message_id: str | None = None) -> None:
    mid = message_id or body.get("notificationId") or body["orderId"]
    broker.send(ORDERS_QUEUE, OutgoingMessage(body=json.dumps(body), message_id=mid))


class DurableClientStub:
    """The two durable-client calls the orders trigger makes; ``gone`` instances answer like a
    finished one (the SDK raises a plain Exception)."""

    def __init__(self, gone: set[str] | None = None) -> None:
        self.started: list[tuple[str, str | None, Any]] = []
        self.raised: list[tuple[str, str, Any]] = []
        self.gone = gone or set()

    async def start_new(
        self, orchestration_function_name: str, instance_id: str | None = None, client_input: Any | None = None
    ) -> str:
        self.started.append((orchestration_function_name, instance_id, client_input))
        return instance_id or ""

    async def raise_event(self, instance_id: str, event_name: str, event_data: Any = None) -> None:
        if instance_id in self.gone:
            raise Exception(f"Instance with ID {instance_id} is gone: either completed or failed")
        self.raised.append((instance_id, event_name, event_data))


def deliver(functions: dict[str, Any], broker: InProcessBroker, client: DurableClientStub | None = None) -> bool:
    """Delivers the next orders message to the registered trigger; False when there is none."""
    message = broker.receive(ORDERS_QUEUE)
    if message is None:
        return False
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=message, message_actions=broker.actions, client=client or DurableClientStub()))
    return True


def alerts(broker: InProcessBroker) -> list[dict[str, Any]]:
    return [json.loads(m.body) for m in broker.peek(OPERATOR_ALERTS_QUEUE, 100)]


def deferred_sequence_numbers(broker: InProcessBroker) -> list[int]:
    return [m.sequence_number for m in broker.peek(ORDERS_QUEUE, 100) if m.state.name == "DEFERRED"]


def deliver_all(functions: dict[str, Any], broker: InProcessBroker) -> None:
    """Delivers every orders message that is due, as the host would, until none is left."""
    while deliver(functions, broker, DurableClientStub()):
        pass


def deferred_for_the_order_database(functions: dict[str, Any], ctx: Any, broker: InProcessBroker) -> tuple[Any, Any]:
    """Order p1 written, then its notification deferred while the order database is down (RetryDeferred
    round 1 scheduled); the failing store (``failing`` to bring it back) and the context using it."""
    from tests.contexts import context_with
    from tests.fakes import OrderStoreThatFailsOnRead

    orders = OrderStoreThatFailsOnRead(ctx.orders)
    with_orders: Any = context_with(ctx, orders=orders)
    send(broker, order())
    deliver_all(functions, broker)
    orders.failing = True
    send(broker, notification())
    assert deliver(functions, broker)
    return orders, with_orders
