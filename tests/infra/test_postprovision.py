"""scripts/postprovision.sh writes local.settings.json from `azd env get-values` (azd is replaced
by a stub printing what azd prints), and the PowerShell twin writes the same settings."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from settings import SETTINGS
from tests.infra.paths import ROOT

SCRIPT = ROOT / "scripts" / "postprovision.sh"
POWERSHELL = ROOT / "scripts" / "postprovision.ps1"
HOST_LOCAL = {"FUNCTIONS_WORKER_RUNTIME", "AzureWebJobsStorage"}

AZD_VALUES = """AZURE_ENV_NAME="dev"
AZURE_LOCATION="swedencentral"
COSMOS_DATABASE="scheduler"
COSMOS_ENDPOINT="https://cosmos-abc.documents.azure.com:443/"
SERVICEBUS_FULLY_QUALIFIED_NAMESPACE="sb-abc.servicebus.windows.net"
"""


def run_hook(tmp_path: Path, values: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("sh") is None:
        pytest.skip("no POSIX sh on this machine")
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, project / "scripts" / SCRIPT.name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "values.env").write_text(values)
    stub = bin_dir / "azd"
    stub.write_text(f'#!/bin/sh\n[ "$1 $2" = "env get-values" ] || exit 9\ncat "{tmp_path / "values.env"}"\n')
    stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["sh", str(project / "scripts" / SCRIPT.name)], env=env, capture_output=True, text=True, timeout=30, check=False
    )


def test_writes_settings_for_the_provisioned_resources(tmp_path):
    result = run_hook(tmp_path, AZD_VALUES)
    assert result.returncode == 0, result.stderr
    values = json.loads((tmp_path / "project" / "local.settings.json").read_text())["Values"]
    assert values["ServiceBusConnection__fullyQualifiedNamespace"] == "sb-abc.servicebus.windows.net"
    assert values["COSMOS_ENDPOINT"] == "https://cosmos-abc.documents.azure.com:443/"
    assert values["COSMOS_DATABASE"] == "scheduler"
    assert values["COSMOS_VERIFY_TLS"] == "true"
    assert values["AzureWebJobsStorage"] == "UseDevelopmentStorage=true"


def test_writes_only_settings_the_app_or_host_reads(tmp_path):
    assert run_hook(tmp_path, AZD_VALUES).returncode == 0
    values = json.loads((tmp_path / "project" / "local.settings.json").read_text())["Values"]
    known = {s.name for s in SETTINGS} | HOST_LOCAL
    assert sorted(set(values) - known) == []
    # No key: against Azure the app signs in with the developer's identity.
    assert "COSMOS_KEY" not in values and "ServiceBusConnection" not in values


def test_keeps_the_previous_file(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "local.settings.json").write_text('{"previous": true}')
    assert run_hook(tmp_path, AZD_VALUES).returncode == 0
    assert json.loads((project / "local.settings.json.bak").read_text()) == {"previous": True}


def test_fails_clearly_before_provisioning(tmp_path):
    result = run_hook(tmp_path, 'AZURE_ENV_NAME="dev"\n')
    assert result.returncode != 0
    assert "azd provision" in result.stderr
    assert not (tmp_path / "project" / "local.settings.json").exists()


def test_powershell_twin_reads_and_writes_the_same_names():
    def names(text: str) -> set[str]:
        return set(re.findall(r"\b(?:SERVICEBUS|COSMOS|ServiceBusConnection|AzureWebJobs|FUNCTIONS)[A-Za-z_]*", text))

    assert names(POWERSHELL.read_text()) == names(SCRIPT.read_text())
