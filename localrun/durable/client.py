"""The durable client the app's functions receive from the local runner, in place of
``azure.durable_functions.DurableOrchestrationClient``: the same async calls, the same serialisation,
and the same exceptions and messages as the SDK (its status-code tables, applied to the engine's
``HostResponse`` as the SDK applies them to the extension's HTTP responses)."""

from __future__ import annotations

import json
from typing import Any

from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus
from azure.durable_functions.models.utils.df_serialization import df_dumps

from localrun.durable.engine import DurableEngine
from localrun.durable.history import timestamp_text


class LocalDurableClient:
    def __init__(self, engine: DurableEngine) -> None:
        self._engine = engine

    async def start_new(
        self,
        orchestration_function_name: str,
        instance_id: str | None = None,
        client_input: Any | None = None,
        version: str | None = None,
    ) -> str:
        input_json = None if client_input is None else str(df_dumps(client_input))
        response = self._engine.start(orchestration_function_name, instance_id, input_json)
        if response.status <= 202 and response.body:
            return str(response.body["id"])
        if response.status == 400:
            raise Exception(response.body["ExceptionMessage"])
        raise Exception(response.body)

    async def raise_event(
        self,
        instance_id: str,
        event_name: str,
        event_data: Any = None,
        task_hub_name: str | None = None,
        connection_name: str | None = None,
    ) -> None:
        if event_name == "":
            raise ValueError("event_name must be a non-empty string.")
        response = self._engine.raise_event(instance_id, event_name, json.dumps(event_data))
        messages = {
            202: None,
            410: f"Instance with ID {instance_id} is gone: either completed or failed",
            404: f"No instance with ID {instance_id} found.",
            400: "Only application/json request content is supported",
        }
        message = messages.get(response.status, f"Webhook returned unrecognized status code {response.status}")
        if message:
            raise Exception(message)

    async def get_status(
        self,
        instance_id: str,
        show_history: bool = False,
        show_history_output: bool = False,
        show_input: bool = False,
    ) -> DurableOrchestrationStatus:
        """The instance's status; for an unknown instance, a status whose ``runtime_status`` is None
        (and which is falsy), as the SDK returns on a 404."""
        instance = self._engine.instance(instance_id)
        if instance is None:
            return DurableOrchestrationStatus()
        return DurableOrchestrationStatus(
            name=instance.name,
            instanceId=instance.instance_id,
            createdTime=timestamp_text(instance.created),
            lastUpdatedTime=timestamp_text(instance.last_updated),
            input=json.loads(instance.input_json) if show_input and instance.input_json is not None else None,
            output=instance.output,
            runtimeStatus=instance.status.value,
            customStatus=instance.custom_status,
        )

    async def terminate(self, instance_id: str, reason: str) -> None:
        response = self._engine.terminate(instance_id, reason)
        messages = {202: None, 410: None, 404: f"No instance with ID '{instance_id}' found."}
        unexpected = f"The operation failed with an unexpected status code {response.status}"
        message = messages.get(response.status, unexpected)
        if message:
            raise Exception(message)
