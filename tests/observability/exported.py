"""What Application Insights stores for the app's log records: each record the app logs while ``exported()`` is
open goes through the real OpenTelemetry logging handler the Azure Monitor distro installs
(``opentelemetry.instrumentation.logging.handler.LoggingHandler``, azure-monitor-opentelemetry 1.8.11) and the
real exporter's record-to-envelope conversion (``_convert_log_to_envelope``, azure-monitor-opentelemetry-exporter);
nothing is sent. An envelope of base type ``MessageData`` is a row of the workspace's ``AppTraces`` table, its
properties that row's ``Properties`` column (``customDimensions`` in classic Application Insights): every value a
string (``str(value)``: ``3``, ``True``), a ``None`` left out, so ``Properties.x`` is then empty."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    """One exported record: the table it lands in, its ``SeverityLevel`` and its ``Properties``."""

    table: str
    severity_level: int
    properties: dict[str, str]


_TABLES = {"MessageData": "AppTraces", "ExceptionData": "AppExceptions", "EventData": "AppEvents"}


@contextmanager
def exported() -> Iterator[list[Row]]:
    from azure.monitor.opentelemetry.exporter.export.logs._exporter import _convert_log_to_envelope
    from opentelemetry.instrumentation.logging.handler import LoggingHandler
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

    memory = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    handler = LoggingHandler(logger_provider=provider)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    rows: list[Row] = []
    try:
        yield rows
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        for readable in memory.get_finished_logs():
            envelope = _convert_log_to_envelope(readable)
            data = envelope.data.base_data  # type: ignore[union-attr]
            rows.append(
                Row(
                    _TABLES.get(envelope.data.base_type or "", str(envelope.data.base_type)),  # type: ignore[union-attr]
                    int(getattr(data, "severity_level", 0) or 0),
                    dict(getattr(data, "properties", None) or {}),
                )
            )
