"""Building the Service Bus SDK client from the same settings the triggers use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters.servicebus.sender import SdkMessageSender
from contracts.names import SERVICE_BUS_CONNECTION
from settings import Settings

if TYPE_CHECKING:
    from azure.servicebus import ServiceBusClient


def create_sdk_client(settings: Settings) -> ServiceBusClient:
    from azure.servicebus import ServiceBusClient

    namespace = settings.service_bus_namespace
    if namespace:
        from adapters.identity import managed_identity

        return ServiceBusClient(namespace, managed_identity(settings.service_bus_client_id))
    connection_string = settings.service_bus_connection_string
    if not connection_string:
        raise RuntimeError(
            f"set {SERVICE_BUS_CONNECTION}__fullyQualifiedNamespace (Azure) or {SERVICE_BUS_CONNECTION} (emulator)"
        )
    return ServiceBusClient.from_connection_string(connection_string)


def create_sender(settings: Settings) -> SdkMessageSender:
    return SdkMessageSender(create_sdk_client(settings))
