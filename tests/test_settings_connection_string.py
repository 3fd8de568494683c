"""Red team: an ``APPLICATIONINSIGHTS_CONNECTION_STRING`` the Azure Monitor exporter cannot read.

Found on ed08fef. The setting was free text. ``garbage`` or ``InstrumentationKey=not-a-guid`` stopped the app at
start-up all the same, but with the exporter's ``ValueError`` ("Invalid connection string", "Invalid instrumentation
key"), which names no setting; ``InstrumentationKey=<uuid>;IngestionEndpoint=notaurl`` started it, and every
export failed ("Invalid URL 'notaurl/v2.1/track'"): no telemetry, and the failed-orders alert that reads it silent.
Each is now a ``SettingsError`` naming the setting, read as the exporter reads it
(``azure.monitor.opentelemetry.exporter._connection_string_parser``)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from settings import Settings, SettingsError

NAME = "APPLICATIONINSIGHTS_CONNECTION_STRING"
KEY = str(uuid.UUID(int=0))  # a placeholder, no real key
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "value",
    [
        "garbage",
        " ",
        "InstrumentationKey=not-a-guid",
        f"InstrumentationKey={uuid.UUID(int=0xABCDEF)}".upper().replace("INSTRUMENTATIONKEY", "InstrumentationKey"),
        f"InstrumentationKey={KEY};",
        f"InstrumentationKey={KEY};IngestionEndpoint=notaurl",
        f"InstrumentationKey={KEY};LiveEndpoint=ftp://live.example",
        f"InstrumentationKey={KEY};Authorization=aad",
        "IngestionEndpoint=https://westeurope-5.in.applicationinsights.azure.com/",
    ],
)
def test_a_connection_string_the_exporter_cannot_read_is_refused_naming_the_setting(value: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({NAME: value})
    assert str(raised.value).startswith(f"{NAME}={value!r} is not valid")


@pytest.mark.parametrize(
    "value",
    [
        "",
        f"InstrumentationKey={KEY}",
        f"InstrumentationKey={KEY};IngestionEndpoint=https://westeurope-5.in.applicationinsights.azure.com/;"
        "LiveEndpoint=https://westeurope.livediagnostics.monitor.azure.com/;ApplicationId=" + KEY,
    ],
)
def test_a_connection_string_the_exporter_reads_is_taken(value: str) -> None:
    assert Settings.from_env({NAME: value}).applicationinsights_connection_string == value
    if value:
        from azure.monitor.opentelemetry.exporter._connection_string_parser import ConnectionStringParser

        ConnectionStringParser(value)  # the exporter agrees


def test_the_app_refuses_to_start_with_it_and_names_it() -> None:
    env = {**os.environ, NAME: "garbage", "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY": "false"}
    command = [sys.executable, "-c", "import function_app"]
    started = subprocess.run(command, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert started.returncode != 0
    assert f"SettingsError: {NAME}='garbage' is not valid" in started.stderr, started.stderr[-600:]
