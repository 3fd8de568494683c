"""scripts/preprovision.sh (the azd preprovision hook), run for real with a stub `az` on PATH:
options and region are checked before anything is provisioned, with a message that says what to do."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.infra.paths import MODULES, ROOT
from tests.infra.test_ops_app_registration import option, preprovision

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


# VNET_ENABLED on a fresh subscription: the Microsoft.App resource provider


def test_private_networking_registers_the_app_provider_a_fresh_subscription_lacks(tmp_path):
    """Flex Consumption's VNet integration needs Microsoft.App registered on the subscription (the app
    subnet is delegated to Microsoft.App/environments; "Considerations" in
    learn.microsoft.com/azure/azure-functions/flex-consumption-plan). A deployment registers only the
    providers of the template's own resource types, and no Microsoft.App resource is one of them."""
    env = {"VNET_ENABLED": "true", "AZURE_SUBSCRIPTION_ID": "sub-1"}
    hook = preprovision(tmp_path, env, {"app_provider": "NotRegistered"})
    assert hook.returncode == 0, hook.stderr
    (shown,) = hook.az("provider", "show")
    assert option(shown["argv"], "--namespace") == "Microsoft.App"
    (registered,) = hook.az("provider", "register")
    assert option(registered["argv"], "--namespace") == "Microsoft.App"
    assert "--wait" in registered["argv"]  # provisioning starts once it is registered
    assert option(shown["argv"], "--subscription") == option(registered["argv"], "--subscription") == "sub-1"
    assert "Microsoft.App" in hook.stdout


def test_a_registered_app_provider_is_left_alone(tmp_path):
    hook = preprovision(tmp_path, {"VNET_ENABLED": "true"}, {"app_provider": "Registered"})
    assert hook.returncode == 0, hook.stderr
    assert len(hook.az("provider", "show")) == 1
    assert hook.az("provider", "register") == []
    assert "--subscription" not in hook.az("provider", "show")[0]["argv"]  # az's own subscription


def test_without_private_networking_no_provider_is_touched(tmp_path):
    hook = preprovision(tmp_path, {}, {"app_provider": "NotRegistered"})
    assert hook.returncode == 0, hook.stderr
    assert hook.az("provider") == []


def test_a_refused_provider_registration_stops_before_provisioning(tmp_path):
    state = {"app_provider": "NotRegistered", "register_fails": True}
    hook = preprovision(tmp_path, {"VNET_ENABLED": "true"}, state)
    assert hook.returncode == 1
    assert "az provider register --namespace Microsoft.App" in hook.stderr


def test_the_provider_state_not_readable_warns_and_lets_azure_decide(tmp_path):
    hook = preprovision(tmp_path, {"VNET_ENABLED": "true"}, {"provider_show_fails": True})
    assert hook.returncode == 0, hook.stderr
    assert "Microsoft.App" in hook.stderr and hook.az("provider", "register") == []


def test_the_powershell_twin_registers_the_same_provider_in_the_same_place():
    ps1 = (ROOT / "scripts" / "preprovision.ps1").read_text()
    for call in (
        "provider show --namespace Microsoft.App --query registrationState -o tsv",
        "provider register --namespace Microsoft.App --wait",
    ):
        assert call in ps1 and call in SCRIPT.read_text(), call
    assert "$env:AZURE_SUBSCRIPTION_ID" in ps1
    order = [ps1.index(step) for step in ("(Test-Region)", "(Register-AppProvider)", "(Set-OpsApp)")]
    assert order == sorted(order)


# DURABLE_BACKEND=dts: the scheduler's region


def test_dts_in_a_region_without_the_scheduler_stops_listing_the_regions_that_have_it(tmp_path):
    """The scheduler is offered in most regions, not all; Microsoft's page gives this query for the
    list (learn.microsoft.com/azure/durable-task/scheduler/durable-task-scheduler, "Supported regions").
    Its names are display names ("Sweden Central"), AZURE_LOCATION's are not ("swedencentral")."""
    state = {"regions": "westcentralus\nswedencentral", "dts_regions": ["Sweden Central", "East US"]}
    hook = preprovision(tmp_path, {"DURABLE_BACKEND": "dts", "AZURE_LOCATION": "westcentralus"}, state)
    assert hook.returncode == 1
    assert "westcentralus does not offer the Durable Task Scheduler" in hook.stderr
    assert "Sweden Central" in hook.stderr and "DURABLE_BACKEND storage" in hook.stderr
    (shown,) = hook.az("provider", "show")
    assert option(shown["argv"], "--namespace") == "Microsoft.DurableTask"
    assert "schedulers" in option(shown["argv"], "--query")


def test_dts_in_a_region_with_the_scheduler_passes(tmp_path):
    hook = preprovision(tmp_path, {"DURABLE_BACKEND": "dts", "AZURE_LOCATION": "swedencentral"})
    assert hook.returncode == 0, hook.stderr
    assert len(hook.az("provider", "show")) == 1


def test_the_storage_backend_does_not_ask_for_scheduler_regions(tmp_path):
    hook = preprovision(tmp_path, {})
    assert hook.returncode == 0, hook.stderr
    assert hook.az("provider") == []


def test_scheduler_regions_not_readable_warn_and_let_azure_decide(tmp_path):
    hook = preprovision(tmp_path, {"DURABLE_BACKEND": "dts"}, {"provider_show_fails": True})
    assert hook.returncode == 0, hook.stderr
    assert "Durable Task Scheduler" in hook.stderr


def test_the_powershell_twin_checks_the_scheduler_region_the_same_way():
    ps1 = (ROOT / "scripts" / "preprovision.ps1").read_text()
    query = "resourceTypes[?resourceType=='schedulers'].locations[]"
    assert f'provider show --namespace Microsoft.DurableTask --query "{query}" -o tsv' in SCRIPT.read_text()
    assert f"'provider', 'show', '--namespace', 'Microsoft.DurableTask', '--query', \"{query}\", '-o', 'tsv'" in ps1
    order = [ps1.index(step) for step in ("(Test-Region)", "(Test-SchedulerRegion)", "(Set-OpsApp)")]
    assert order == sorted(order)


def test_the_shell_hooks_keep_lf_line_endings_in_a_windows_clone():
    """A clone with core.autocrlf=true would give the hooks CRLF, and sh stops at `set -eu\r`."""
    scripts = ["scripts/preprovision.sh", "scripts/postprovision.sh", ".ci/run"]
    out = subprocess.run(
        ["git", "check-attr", "eol", "--", *scripts], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines() == [f"{path}: eol: lf" for path in scripts]
