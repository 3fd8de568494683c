"""Counts the paths one log record takes to Application Insights, in a fresh interpreter (the
OpenTelemetry providers are process-global): ``python -m tests.observability.telemetry_probe
'<app settings as JSON>' <host telemetryMode or "">`` prints a JSON report.

What is real here: the pinned runtime's WorkerInitRequest handler (``handle_event.worker_init_request``:
it reads PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY / PYTHON_ENABLE_OPENTELEMETRY, may configure
Azure Monitor itself, declares the ``WorkerOpenTelemetryEnabled`` capability, then imports
function_app.py, whose ``configure_telemetry()`` runs), the Azure Monitor distro and its exporters
(only ``export`` is replaced, so nothing leaves the machine), and the app's own event logging.

What is modelled, from their sources (docs/observability.md cites them):
- the proxy worker's ``AsyncLoggingHandler``, which the worker adds to the root logger before any
  request and which forwards every record to the host as an ``RpcLog``
  (azure-functions-python-worker, workers/proxy_worker/dispatcher.py);
- the host's decision to export a forwarded record: the host logs it under ``Function.<name>.User``;
  with ``telemetryMode: OpenTelemetry`` its OpenTelemetry logger drops ``Function.*`` when the worker
  declared ``WorkerOpenTelemetryEnabled`` (azure-functions-host, OpenTelemetryConfigurationExtensions.cs);
  in the classic Application Insights mode it drops them only for a worker that declares
  ``WorkerApplicationInsightsLoggingEnabled`` (GrpcWorkerChannel.cs), which the Python runtime never does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from types import SimpleNamespace
from typing import Any

from tests.infra.paths import ROOT

PROBE = "telemetry probe record"


class ForwardingHandler(logging.Handler):
    """Stands in for the proxy worker's AsyncLoggingHandler: every record reaching the root logger
    goes to the host."""

    def __init__(self) -> None:
        super().__init__()
        self.forwarded: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.forwarded.append(record)


def host_exports(telemetry_mode: str, capabilities: dict[str, str], has_connection: bool) -> bool:
    """Whether the host stores a forwarded user record (category ``Function.<name>.User``) in
    Application Insights."""
    if not has_connection:
        return False
    if telemetry_mode == "OpenTelemetry":
        return capabilities.get("WorkerOpenTelemetryEnabled") != "true"
    return capabilities.get("WorkerApplicationInsightsLoggingEnabled") != "true"


# The trace context the host gives an invocation (InvocationRequest.trace_context), as the runtime attaches it
# (``azure_functions_runtime.otel.configure_opentelemetry``) before the function runs.
INVOCATION_TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def send_in_an_invocation() -> dict[str, str]:
    """The application properties of one message the app's sender sends (an agent request) while an invocation's
    trace context is attached: the real ``azure-servicebus`` sender, only its AMQP link replaced
    (tests/adapters/test_sb_sdk_send_errors.py)."""
    from opentelemetry import context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from adapters.servicebus.sender import OutgoingMessage, SdkMessageSender
    from contracts.names import AGENT_REPLIES_QUEUE
    from tests.adapters.test_sb_sdk_send_errors import Namespace

    sent: list[dict[Any, Any]] = []

    class Recording(Namespace):
        def link(self, queue: str) -> Any:
            class Link:
                def send_message(self, message: Any, timeout: float | None = None) -> None:
                    sent.append(dict(message.application_properties or {}))

                def close(self) -> None:
                    pass

            return Link()

    token = context.attach(TraceContextTextMapPropagator().extract({"traceparent": INVOCATION_TRACEPARENT}))
    try:
        SdkMessageSender(Recording().client()).send(AGENT_REPLIES_QUEUE, OutgoingMessage(body="{}", message_id="probe"))
    finally:
        context.detach(token)
    [properties] = sent
    return {(k.decode() if isinstance(k, bytes) else str(k)): str(v) for k, v in properties.items()}


def probe(settings: dict[str, str], telemetry_mode: str) -> dict[str, Any]:
    from azure.monitor.opentelemetry.exporter import (
        AzureMonitorLogExporter,
        AzureMonitorMetricExporter,
        AzureMonitorTraceExporter,
    )
    from opentelemetry.sdk._logs.export import LogRecordExportResult
    from opentelemetry.sdk.metrics.export import MetricExportResult
    from opentelemetry.sdk.trace.export import SpanExportResult

    exported: list[dict[str, Any]] = []

    def export_logs(self: AzureMonitorLogExporter, batch: Any, **_: Any) -> LogRecordExportResult:
        for data in batch:
            record = getattr(data, "log_record", data)
            exported.append(
                {
                    "body": str(record.body),
                    "attributes": {k: str(v) for k, v in (record.attributes or {}).items()},
                    "credential": type(self._credential).__name__ if self._credential else None,
                    "client_id": getattr(self._credential, "probe_client_id", None),
                }
            )
        return LogRecordExportResult.SUCCESS

    # Record which managed identity a credential is for (its internals differ per hosting environment).
    import azure.identity
    import azure.monitor.opentelemetry.exporter.export._base as exporter_base

    class RecordingCredential(azure.identity.ManagedIdentityCredential):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.probe_client_id = kwargs.get("client_id")

    azure.identity.ManagedIdentityCredential = RecordingCredential  # type: ignore[misc]
    exporter_base.ManagedIdentityCredential = RecordingCredential  # type: ignore[attr-defined]

    AzureMonitorLogExporter.export = export_logs  # type: ignore[method-assign,assignment]
    AzureMonitorTraceExporter.export = lambda self, spans, **_: SpanExportResult.SUCCESS  # type: ignore[method-assign]
    AzureMonitorMetricExporter.export = lambda self, data, **_: MetricExportResult.SUCCESS  # type: ignore[method-assign]

    os.environ.update(settings)
    os.environ.setdefault("APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL", "true")

    # The proxy worker attaches its forwarding handler to the root logger, at INFO, before the host
    # sends WorkerInitRequest.
    forwarding = ForwardingHandler()
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(forwarding)

    import functions_host_protos as protos  # type: ignore[import-untyped]
    from azure_functions_runtime import handle_event  # type: ignore[import-untyped]

    message = protos.StreamingMessage(
        worker_init_request=protos.WorkerInitRequest(host_version="4.0", function_app_directory=str(ROOT))
    )
    response = asyncio.run(
        handle_event.worker_init_request(SimpleNamespace(request=message, properties={"host": "", "protos": protos}))
    )
    assert response.result.status == protos.StatusResult.Success, response.result.exception.message
    capabilities = dict(response.capabilities)

    from observability.events import app_event

    app_event("TelemetryProbe", PROBE, probe="1")
    from opentelemetry._logs import get_logger_provider

    flush = getattr(get_logger_provider(), "force_flush", None)
    if flush is not None:
        flush()

    from observability.setup import telemetry_plan

    exports = [e for e in exported if e["body"] == PROBE]
    forwarded = [r for r in forwarding.forwarded if r.getMessage() == PROBE]
    has_connection = bool(settings.get("APPLICATIONINSIGHTS_CONNECTION_STRING"))
    by_host = len(forwarded) if host_exports(telemetry_mode, capabilities, has_connection) else 0
    return {
        "plan": telemetry_plan(os.environ).exporter,
        "capabilities": capabilities,
        "exported_by_worker_process": exports,
        "forwarded_to_host": len(forwarded),
        "exported_by_host": by_host,
        "paths_to_application_insights": len(exports) + by_host,
        "sent_properties": send_in_an_invocation(),
        "otel_handlers_on_root": sorted(
            type(h).__name__ for h in root.handlers if type(h).__module__.startswith("opentelemetry")
        ),
    }


if __name__ == "__main__":
    report = probe(json.loads(sys.argv[1]), sys.argv[2])
    print(json.dumps(report))
