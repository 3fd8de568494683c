"""Telemetry setup: Azure Monitor OpenTelemetry when a connection string is configured."""

from __future__ import annotations

import logging
import os

_configured = False


def configure_telemetry() -> None:
    """Exports logs, traces and metrics to Application Insights when
    ``APPLICATIONINSIGHTS_CONNECTION_STRING`` is set (authenticating with the managed identity
    through ``APPLICATIONINSIGHTS_AUTHENTICATION_STRING``); otherwise does nothing."""
    global _configured
    if _configured or not os.environ.get("APPLICATIONINSIGHTS_CONNECTION_STRING"):
        return
    from azure.monitor.opentelemetry import configure_azure_monitor

    credential = None
    client_id = os.environ.get("AZURE_CLIENT_ID")
    if "Authorization=AAD" in os.environ.get("APPLICATIONINSIGHTS_AUTHENTICATION_STRING", ""):
        from azure.identity import ManagedIdentityCredential

        credential = ManagedIdentityCredential(client_id=client_id) if client_id else ManagedIdentityCredential()
    configure_azure_monitor(credential=credential, logger_name="", enable_live_metrics=False)
    logging.getLogger("azure").setLevel(logging.WARNING)
    _configured = True
