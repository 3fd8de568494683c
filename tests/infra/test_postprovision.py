"""scripts/postprovision.sh merges the settings a local run against Azure needs into
local.settings.json (azd is replaced by a stub printing what `azd env get-values` prints; the hook
runs for real under sh with python3). The PowerShell twin cannot run here (no pwsh on these
machines), so its key lists and values are checked against what the sh hook actually writes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from settings import SETTINGS
from tests.infra.paths import ROOT

SCRIPT = ROOT / "scripts" / "postprovision.sh"
POWERSHELL = ROOT / "scripts" / "postprovision.ps1"
HOST_LOCAL = {"FUNCTIONS_WORKER_RUNTIME", "AzureWebJobsStorage"}
SCHEDULES = {"STARTER_SCHEDULE", "SUPERVISOR_SCHEDULE", "PEEK_SWEEP_SCHEDULE"}
# What the hook takes from azd, and the local-only setting it always sets (Azure has real certificates).
OWNED = {
    "ServiceBusConnection__fullyQualifiedNamespace": "sb-abc.servicebus.windows.net",
    "COSMOS_ENDPOINT": "https://cosmos-abc.documents.azure.com:443/",
    "COSMOS_DATABASE": "scheduler",
    "COSMOS_VERIFY_TLS": "true",
}
REMOVED = {"ServiceBusConnection", "COSMOS_KEY"}

AZD_VALUES = """AZURE_ENV_NAME="dev"
AZURE_LOCATION="swedencentral"
COSMOS_DATABASE="scheduler"
COSMOS_ENDPOINT="https://cosmos-abc.documents.azure.com:443/"
SERVICEBUS_FULLY_QUALIFIED_NAMESPACE="sb-abc.servicebus.windows.net"
"""


def project(tmp_path: Path) -> Path:
    return tmp_path / "project"


def run_hook(tmp_path: Path, values: str = AZD_VALUES) -> subprocess.CompletedProcess[str]:
    sh = shutil.which("sh")
    assert sh is not None, "no POSIX sh on this machine (azd runs the hook with sh)"
    scripts = project(tmp_path) / "scripts"
    scripts.mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPT, scripts / SCRIPT.name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / "values.env").write_text(values)
    stub = bin_dir / "azd"
    stub.write_text(f'#!/bin/sh\n[ "$1 $2" = "env get-values" ] || exit 9\ncat "{tmp_path / "values.env"}"\n')
    stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        [sh, str(scripts / SCRIPT.name)], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def settings_file(tmp_path: Path) -> Path:
    return project(tmp_path) / "local.settings.json"


def written(tmp_path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(settings_file(tmp_path).read_text())
    return document


def backups(tmp_path: Path) -> list[Path]:
    return sorted(project(tmp_path).glob("local.settings.json.*.bak"))


def existing(tmp_path: Path, document: dict[str, Any] | str) -> str:
    project(tmp_path).mkdir(parents=True, exist_ok=True)
    text = document if isinstance(document, str) else json.dumps(document, indent=4)
    settings_file(tmp_path).write_text(text)
    return text


def developer_file() -> dict[str, Any]:
    """A developer's file made from the example (emulators) and then tuned by hand."""
    document: dict[str, Any] = json.loads((ROOT / "local.settings.json.example").read_text())
    document["Values"]["MAX_PENDING"] = "7"
    document["Values"]["SUPERVISOR_SCHEDULE"] = "*/5 * * * * *"
    document["Values"]["MY_OWN_FLAG"] = "on"
    document["Values"].pop("PEEK_SWEEP_SCHEDULE")
    document["Host"] = {"LocalHttpPort": 7072}
    return document


# A fresh file


def test_writes_settings_for_the_provisioned_resources(tmp_path: Path) -> None:
    result = run_hook(tmp_path)
    assert result.returncode == 0, result.stderr
    document = written(tmp_path)
    assert document["IsEncrypted"] is False
    values = document["Values"]
    assert {key: values[key] for key in OWNED} == OWNED
    assert values["AzureWebJobsStorage"] == "UseDevelopmentStorage=true"
    assert values["FUNCTIONS_WORKER_RUNTIME"] == "python"
    assert backups(tmp_path) == []  # nothing to back up


def test_writes_every_setting_the_app_needs_locally_at_its_default(tmp_path: Path) -> None:
    """Every setting both places read (the timer schedules included: the host refuses a timer whose
    %NAME% does not resolve from app settings) is written, at the settings.py default (or the value it
    declares deployments write, ``Setting.deployed``)."""
    assert run_hook(tmp_path).returncode == 0
    values = written(tmp_path)["Values"]
    both = {s.name: s.written for s in SETTINGS if s.where == "both"}
    assert set(both) >= SCHEDULES
    assert {name: values.get(name) for name in both if name not in OWNED} == {
        name: default for name, default in both.items() if name not in OWNED
    }


