"""Azurite from ``node_modules`` (npm devDependency) is the Functions host's storage for ``func start``
without Docker (docs/deploy.md): ``AzureWebJobsStorage=UseDevelopmentStorage=true``. The host uses
blobs with leases (timer schedule monitor, singleton locks), queues (the Durable task hub's control
and work-item queues) and tables (Durable instances and histories). Each is exercised here against
the Azurite the project installs, started the way the docs say (telemetry off)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AZURITE = ROOT / "node_modules" / ".bin" / "azurite"
# Azurite's well-known development account (public, the same in every Azurite).
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
LISTENING = re.compile(r"Azurite (Blob|Queue|Table) service is successfully listening at (http://\S+)")


@pytest.fixture(scope="module")
def endpoints() -> Iterator[dict[str, str]]:
    if not AZURITE.exists():
        pytest.fail(f"{AZURITE} is missing: run `python3 dev.py setup` (npm ci installs Azurite)")
    process = subprocess.Popen(
        [
            str(AZURITE),
            *("--blobPort", "0", "--queuePort", "0", "--tablePort", "0"),
            *("--inMemoryPersistence", "--disableTelemetry", "--skipApiVersionCheck"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    found: dict[str, str] = {}
    assert process.stdout is not None
    for line in process.stdout:
        match = LISTENING.search(line)
        if match:
            found[match.group(1).lower()] = match.group(2)
        if len(found) == 3:
            break
    try:
        assert len(found) == 3, f"Azurite did not start its three services: {found}"
        yield found
    finally:
        process.terminate()
        process.wait(timeout=10)


def connection_string(endpoints: dict[str, str]) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
        f"BlobEndpoint={endpoints['blob']}/{ACCOUNT};QueueEndpoint={endpoints['queue']}/{ACCOUNT};"
        f"TableEndpoint={endpoints['table']}/{ACCOUNT};"
    )


def test_blobs_with_leases_as_the_host_takes_its_singleton_locks(endpoints):
    from azure.core.exceptions import HttpResponseError
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient.from_connection_string(connection_string(endpoints))
    container = service.create_container("azure-webjobs-hosts")
    blob = container.upload_blob("locks/app/host", b"")
    lease = blob.acquire_lease(lease_duration=15)
    with pytest.raises(HttpResponseError):  # a second holder is refused while the lease lasts
        blob.acquire_lease(lease_duration=15)
    lease.release()
    assert blob.acquire_lease(lease_duration=15).id


def test_queues_as_the_durable_task_hub_uses_them(endpoints):
    from azure.storage.queue import QueueServiceClient

    service = QueueServiceClient.from_connection_string(connection_string(endpoints))
    queue = service.create_queue("orderstaskhub-control-00")
    queue.send_message("work item")
    [message] = list(queue.receive_messages(max_messages=1, visibility_timeout=30))
    assert message.content == "work item"
    queue.delete_message(message)
    assert list(queue.receive_messages(max_messages=1)) == []


def test_tables_as_the_durable_task_hub_keeps_instances(endpoints):
    from azure.data.tables import TableServiceClient

    service = TableServiceClient.from_connection_string(connection_string(endpoints))
    table = service.create_table("OrdersTaskHubInstances")
    table.upsert_entity({"PartitionKey": "ord-1:1", "RowKey": "", "RuntimeStatus": "Running"})
    [entity] = list(table.query_entities("RuntimeStatus eq 'Running'"))
    assert entity["PartitionKey"] == "ord-1:1"
