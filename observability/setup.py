"""Telemetry setup: one path from a log record to Application Insights (docs/observability.md).

Three parties could export a log record the app writes: the app (Azure Monitor OpenTelemetry on the
root logger, with the managed identity), the Python worker (``PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY``
makes it call ``configure_azure_monitor`` itself) and the Functions host (the worker forwards every
record to it over gRPC, and the host stores them unless the worker declares
``WorkerOpenTelemetryEnabled`` and host.json has ``telemetryMode: OpenTelemetry``). The deployed
settings choose the app: ``PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY=false`` (the worker sets up
nothing) and ``PYTHON_ENABLE_OPENTELEMETRY=true`` (the worker declares the capability, so the host
drops the forwarded copies). ``telemetry_plan`` keeps every other combination to one path as well.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from settings import WORKER_TRUE, authentication_pairs, identity_transport

CONNECTION_STRING = "APPLICATIONINSIGHTS_CONNECTION_STRING"
AUTHENTICATION_STRING = "APPLICATIONINSIGHTS_AUTHENTICATION_STRING"
WORKER_TELEMETRY = "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY"
WORKER_OPENTELEMETRY = "PYTHON_ENABLE_OPENTELEMETRY"
LOGS_EXPORTER = "OTEL_LOGS_EXPORTER"

Exporter = Literal["app", "worker", "none"]

log = logging.getLogger(__name__)
_configured = False


def _true(value: str | None) -> bool:
    """The Functions runtime's reading of a boolean app setting (utils/app_setting_manager.is_true_like)."""
    return value is not None and value.strip().lower() in WORKER_TRUE


@dataclass(frozen=True)
class TelemetryPlan:
    """Who exports, and whether the app's exporter takes log records (traces and metrics it always
    takes when it exports)."""

    exporter: Exporter
    app_exports_logs: bool
    reason: str


def telemetry_plan(env: Mapping[str, str]) -> TelemetryPlan:
    if not env.get(CONNECTION_STRING):
        return TelemetryPlan("none", False, f"{CONNECTION_STRING} is empty: nothing is exported")
    if _true(env.get(WORKER_TELEMETRY)):
        return TelemetryPlan(
            "worker",
            False,
            f"{WORKER_TELEMETRY} is true: the worker configured Azure Monitor on the root logger before it "
            "imported the app; a second pipeline would export every record twice",
        )
    if _true(env.get(WORKER_OPENTELEMETRY)):
        return TelemetryPlan(
            "app",
            True,
            f"{WORKER_OPENTELEMETRY} is true: the host does not export the records the worker forwards, "
            "the app exports them (with their custom dimensions)",
        )
    return TelemetryPlan(
        "app",
        False,
        f"{WORKER_OPENTELEMETRY} is not true: the host exports the records the worker forwards, so the app "
        "exports traces and metrics only (log records then lose their custom dimensions and the "
        "failed-orders alert, which reads them, stays silent)",
    )


def _credential(env: Mapping[str, str]) -> dict[str, Any]:
    """The managed identity ``APPLICATIONINSIGHTS_AUTHENTICATION_STRING`` names (Application Insights has local
    authentication off): its ``ClientId``, or the system-assigned identity without one, as the host and the
    worker's exporter take it, so all three sign in as one identity. Empty, or a text the app's settings refuse
    at start-up: none (the exporter then reads the string itself)."""
    pairs = authentication_pairs(env.get(AUTHENTICATION_STRING, ""))
    if not pairs:
        return {}
    from azure.identity import ManagedIdentityCredential

    return {"credential": ManagedIdentityCredential(client_id=pairs.get("clientid"), **identity_transport())}


def _configure_azure_monitor(env: Mapping[str, str], export_logs: bool) -> None:
    from azure.monitor.opentelemetry import configure_azure_monitor

    # The distro (1.8.11) overwrites a ``disable_logging`` keyword with its environment default, so
    # the only switch that holds is OTEL_LOGS_EXPORTER=none, read while it configures.
    previous = os.environ.get(LOGS_EXPORTER)
    if not export_logs:
        os.environ[LOGS_EXPORTER] = "none"
    try:
        configure_azure_monitor(
            connection_string=env[CONNECTION_STRING], logger_name="", enable_live_metrics=False, **_credential(env)
        )
    finally:
        if previous is None:
            os.environ.pop(LOGS_EXPORTER, None)
        else:
            os.environ[LOGS_EXPORTER] = previous


def configure_telemetry(env: Mapping[str, str] | None = None) -> TelemetryPlan:
    """Sets up the app's export as ``telemetry_plan`` decides (once per process) and returns the plan."""
    global _configured
    source = os.environ if env is None else env
    plan = telemetry_plan(source)
    if _configured or plan.exporter == "none":
        return plan
    if plan.exporter == "app":
        _configure_azure_monitor(source, export_logs=plan.app_exports_logs)
    logging.getLogger("azure").setLevel(logging.WARNING)
    _configured = True
    if plan.exporter == "app" and not plan.app_exports_logs:
        log.warning("telemetry: %s", plan.reason)
    else:
        log.info("telemetry: %s", plan.reason)
    return plan
