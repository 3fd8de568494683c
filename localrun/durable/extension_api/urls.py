"""The URLs the Durable extension puts in a ``durableClient`` binding and in the 202 answer to a
start (``HttpApiHandler.GetClientResponseLinks``, ``GetInstanceCreationLinks``,
``BindingHelper.DurableOrchestrationClientToString``).

The extension serves its API twice: on the host's public webhook path
(``/runtime/webhooks/durabletask``, the URLs users see) and on a local RPC listener
(``http://127.0.0.1:<port>/durabletask/``, the ``rpcBaseUrl`` every Python client call goes to).
The runner serves both paths from one loopback port."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus

WEBHOOK_PATH = "/runtime/webhooks/durabletask"
RPC_PATH = "/durabletask/"
INSTANCE_ID_PLACEHOLDER = "INSTANCEID"
# The Azure Storage provider's default connection name, as the extension writes it into URLs.
DEFAULT_CONNECTION = "Storage"


def url_encode(text: str) -> str:
    """``System.Net.WebUtility.UrlEncode``: space as ``+``; letters, digits and ``-_.!*()`` kept."""
    return quote_plus(text, safe="!*()").replace("~", "%7E")


@dataclass(frozen=True)
class ExtensionUrls:
    origin: str  # scheme://host:port, no trailing slash
    task_hub: str
    connection: str = DEFAULT_CONNECTION
    # The webhook URL's own query: ``code=<durabletask_extension system key>`` on Azure. The runner
    # checks no keys, so it has none.
    system_key_query: str = ""

    @property
    def base_url(self) -> str:
        """``GetBaseUrl``: the webhook base, no trailing slash."""
        return self.origin + WEBHOOK_PATH

    @property
    def rpc_base_url(self) -> str:
        return self.origin + RPC_PATH

    def _query_suffix(self) -> str:
        suffix = f"taskHub={url_encode(self.task_hub)}&connection={url_encode(self.connection)}"
        return f"{suffix}&{self.system_key_query}" if self.system_key_query else suffix

    def management_urls(self, instance_id: str) -> dict[str, str]:
        """``HttpManagementPayload`` for one instance, in the class's property order."""
        prefix = f"{self.base_url}/instances/{url_encode(instance_id)}"
        query = self._query_suffix()
        return {
            "id": instance_id,
            "statusQueryGetUri": f"{prefix}?{query}",
            "sendEventPostUri": f"{prefix}/raiseEvent/{{eventName}}?{query}",
            "terminatePostUri": f"{prefix}/terminate?reason={{text}}&{query}",
            "rewindPostUri": f"{prefix}/rewind?reason={{text}}&{query}",
            "purgeHistoryDeleteUri": f"{prefix}?{query}",
            "restartPostUri": f"{prefix}/restart?{query}",
            "suspendPostUri": f"{prefix}/suspend?reason={{text}}&{query}",
            "resumePostUri": f"{prefix}/resume?reason={{text}}&{query}",
        }

    def check_status_body(self, instance_id: str) -> dict[str, str]:
        """The body of the 202 answer to a start (``CreateCheckStatusResponseMessage``): the
        management URLs without the rewind one."""
        urls = self.management_urls(instance_id)
        del urls["rewindPostUri"]
        return urls

    def creation_urls(self) -> dict[str, str]:
        prefix = self.base_url + "/orchestrators/{functionName}[/{instanceId}]"
        query = self.system_key_query
        return {
            "createNewInstancePostUri": f"{prefix}?{query}",
            "createAndWaitOnNewInstancePostUri": (
                f"{prefix}?timeout={{timeoutInSeconds}}&pollingInterval={{intervalInSeconds}}&{query}"
            ),
        }

    def client_binding(self) -> dict[str, Any]:
        """``OrchestrationClientInputData`` for the HTTP protocol the Python SDK speaks. Newtonsoft
        writes unset properties as null, so the gRPC-only ones are present and null."""
        return {
            "taskHubName": self.task_hub,
            "connectionName": None,
            "creationUrls": self.creation_urls(),
            "managementUrls": self.management_urls(INSTANCE_ID_PLACEHOLDER),
            "baseUrl": self.base_url,
            "requiredQueryStringParameters": self.system_key_query,
            "rpcBaseUrl": self.rpc_base_url,
            "httpBaseUrl": None,
            "maxGrpcMessageSizeInBytes": None,
        }

    def client_binding_json(self) -> str:
        return json.dumps(self.client_binding())
