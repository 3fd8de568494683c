"""host.json and azure.yaml: valid against the published schemas, and the settings the app relies on."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from settings import (
    LOCK_RENEWAL,
    MAX_CONCURRENT_ACTIVITIES,
    SERVICE_BUS_MAX_CONCURRENT_CALLS,
    SETTINGS,
    sync_concurrency,
)
from supervisor.budget import RUN_BUDGET
from supervisor.run import RECOVERY_BUDGET
from tests.infra.paths import ROOT, schema

HOST = json.loads((ROOT / "host.json").read_text())


def validate(schema_file: Path, document: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--schemafile", str(schema_file), str(document)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_host_json_matches_its_schema():
    result = validate(schema("host.json.schema.json"), ROOT / "host.json")
    assert result.returncode == 0, result.stdout + result.stderr


def test_azure_yaml_matches_its_schema():
    result = validate(schema("azure.yaml.schema.json"), ROOT / "azure.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_validation_rejects_a_bad_host_json(tmp_path):
    """The validation above can fail: an unknown top-level key is refused."""
    bad = tmp_path / "host.json"
    bad.write_text(json.dumps({**HOST, "extensionBundel": {}}))
    assert validate(schema("host.json.schema.json"), bad).returncode != 0


def test_host_uses_extension_bundle_4():
    assert HOST["version"] == "2.0"
    assert HOST["extensionBundle"] == {"id": "Microsoft.Azure.Functions.ExtensionBundle", "version": "[4.*, 5.0.0)"}


def test_durable_task_hub_is_fixed_and_on_azure_storage():
    durable = HOST["extensions"]["durableTask"]
    assert durable["hubName"] == "OrdersTaskHub"
    # Azure Storage is the provider when storageProvider has no `type` (mssql/netherite set one).
    assert "type" not in durable.get("storageProvider", {})


def timespan(text: str) -> timedelta:
    """A host.json TimeSpan ``hh:mm:ss``."""
    hours, minutes, seconds = (int(part) for part in text.split(":"))
    return timedelta(hours=hours, minutes=minutes, seconds=seconds)


# The Durable extension's own default on Flex Consumption (WEBSITE_SKU=FlexConsumption) since
# azure-functions-durable-extension PR #2953, "to help with cold start latency specific to Durable Functions Flex
# Consumption apps" (30 s on every other plan): AzureStorageOptions.MaxQueuePollingInterval.
FLEX_DEFAULT_QUEUE_POLLING = timedelta(seconds=1)


def test_durable_queue_polling_is_not_slower_than_the_flex_default():
    """An idle Azure Storage task hub is polled at most every ``maxQueuePollingInterval``: each start, activity
    work item, activity result, timer and raised event (an agent's reply) can wait that long. On Flex Consumption
    the extension polls at most every second unless host.json says otherwise, and Microsoft's Flex recommendation
    is to lower the interval, not raise it (durable-functions-azure-storage-provider, "Flex Consumption plan").
    host.json set 10 s, ten times the Flex default: several such waits per step of a 60 s step deadline."""
    provider = HOST["extensions"]["durableTask"]["storageProvider"]
    assert timespan(provider["maxQueuePollingInterval"]) <= FLEX_DEFAULT_QUEUE_POLLING


def test_service_bus_settles_manually_without_prefetch():
    service_bus = HOST["extensions"]["serviceBus"]
    assert service_bus["autoCompleteMessages"] is False
    assert service_bus["prefetchCount"] == 0
    assert 1 <= service_bus["maxConcurrentCalls"] <= 32
    assert service_bus["maxAutoLockRenewalDuration"] == "00:05:00"
    # the agent settings are checked against it at start (settings.agent_request_longest)
    assert timedelta(minutes=5) == LOCK_RENEWAL


def test_the_worker_pool_covers_the_sync_concurrency_host_json_allows():
    """PYTHON_THREADPOOL_THREAD_COUNT (what the Bicep, the azd hooks and local.settings.json.example write) covers what
    host.json lets one instance run at once on the worker's pool for sync functions: every sync request queue's
    maxConcurrentCalls and the activities' maxConcurrentActivityFunctions (plus the Flex HTTP concurrency,
    tests/infra/test_consistency.py), as settings.sync_concurrency counts them."""
    assert HOST["extensions"]["serviceBus"]["maxConcurrentCalls"] == SERVICE_BUS_MAX_CONCURRENT_CALLS
    assert HOST["extensions"]["durableTask"]["maxConcurrentActivityFunctions"] == MAX_CONCURRENT_ACTIVITIES
    threads = next(s for s in SETTINGS if s.name == "PYTHON_THREADPOOL_THREAD_COUNT")
    assert int(threads.written) >= sync_concurrency()


def test_log_levels():
    levels = HOST["logging"]["logLevel"]
    assert levels["Function"] == "Information"
    assert levels["Host.Results"] == "Information"
    assert levels["Azure.Core"] == "Warning"
    assert levels["DurableTask.AzureStorage"] == "Warning"


def test_function_timeout_is_bounded():
    hours, minutes, seconds = (int(part) for part in HOST["functionTimeout"].split(":"))
    assert 0 < hours * 3600 + minutes * 60 + seconds <= 2 * 3600


def test_a_supervisor_run_at_its_worst_ends_before_the_host_kills_it():
    """``supervisor.budget``: a run starts no unit of work past ``RUN_BUDGET``; what may still run after it is the
    unit under way (8 min 10 s at worst: eight Cosmos DB requests answered at the last moment and three sends) and
    the starts (60 s). Lowering functionTimeout, or raising the budget, past that would have the host kill the run
    and restart the worker under every invocation on it."""
    hours, minutes, seconds = (int(part) for part in HOST["functionTimeout"].split(":"))
    worst_tail = timedelta(minutes=8, seconds=10) + timedelta(seconds=60)
    assert RECOVERY_BUDGET < RUN_BUDGET
    assert RUN_BUDGET + worst_tail < timedelta(hours=hours, minutes=minutes, seconds=seconds)


def test_azure_yaml_deploys_this_folder_as_a_python_function_app():
    text = (ROOT / "azure.yaml").read_text()
    for expected in ("  api:\n", "    project: .\n", "    language: python\n", "    host: function\n"):
        assert expected in text
    assert "./scripts/postprovision.sh" in text
    assert "./scripts/postprovision.ps1" in text
