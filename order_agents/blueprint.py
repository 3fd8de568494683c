"""Function registrations of this role (thin triggers calling plain code).

- one Service Bus trigger per agent request queue (from the workflow table), manual settlement;
- the in-process inventory agent as the activity ``agent_inventory``;
- the reply relay on ``agent-replies``, raising Durable events through the durable client.

No ``from __future__ import annotations`` here: the worker reads the parameter annotations to bind
the SDK types (``ServiceBusReceivedMessage``, ``ServiceBusMessageActions``)."""

import asyncio
from collections.abc import Callable
from typing import Any

import azure.durable_functions as df
from azurefunctions.extensions.bindings import servicebus

from adapters.durable_client import bounded_client
from adapters.servicebus.settlement import apply_settlement
from contracts.names import AGENT_REPLIES_QUEUE, SERVICE_BUS_CONNECTION
from dependencies import get_context, get_context_async
from domain.workflow import request_queues
from order_agents.activity_agent import run_activity_agent
from order_agents.reply_relay import relay_reply
from order_agents.service_bus_agent import handle_agent_request

bp = df.Blueprint()

INVENTORY_ACTIVITY = "agent_inventory"
REPLY_RELAY_FUNCTION = "agent_reply_relay"


def request_trigger_name(agent_name: str) -> str:
    return f"agent_{agent_name}"


def _register_request_trigger(agent_name: str, queue: str) -> Callable[..., None]:
    def agent_trigger(
        message: servicebus.ServiceBusReceivedMessage, message_actions: servicebus.ServiceBusMessageActions
    ) -> None:
        apply_settlement(message_actions, message, handle_agent_request(get_context(), agent_name, message))

    agent_trigger.__name__ = agent_trigger.__qualname__ = request_trigger_name(agent_name)
    registered = bp.function_name(request_trigger_name(agent_name))(
        bp.service_bus_queue_trigger(
            arg_name="message",
            queue_name=queue,
            connection=SERVICE_BUS_CONNECTION,
            auto_complete_messages=False,
        )(agent_trigger)
    )
    return registered  # type: ignore[no-any-return]


for _agent_name, _queue in request_queues().items():
    _register_request_trigger(_agent_name, _queue)


@bp.function_name(INVENTORY_ACTIVITY)
@bp.activity_trigger(input_name="request", activity=INVENTORY_ACTIVITY)
def agent_inventory(request: Any) -> dict[str, Any] | None:
    return run_activity_agent(get_context(), "inventory", request)


@bp.function_name(REPLY_RELAY_FUNCTION)
@bp.service_bus_queue_trigger(
    arg_name="message",
    queue_name=AGENT_REPLIES_QUEUE,
    connection=SERVICE_BUS_CONNECTION,
    auto_complete_messages=False,
)
@bp.durable_client_input(client_name="client")
async def agent_reply_relay(
    message: servicebus.ServiceBusReceivedMessage,
    message_actions: servicebus.ServiceBusMessageActions,
    client: df.DurableOrchestrationClient,
) -> None:
    ctx = await get_context_async()  # sizes the loop's blocking pool; the first call builds the wiring off the loop
    settlement = await relay_reply(bounded_client(client), message, ctx)
    # A blocking gRPC call to the host, which answers once Service Bus has: off the worker's event loop.
    await asyncio.to_thread(apply_settlement, message_actions, message, settlement)
