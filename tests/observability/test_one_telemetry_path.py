"""One log record reaches Application Insights once (docs/observability.md).

Each case runs tests/observability/telemetry_probe.py in a fresh interpreter: the pinned runtime's
WorkerInitRequest handler with the app settings of the case (it imports function_app.py, whose
``configure_telemetry()`` runs), then one event through ``observability.events.app_event``, then a
count of the exporters that took it in the worker process plus the copy the host stores of the
record the worker forwards to it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from functools import cache
from typing import Any

import pytest

from observability.setup import telemetry_plan
from tests.infra.app_settings import bicep_app_settings
from tests.infra.deployment import DEPLOYMENT_VALUES
from tests.infra.paths import ROOT

CLIENT_ID = "11111111-2222-3333-4444-555555555555"
# What Bicep resolves applicationInsights.properties.ConnectionString and the identity to.
AZURE_VALUES = {
    "APPLICATIONINSIGHTS_CONNECTION_STRING": DEPLOYMENT_VALUES["applicationInsights.properties.ConnectionString"],
    "APPLICATIONINSIGHTS_AUTHENTICATION_STRING": f"Authorization=AAD;ClientId={CLIENT_ID}",
    "AZURE_CLIENT_ID": CLIENT_ID,
}
SWITCHES = ("PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY", "PYTHON_ENABLE_OPENTELEMETRY")
HOST_MODE: str = json.loads((ROOT / "host.json").read_text()).get("telemetryMode", "")


def deployed_settings() -> dict[str, str]:
    """The telemetry settings of the deployed app: the Bicep's literal switches, and the values the
    Bicep expressions resolve to."""
    properties = bicep_app_settings()
    switches = {name: properties[name] for name in SWITCHES if isinstance(properties.get(name), str)}
    return {**switches, **AZURE_VALUES}


def local_settings() -> dict[str, str]:
    values: dict[str, str] = json.loads((ROOT / "local.settings.json.example").read_text())["Values"]
    return {name: values[name] for name in ("APPLICATIONINSIGHTS_CONNECTION_STRING", *SWITCHES) if name in values}


@cache
def _probe(settings: str, mode: str) -> dict[str, Any]:
    # The exporters keep an offline store under the temp directory (Microsoft-AzureMonitor-<hash>); the probe's
    # goes in one of its own, removed after it, so the suite leaves nothing in the machine's /tmp.
    with tempfile.TemporaryDirectory(prefix="telemetry-probe-") as temp:
        result = subprocess.run(
            [sys.executable, "-m", "tests.observability.telemetry_probe", settings, mode],
            cwd=ROOT,
            env={**os.environ, "TMPDIR": temp},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 0, result.stderr[-4000:]
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


def probe(settings: dict[str, str], mode: str = HOST_MODE) -> dict[str, Any]:
    return _probe(json.dumps(settings, sort_keys=True), mode)


def test_the_host_runs_in_opentelemetry_mode() -> None:
    """Only in this mode does the host honour the worker's WorkerOpenTelemetryEnabled capability."""
    assert HOST_MODE == "OpenTelemetry"


def test_the_deployed_app_exports_each_record_once_with_its_dimensions_and_identity() -> None:
    report = probe(deployed_settings())
    assert report["plan"] == "app"
    assert report["capabilities"].get("WorkerOpenTelemetryEnabled") == "true"
    assert report["forwarded_to_host"] == 1 and report["exported_by_host"] == 0
    assert report["paths_to_application_insights"] == 1
    [exported] = report["exported_by_worker_process"]
    # The custom dimensions the failed-orders alert queries survive (the host's copy would lose them).
    assert exported["attributes"]["event"] == "TelemetryProbe"
    # Application Insights accepts only Entra ID: the exporter holds the app's managed identity.
    assert exported["credential"] == "RecordingCredential" and exported["client_id"] == CLIENT_ID
    assert report["otel_handlers_on_root"] == ["LoggingHandler"]


def test_the_deployed_apps_sends_carry_the_invocations_trace_context() -> None:
    """One order's telemetry joins across Service Bus: a message the app sends while an invocation runs (an agent
    request, a reply) carries that invocation's trace (W3C ``traceparent`` and ``Diagnostic-Id``, as the
    Service Bus SDKs read them), because the app's ``configure_azure_monitor`` keeps the Azure SDK tracing on."""
    from tests.observability.telemetry_probe import INVOCATION_TRACEPARENT

    sent = probe(deployed_settings())["sent_properties"]
    trace_id = INVOCATION_TRACEPARENT.split("-")[1]
    assert sent["traceparent"].split("-")[1] == trace_id
    assert sent["Diagnostic-Id"].split("-")[1] == trace_id


def test_a_local_run_exports_nothing() -> None:
    report = probe(local_settings())
    assert report["plan"] == "none"
    assert report["paths_to_application_insights"] == 0
    assert report["forwarded_to_host"] == 1  # still on the `func start` console
    assert report["otel_handlers_on_root"] == []
    assert "traceparent" not in report["sent_properties"]


@pytest.mark.parametrize(
    ("worker_telemetry", "worker_opentelemetry", "exporter"),
    [("false", "true", "app"), ("false", "false", "app"), ("true", "true", "worker"), ("true", "false", "worker")],
)
def test_every_combination_of_the_switches_keeps_one_path(
    worker_telemetry: str, worker_opentelemetry: str, exporter: str
) -> None:
    """Flip either switch in Azure and a record still reaches Application Insights exactly once:
    the worker's own Azure Monitor set-up makes the app stand back, and without the capability the
    app leaves log records to the host. The worker's set-up authenticates with the managed identity
    too: the exporter reads APPLICATIONINSIGHTS_AUTHENTICATION_STRING when given no credential."""
    settings = {**AZURE_VALUES, SWITCHES[0]: worker_telemetry, SWITCHES[1]: worker_opentelemetry}
    report = probe(settings)
    assert report["plan"] == exporter
    assert report["paths_to_application_insights"] == 1
    assert len(report["otel_handlers_on_root"]) == (0 if report["exported_by_host"] else 1)
    for exported in report["exported_by_worker_process"]:
        assert exported["client_id"] == CLIENT_ID


def test_without_opentelemetry_mode_the_host_would_store_a_second_copy() -> None:
    """Why host.json carries telemetryMode: in the classic mode the host ignores the capability and
    stores the forwarded record too (what happened before: every trace twice)."""
    report = probe(deployed_settings(), mode="")
    assert report["paths_to_application_insights"] == 2


def test_switches_read_as_the_runtime_reads_them() -> None:
    from azure_functions_runtime.utils.app_setting_manager import is_true_like  # type: ignore[import-untyped]

    for value in ("true", "True", " TRUE ", "1", "yes", "y", "t", "false", "0", "no", "", "enabled"):
        settings = {**AZURE_VALUES, SWITCHES[0]: value}
        assert (telemetry_plan(settings).exporter == "worker") == is_true_like(value), value
