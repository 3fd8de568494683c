"""Order intake trigger: Service Bus queue ``orders``, manual settlement."""

import asyncio

import azure.durable_functions as df
from azurefunctions.extensions.bindings import servicebus

from adapters.durable_client import bounded_client
from adapters.servicebus.settlement import apply_settlement
from contracts.names import ORDERS_QUEUE, SERVICE_BUS_CONNECTION
from dependencies import get_context_async
from notifications.alerts import hand_alerts_to_courier
from notifications.status import hand_to_courier
from orchestrators.raise_events import raise_events
from orchestrators.starter import start_claimed
from submission.courier_retry import settlement_after_hand_over
from submission.intake import handle_orders_message
from submission.payments import copy_if_dead_lettered

bp = df.Blueprint()


@bp.service_bus_queue_trigger(
    arg_name="message", queue_name=ORDERS_QUEUE, connection=SERVICE_BUS_CONNECTION, auto_complete_messages=False
)
@bp.durable_client_input(client_name="client")
async def submit_order(
    message: servicebus.ServiceBusReceivedMessage,
    message_actions: servicebus.ServiceBusMessageActions,
    client: df.DurableOrchestrationClient,
) -> None:
    ctx = await get_context_async()  # the worker's first call builds the SDK clients: off the event loop
    durable = bounded_client(client)
    result = await asyncio.to_thread(handle_orders_message, ctx, message)
    # The claimed attempt and the owed statuses and alerts are handed over before the message is settled: a
    # settlement that fails (the lock was lost) or a host that stops after it would drop them, and the
    # redelivery finds the record and starts nothing. All are safe to repeat (deterministic instance ids).
    # A status or an alert Durable did not take has the message handled again later, as a copy whose handling says
    # the status and raises the alert again (submission/courier_retry.py); never a failed trigger, redelivered at
    # once until an outage of more than a few seconds dead-lettered it MaxDeliveryCountExceeded. An alert no handling
    # raises again (a deferred notification's that handling this message dead-lettered; any, of a message dead-lettered
    # as it came or in its last store-retry round) is sent once more here, or logged AlertUndelivered, which pages.
    if result.claim is not None:
        await start_claimed(durable, [result.claim], ctx.settings.start_grace, ctx)
    not_taken = await hand_to_courier(durable, result.owed)
    alerts_not_taken = await hand_alerts_to_courier(durable, result.alerts, ctx.sender)
    settlement = (
        await asyncio.to_thread(settlement_after_hand_over, ctx, message, result, not_taken, alerts_not_taken)
        if not_taken or alerts_not_taken
        else result.settlement
    )
    # ServiceBusMessageActions' methods are blocking gRPC calls to the host, which answers once Service Bus has
    # (seconds when it retries): on the worker's event loop they would stall every invocation of the worker.
    await asyncio.to_thread(apply_settlement, message_actions, message, settlement)
    if result.settlement.kind == "defer":  # on its last allowed delivery, the defer dead-lettered it
        await asyncio.to_thread(copy_if_dead_lettered, ctx, message)
    await raise_events(durable, result.events)
