"""scripts/preprovision.sh (the azd preprovision hook), run for real with a stub `az` on PATH:
options and region are checked before anything is provisioned, with a message that says what to do."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.infra.paths import MODULES, ROOT

SCRIPT = ROOT / "scripts" / "preprovision.sh"
STUB = """#!/bin/sh
# stub az: records its arguments, prints the regions (or fails)
echo "$@" > "{log}"
{body}
"""


def run(
    tmp_path: Path, env: dict[str, str], az_body: str | None = "printf 'swedencentral\\neastus\\n'"
) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if az_body is not None:
        az = bin_dir / "az"
        az.write_text(STUB.format(log=tmp_path / "az-args", body=az_body))
        az.chmod(0o755)
    path = f"{bin_dir}:/usr/bin:/bin"
    return subprocess.run(
        ["sh", str(SCRIPT)], env={"PATH": path, **env}, capture_output=True, text=True, timeout=30, check=False
    )


def test_a_region_with_flex_python_313_passes_and_asks_for_that_version(tmp_path):
    done = run(tmp_path, {"AZURE_LOCATION": "swedencentral"})
    assert done.returncode == 0, done.stderr
    args = (tmp_path / "az-args").read_text()
    assert "list-flexconsumption-locations" in args and "--runtime python" in args
    assert "--runtime-version 3.13" in args


def test_the_version_asked_is_the_one_the_bicep_deploys():
    bicep = (MODULES / "functionapp.bicep").read_text()
    deployed = re.search(r"name: 'python'\s+version: '([\d.]+)'", bicep)
    assert deployed
    assert f"PYTHON_VERSION={deployed.group(1)} " in SCRIPT.read_text()
    assert f"$PythonVersion = '{deployed.group(1)}'" in (ROOT / "scripts" / "preprovision.ps1").read_text()


def test_a_region_without_it_fails_clearly_listing_the_regions_that_have_it(tmp_path):
    done = run(tmp_path, {"AZURE_LOCATION": "westindia"})
    assert done.returncode == 1
    assert "westindia does not offer Flex Consumption with Python 3.13" in done.stderr
    assert "swedencentral" in done.stderr and "azd env set AZURE_LOCATION" in done.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"AZURE_LOCATION": "swedencentral", "DURABLE_BACKEND": "netherite"},
            "DURABLE_BACKEND must be 'storage' or 'dts'",
        ),
        ({"AZURE_LOCATION": "swedencentral", "VNET_ENABLED": "yes"}, "VNET_ENABLED must be 'true' or 'false'"),
        ({}, "AZURE_LOCATION is not set"),
    ],
)
def test_bad_options_fail_before_asking_azure(tmp_path, env, message):
    done = run(tmp_path, env)
    assert done.returncode == 1
    assert message in done.stderr
    assert not (tmp_path / "az-args").exists()


def test_without_az_or_sign_in_it_warns_and_lets_bicep_validate(tmp_path):
    missing = run(tmp_path, {"AZURE_LOCATION": "swedencentral"}, az_body=None)
    assert missing.returncode == 0 and "az (Azure CLI) not found" in missing.stderr
    signed_out = run(tmp_path, {"AZURE_LOCATION": "swedencentral"}, az_body="exit 1")
    assert signed_out.returncode == 0 and "run 'az login'" in signed_out.stderr


def test_vnet_option_states_its_cost(tmp_path):
    done = run(tmp_path, {"AZURE_LOCATION": "swedencentral", "VNET_ENABLED": "true", "DURABLE_BACKEND": "dts"})
    assert done.returncode == 0
    assert "Service Bus becomes Premium" in done.stdout


def test_azure_yaml_runs_both_twins_before_provisioning():
    text = (ROOT / "azure.yaml").read_text()
    assert "  preprovision:\n" in text
    assert "./scripts/preprovision.sh" in text and "./scripts/preprovision.ps1" in text
    assert os.access(SCRIPT, os.X_OK)
