"""Structured logs and OpenTelemetry (Azure Monitor) for every transition, recovery and alert."""