def test_writes_only_settings_the_app_or_host_reads(tmp_path: Path) -> None:
    assert run_hook(tmp_path).returncode == 0
    values = written(tmp_path)["Values"]
    known = {s.name for s in SETTINGS} | HOST_LOCAL
    assert sorted(set(values) - known) == []
    # No key: against Azure the app signs in with the developer's identity.
    assert REMOVED.isdisjoint(values)


def test_fails_clearly_before_provisioning(tmp_path: Path) -> None:
    result = run_hook(tmp_path, 'AZURE_ENV_NAME="dev"\n')
    assert result.returncode != 0
    assert "azd provision" in result.stderr
    assert not settings_file(tmp_path).exists()


# Merging into an existing file


def test_merges_into_the_developers_file(tmp_path: Path) -> None:
    existing(tmp_path, developer_file())
    result = run_hook(tmp_path)
    assert result.returncode == 0, result.stderr
    document = written(tmp_path)
    values = document["Values"]
    # Keys the hook does not own keep the developer's values, and other sections stay.
    assert values["MAX_PENDING"] == "7"
    assert values["SUPERVISOR_SCHEDULE"] == "*/5 * * * * *"
    assert values["MY_OWN_FLAG"] == "on"
    assert document["Host"] == {"LocalHttpPort": 7072}
    # A missing setting is added at its default.
    assert values["PEEK_SWEEP_SCHEDULE"] == "0 */5 * * * *"
    # Owned keys take the provisioned values; the emulator credentials that would win over the
    # identity-based connections are gone.
    assert {key: values[key] for key in OWNED} == OWNED
    assert REMOVED.isdisjoint(values)
    # The hook says what it did with conflicts.
    assert "COSMOS_ENDPOINT" in result.stdout and "ServiceBusConnection" in result.stdout
    assert "MAX_PENDING" in result.stdout  # kept the developer's value


def test_keeps_a_timestamped_backup_of_the_previous_file(tmp_path: Path) -> None:
    before = existing(tmp_path, developer_file())
    assert run_hook(tmp_path).returncode == 0
    saved = backups(tmp_path)
    assert len(saved) == 1
    assert re.fullmatch(r"local\.settings\.json\.\d{8}T\d{6}Z(-\d+)?\.bak", saved[0].name)
    assert saved[0].read_text() == before  # byte for byte: the emulator key is still there


def test_a_second_run_changes_nothing(tmp_path: Path) -> None:
    existing(tmp_path, developer_file())
    assert run_hook(tmp_path).returncode == 0
    after_first = settings_file(tmp_path).read_text()
    result = run_hook(tmp_path)
    assert result.returncode == 0, result.stderr
    assert settings_file(tmp_path).read_text() == after_first
    assert len(backups(tmp_path)) == 1  # no backup of an unchanged file
    assert "already up to date" in result.stdout


def test_backups_of_runs_in_the_same_second_do_not_overwrite_each_other(tmp_path: Path) -> None:
    existing(tmp_path, developer_file())
    assert run_hook(tmp_path).returncode == 0
    existing(tmp_path, {"IsEncrypted": False, "Values": {"MY_OWN_FLAG": "second"}})
    assert run_hook(tmp_path).returncode == 0
    saved = [json.loads(path.read_text()) for path in backups(tmp_path)]
    assert len(saved) == 2
    assert {"MY_OWN_FLAG": "second"} in [backup["Values"] for backup in saved]


def test_a_corrupt_file_is_left_alone_with_a_clear_error(tmp_path: Path) -> None:
    corrupt = existing(tmp_path, '{\n  "IsEncrypted": false,\n  "Values": {\n    "MAX_PENDING": "7",\n')
    result = run_hook(tmp_path)
    assert result.returncode != 0
    assert "not valid JSON" in result.stderr and "was not changed" in result.stderr
    assert settings_file(tmp_path).read_text() == corrupt
    assert sorted(p.name for p in project(tmp_path).iterdir()) == ["local.settings.json", "scripts"]


def test_a_file_without_a_values_object_is_left_alone(tmp_path: Path) -> None:
    text = existing(tmp_path, '["not", "an", "object"]')
    result = run_hook(tmp_path)
    assert result.returncode != 0 and "Values" in result.stderr
    assert settings_file(tmp_path).read_text() == text


def test_an_encrypted_file_is_left_alone(tmp_path: Path) -> None:
    text = existing(tmp_path, {"IsEncrypted": True, "Values": {"COSMOS_ENDPOINT": "AAAAencrypted"}})
    result = run_hook(tmp_path)
    assert result.returncode != 0 and "func settings decrypt" in result.stderr
    assert settings_file(tmp_path).read_text() == text


# The PowerShell twin


def powershell_table(name: str) -> dict[str, str]:
    """The ``$<name> = [ordered]@{ 'KEY' = <value> ... }`` table of postprovision.ps1."""
    block = re.search(rf"^\${name} = \[ordered\]@\{{\n(.*?)^\}}", POWERSHELL.read_text(), re.MULTILINE | re.DOTALL)
    assert block, f"${name} table not found in {POWERSHELL.name}"
    entries = re.findall(r"^\s*'([^']+)' = (.+?)\s*$", block.group(1), re.MULTILINE)
    return {key: value for key, value in entries}


def powershell_value(expression: str) -> str:
    literal = re.fullmatch(r"'(.*)'", expression)
    if literal:
        return literal.group(1)
    variables = {
        "$sbNamespace": OWNED["ServiceBusConnection__fullyQualifiedNamespace"],
        "$cosmosEndpoint": OWNED["COSMOS_ENDPOINT"],
        "$cosmosDatabase": OWNED["COSMOS_DATABASE"],
    }
    return variables[expression]


def test_powershell_twin_writes_what_the_sh_hook_writes(tmp_path: Path) -> None:
    """A fresh file from the ps1 tables must equal the file the sh hook really wrote."""
    assert run_hook(tmp_path).returncode == 0
    sh_values = written(tmp_path)["Values"]
    owned = {key: powershell_value(value) for key, value in powershell_table("Owned").items()}
    defaults = {key: powershell_value(value) for key, value in powershell_table("Defaults").items()}
    assert owned == OWNED
    assert set(owned).isdisjoint(defaults)
    assert {**defaults, **owned} == sh_values


def test_powershell_twin_removes_the_same_keys_and_reads_the_same_azd_names() -> None:
    removed = re.search(r"^\$Removed = @\(([^)]*)\)", POWERSHELL.read_text(), re.MULTILINE)
    assert removed
    assert set(re.findall(r"'([^']+)'", removed.group(1))) == REMOVED

    def azd_names(text: str) -> set[str]:
        return set(re.findall(r"\b(?:SERVICEBUS_FULLY_QUALIFIED_NAMESPACE|COSMOS_ENDPOINT|COSMOS_DATABASE)\b", text))

    assert azd_names(POWERSHELL.read_text()) == azd_names(SCRIPT.read_text())


def test_powershell_twin_keeps_the_same_safety_rules() -> None:
    """What the sh hook is tested for, the ps1 must at least do: back up with a UTC timestamp,
    skip an unchanged file, refuse corrupt or encrypted files without writing, replace atomically."""
    text = POWERSHELL.read_text()
    for needle in (
        "local.settings.json.$stamp.bak",
        "ToUniversalTime().ToString('yyyyMMddTHHmmssZ')",
        "already up to date",
        "ConvertFrom-Json",
        "not valid JSON",
        "func settings decrypt",
        "Move-Item -Force $temporary $path",
    ):
        assert needle in text, needle
    # Fail exits before anything is written: every Fail call comes before the first write.
    assert text.rindex("Fail '") < text.index("Copy-Item") < text.index("WriteAllText")


def test_the_backups_stay_out_of_git_and_out_of_the_package(tmp_path: Path) -> None:
    """The backups hold the developer's previous local.settings.json, secrets included (a storage
    connection string, a key): neither `git add -A` nor `azd deploy` (the package is the project folder
    less .funcignore) may take them, whatever run of the hook made them."""
    from tests.infra.deployment import funcignore_patterns, ignored

    existing(tmp_path, developer_file())
    assert run_hook(tmp_path).returncode == 0
    existing(tmp_path, {"IsEncrypted": False, "Values": {"MY_OWN_FLAG": "second"}})
    assert run_hook(tmp_path).returncode == 0
    names = sorted(path.name for path in backups(tmp_path))
    assert len(names) == 2  # one of them the "-1" name of a second run in the same second, or a later one
    names += ["local.settings.json.20261205T124700Z-1.bak", "local.settings.json.tmp", ".local.settings.x1y2.json"]
    patterns = funcignore_patterns()
    assert [name for name in names if not ignored(Path(name), patterns)] == [], "deployed by azd"
    checked = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "--no-index", *names],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert sorted(checked.stdout.split()) == sorted(names), "not ignored by git"
    example = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "--no-index", "local.settings.json.example"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert example.returncode == 1, "the example must stay tracked"
