"""The opt-in Entra ID app registration for the operators' sign-in (issue 13): scripts/preprovision.sh
finds or creates it and sets OPS_AUTH_CLIENT_ID, scripts/postprovision.sh adds the redirect URI once
the app's host name is known. Both hooks run for real under sh with fake `az` and `azd` on PATH that
record every call and answer canned output. The PowerShell twins cannot run here (no pwsh), so they
are checked to read the same azd keys and make the same az calls with the same flags."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.infra.paths import INFRA, ROOT

PRE = ROOT / "scripts" / "preprovision.sh"
POST = ROOT / "scripts" / "postprovision.sh"
PRE_PS1 = ROOT / "scripts" / "preprovision.ps1"
POST_PS1 = ROOT / "scripts" / "postprovision.ps1"
ROLES = json.loads((INFRA / "ops-app-roles.json").read_text())
NEW_APP = "11111111-2222-3333-4444-555555555555"
OLD_APP = "99999999-8888-7777-6666-555555555555"
HOST = "func-abc123.azurewebsites.net"
CALLBACK = f"https://{HOST}/.auth/login/aad/callback"
SYSTEM_PATH = "/usr/bin:/bin"

# A fake `az`: appends {"argv": [...], "file": <content of an @file argument>} to az-calls.jsonl and
# answers from state.json (regions, sign-in, existing registrations, their roles and redirect URIs, the
# Microsoft.App resource provider's registration state, the Durable Task Scheduler's regions).
FAKE_AZ = """#!/usr/bin/python3
import json, sys
args = sys.argv[1:]
state = json.load(open({state!r}))
record = {{"argv": args}}
for arg in args:
    if arg.startswith("@"):
        record["file"] = json.load(open(arg[1:]))
with open({log!r}, "a") as log:
    log.write(json.dumps(record) + "\\n")
query = args[args.index("--query") + 1] if "--query" in args else ""
head = args[:3]
if args[:2] == ["functionapp", "list-flexconsumption-locations"]:
    print(state.get("regions", "swedencentral"))
elif args[:2] == ["account", "show"]:
    sys.exit(0 if state.get("signed_in", True) else 1)
elif head == ["ad", "app", "list"]:
    print("\\n".join(state.get("existing", [])))
elif head == ["ad", "app", "create"]:
    if state.get("create_fails"):
        print("ERROR: Insufficient privileges to complete the operation.", file=sys.stderr)
        sys.exit(1)
    print({new_app!r})
elif head == ["ad", "app", "show"]:
    if state.get("show_fails"):
        print("ERROR: Please run 'az login' to setup account.", file=sys.stderr)
        sys.exit(1)
    print("\\n".join(state.get("roles" if "appRoles" in query else "redirect_uris", [])))
elif head in (["ad", "app", "update"], ["ad", "sp", "create"]):
    pass
elif head == ["ad", "sp", "show"]:
    sys.exit(0 if state.get("sp_exists") else 1)
elif args[:2] == ["provider", "show"]:
    if state.get("provider_show_fails"):
        print("ERROR: Please run 'az login' to setup account.", file=sys.stderr)
        sys.exit(1)
    if args[args.index("--namespace") + 1] == "Microsoft.DurableTask":
        print("\\n".join(state.get("dts_regions", ["Sweden Central", "East US"])))
    else:
        print(state.get("app_provider", "Registered"))
elif args[:2] == ["provider", "register"]:
    if state.get("register_fails"):
        print("ERROR: (AuthorizationFailed) ... does not have authorization to perform action "
              "'Microsoft.App/register/action'", file=sys.stderr)
        sys.exit(1)
else:
    print("fake az: unexpected call " + " ".join(args), file=sys.stderr)
    sys.exit(3)
"""
# A fake `azd`: records its arguments, prints values.env for `env get-values`.
FAKE_AZD = """#!/bin/sh
printf '%s\\n' "$*" >> "{log}"
if [ "$1 $2" = "env get-values" ]; then cat "{values}"; fi
"""


class Hook:
    """One run of a hook with its fakes: what it printed and which calls it made."""

    def __init__(self, tmp_path: Path, done: subprocess.CompletedProcess[str]) -> None:
        self.tmp_path = tmp_path
        self.returncode = done.returncode
        self.stdout = done.stdout
        self.stderr = done.stderr

    def az(self, *prefix: str) -> list[dict[str, Any]]:
        """The az calls whose arguments start with prefix."""
        log = self.tmp_path / "az-calls.jsonl"
        calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return [call for call in calls if call["argv"][: len(prefix)] == list(prefix)]

    def azd(self) -> list[str]:
        log = self.tmp_path / "azd-calls.log"
        return log.read_text().splitlines() if log.exists() else []


def option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def install_fakes(tmp_path: Path, state: dict[str, Any], values: str, with_az: bool) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (tmp_path / "state.json").write_text(json.dumps(state))
    (tmp_path / "values.env").write_text(values)
    fakes = {"azd": FAKE_AZD.format(log=tmp_path / "azd-calls.log", values=tmp_path / "values.env")}
    if with_az:
        fakes["az"] = FAKE_AZ.format(
            state=str(tmp_path / "state.json"), log=str(tmp_path / "az-calls.jsonl"), new_app=NEW_APP
        )
    for name, text in fakes.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    assert shutil.which("az", path=SYSTEM_PATH) is None, "a real az on /usr/bin would be called"
    return bin_dir


def preprovision(
    tmp_path: Path, env: dict[str, str], state: dict[str, Any] | None = None, with_az: bool = True
) -> Hook:
    bin_dir = install_fakes(tmp_path, state or {}, "", with_az)
    base = {"PATH": f"{bin_dir}:{SYSTEM_PATH}", "AZURE_LOCATION": "swedencentral", "AZURE_ENV_NAME": "dev"}
    done = subprocess.run(
        ["sh", str(PRE)], env={**base, **env}, capture_output=True, text=True, timeout=60, check=False
    )
    return Hook(tmp_path, done)


def postprovision(tmp_path: Path, values: dict[str, str], state: dict[str, Any], with_az: bool = True) -> Hook:
    """Runs a copy of the hook in a scratch project (it writes local.settings.json beside scripts/)."""
    provisioned = {
        "AZURE_ENV_NAME": "dev",
        "COSMOS_DATABASE": "scheduler",
        "COSMOS_ENDPOINT": "https://cosmos-abc.documents.azure.com:443/",
        "SERVICEBUS_FULLY_QUALIFIED_NAMESPACE": "sb-abc.servicebus.windows.net",
        "OPS_CONSOLE_URL": f"https://{HOST}/api/ops/console",
        **values,
    }
    text = "".join(f'{key}="{value}"\n' for key, value in provisioned.items())
    bin_dir = install_fakes(tmp_path, state, text, with_az)
    scripts = tmp_path / "project" / "scripts"
    scripts.mkdir(parents=True)
    shutil.copy(POST, scripts / POST.name)
    done = subprocess.run(
        ["sh", str(scripts / POST.name)],
        env={"PATH": f"{bin_dir}:{SYSTEM_PATH}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return Hook(tmp_path, done)


# preprovision: the opt-in


def test_without_the_opt_in_no_app_registration_is_looked_up_or_made(tmp_path: Path) -> None:
    for value in ("", "false"):
        env = {"OPS_AUTH_CREATE_APP": value} if value else {}
        hook = preprovision(tmp_path / (value or "unset"), env, {"existing": [OLD_APP]})
        assert hook.returncode == 0, hook.stderr
        assert hook.az("functionapp"), "the region check still runs"
        assert hook.az("ad") == [] and hook.az("account") == []
        assert hook.azd() == []


def test_a_client_id_already_set_wins_over_the_opt_in(tmp_path: Path) -> None:
    hook = preprovision(tmp_path, {"OPS_AUTH_CREATE_APP": "true", "OPS_AUTH_CLIENT_ID": OLD_APP})
    assert hook.returncode == 0, hook.stderr
    assert hook.az("ad") == [] and hook.azd() == []
    assert f"OPS_AUTH_CLIENT_ID is set ({OLD_APP})" in hook.stdout


def test_a_bad_opt_in_value_stops_before_asking_azure(tmp_path: Path) -> None:
    hook = preprovision(tmp_path, {"OPS_AUTH_CREATE_APP": "yes"})
    assert hook.returncode == 1
    assert "OPS_AUTH_CREATE_APP must be 'true' or 'false'" in hook.stderr
    assert hook.az() == []


# preprovision: creating or reusing


def test_creates_the_registration_with_the_roles_of_the_json_and_sets_the_client_id(tmp_path: Path) -> None:
    hook = preprovision(tmp_path, {"OPS_AUTH_CREATE_APP": "true"})
    assert hook.returncode == 0, hook.stderr
    (listed,) = hook.az("ad", "app", "list")
    assert option(listed["argv"], "--filter") == "displayName eq 'orders-ops-dev'"
    (created,) = hook.az("ad", "app", "create")
    argv = created["argv"]
    assert option(argv, "--display-name") == "orders-ops-dev"
    assert option(argv, "--sign-in-audience") == "AzureADMyOrg"
    assert option(argv, "--enable-id-token-issuance") == "true"
    assert option(argv, "--app-roles") == f"@{INFRA / 'ops-app-roles.json'}"
    assert created["file"] == ROLES
    assert {role["value"] for role in created["file"]} == {"Orders.Read", "Orders.Operate"}
    (updated,) = hook.az("ad", "app", "update")
    assert option(updated["argv"], "--id") == NEW_APP
    assert option(updated["argv"], "--identifier-uris") == f"api://{NEW_APP}"
    (sp,) = hook.az("ad", "sp", "create")
    assert option(sp["argv"], "--id") == NEW_APP
    assert hook.azd() == [f"env set OPS_AUTH_CLIENT_ID {NEW_APP}"]
    # ID-token sign-in: no secret, no certificate, no access-token (implicit) grant.
    flat = " ".join(" ".join(call["argv"]) for call in hook.az())
    assert "credential" not in flat and "--enable-access-token-issuance" not in flat


def test_reuses_a_registration_with_the_same_name(tmp_path: Path) -> None:
    state = {"existing": [OLD_APP], "roles": ["Orders.Read", "Orders.Operate"], "sp_exists": True}
    hook = preprovision(tmp_path, {"OPS_AUTH_CREATE_APP": "true"}, state)
    assert hook.returncode == 0, hook.stderr
    assert hook.az("ad", "app", "create") == [] and hook.az("ad", "sp", "create") == []
    assert hook.azd() == [f"env set OPS_AUTH_CLIENT_ID {OLD_APP}"]
    assert f"reusing the app registration orders-ops-dev ({OLD_APP})" in hook.stdout
    assert "warning" not in hook.stderr


def test_a_reused_registration_without_the_roles_is_reported(tmp_path: Path) -> None:
    hook = preprovision(tmp_path, {"OPS_AUTH_CREATE_APP": "true"}, {"existing": [OLD_APP], "roles": ["Orders.Read"]})
    assert hook.returncode == 0, hook.stderr
    assert "no app role Orders.Operate" in hook.stderr and "no app role Orders.Read" not in hook.stderr
    assert hook.az("ad", "sp", "create"), "a missing service principal is created"


def test_two_registrations_with_the_name_are_not_guessed_between(tmp_path: Path) -> None:
    hook = preprovision(tmp_path, {"OPS_AUTH_CREATE_APP": "true"}, {"existing": [OLD_APP, NEW_APP]})
    assert hook.returncode == 0
    assert "2 app registrations are named orders-ops-dev" in hook.stderr
    assert hook.azd() == [] and hook.az("ad", "app", "create") == []


# preprovision: no az, signed out, no rights: warn, go on without authentication


def test_without_az_it_warns_and_goes_on_without_authentication(tmp_path: Path) -> None:
    hook = preprovision(tmp_path, {"OPS_AUTH_CREATE_APP": "true"}, with_az=False)
    assert hook.returncode == 0
    assert "az (Azure CLI) was not found" in hook.stderr
    assert "refuses every request" in hook.stderr
    assert hook.azd() == []


def test_signed_out_it_warns_and_makes_no_directory_call(tmp_path: Path) -> None:
    hook = preprovision(tmp_path, {"OPS_AUTH_CREATE_APP": "true"}, {"signed_in": False})
    assert hook.returncode == 0
    assert "az is not signed in (run 'az login')" in hook.stderr
    assert hook.az("ad") == [] and hook.azd() == []


def test_a_refused_creation_warns_and_sets_nothing(tmp_path: Path) -> None:
    hook = preprovision(tmp_path, {"OPS_AUTH_CREATE_APP": "true"}, {"create_fails": True})
    assert hook.returncode == 0
    assert "'az ad app create' failed" in hook.stderr and "Application Developer" in hook.stderr
    assert hook.azd() == [] and hook.az("ad", "app", "update") == []


def test_nothing_is_registered_when_the_region_stops_the_provision(tmp_path: Path) -> None:
    hook = preprovision(tmp_path, {"OPS_AUTH_CREATE_APP": "true", "AZURE_LOCATION": "westindia"})
    assert hook.returncode == 1
    assert hook.az("ad") == [] and hook.azd() == []


# postprovision: the redirect URI


OPTED_IN = {"OPS_AUTH_CREATE_APP": "true", "OPS_AUTH_CLIENT_ID": NEW_APP}


def test_adds_the_redirect_uri_of_the_deployed_host_keeping_the_others(tmp_path: Path) -> None:
    hook = postprovision(tmp_path, OPTED_IN, {"redirect_uris": ["https://localhost:7071/.auth/login/aad/callback"]})
    assert hook.returncode == 0, hook.stderr
    (shown,) = hook.az("ad", "app", "show")
    assert option(shown["argv"], "--id") == NEW_APP
    (updated,) = hook.az("ad", "app", "update")
    argv = updated["argv"]
    assert option(argv, "--id") == NEW_APP
    assert argv[argv.index("--web-redirect-uris") + 1 :] == [
        "https://localhost:7071/.auth/login/aad/callback",
        CALLBACK,
    ]
    assert f"added the redirect URI {CALLBACK}" in hook.stdout
    assert (tmp_path / "project" / "local.settings.json").exists(), "the settings merge still runs"


def test_a_redirect_uri_already_there_is_not_added_again(tmp_path: Path) -> None:
    hook = postprovision(tmp_path, OPTED_IN, {"redirect_uris": [CALLBACK]})
    assert hook.returncode == 0, hook.stderr
    assert hook.az("ad", "app", "update") == []
    assert "already has the redirect URI" in hook.stdout


def test_a_registration_made_by_hand_is_not_touched(tmp_path: Path) -> None:
    hook = postprovision(tmp_path, {"OPS_AUTH_CLIENT_ID": OLD_APP}, {})
    assert hook.returncode == 0, hook.stderr
    assert hook.az() == []
    assert CALLBACK in hook.stdout


def test_without_a_client_id_no_az_call(tmp_path: Path) -> None:
    hook = postprovision(tmp_path, {"OPS_AUTH_CREATE_APP": "true"}, {})
    assert hook.returncode == 0, hook.stderr
    assert hook.az() == []


def test_postprovision_without_az_or_signed_out_warns_and_still_writes_the_settings(tmp_path: Path) -> None:
    missing = postprovision(tmp_path / "missing", OPTED_IN, {}, with_az=False)
    assert missing.returncode == 0, missing.stderr
    assert "az (Azure CLI) not found" in missing.stderr and CALLBACK in missing.stderr
    assert (tmp_path / "missing" / "project" / "local.settings.json").exists()
    signed_out = postprovision(tmp_path / "signed-out", OPTED_IN, {"show_fails": True})
    assert signed_out.returncode == 0, signed_out.stderr
    assert "run 'az login'" in signed_out.stderr
    assert signed_out.az("ad", "app", "update") == []


# The PowerShell twins (static: no pwsh here)


def az_calls(text: str) -> set[tuple[str, frozenset[str]]]:
    """Each `az ad ...` / `az account ...` command in a script with the flags it passes (continuation
    lines joined: `\\` in sh, a backtick in PowerShell)."""
    joined = re.sub(r"[\\`]\n\s*", " ", text)
    calls = set()
    for match in re.finditer(r"\baz ((?:ad (?:app|sp)|account) [a-z-]+)([^\n]*)", joined):
        calls.add((match.group(1), frozenset(re.findall(r"--[a-z-]+", match.group(2)))))
    return calls


def test_powershell_preprovision_makes_the_same_calls_with_the_same_keys() -> None:
    sh, ps1 = PRE.read_text(), PRE_PS1.read_text()
    assert az_calls(ps1) == az_calls(sh)
    assert ("ad app create", frozenset({"--display-name", "--sign-in-audience", "--app-roles",
                                         "--enable-id-token-issuance", "--query"})) in az_calls(sh)  # fmt: skip
    for needle in (
        "OPS_AUTH_CREATE_APP",
        "OPS_AUTH_CLIENT_ID",
        "AZURE_ENV_NAME",
        "orders-ops-",
        "displayName eq '$name'",
        "ops-app-roles.json",
        "AzureADMyOrg",
        '"api://$',
        "azd env set OPS_AUTH_CLIENT_ID",
        "refuses every request",
        "Application Developer",
    ):
        assert needle in sh and needle in ps1, needle
    # The region check still decides first, and a region that fails stops before any registration.
    assert ps1.index("if (-not (Test-Region)) { exit 1 }") < ps1.index("if (-not (Set-OpsApp)) { exit 1 }")


def test_powershell_postprovision_makes_the_same_calls_with_the_same_keys() -> None:
    sh, ps1 = POST.read_text(), POST_PS1.read_text()
    assert (
        az_calls(ps1)
        == az_calls(sh)
        == {
            ("ad app show", frozenset({"--id", "--query"})),
            ("ad app update", frozenset({"--id", "--web-redirect-uris"})),
        }
    )
    for needle in ("OPS_AUTH_CREATE_APP", "OPS_AUTH_CLIENT_ID", "OPS_CONSOLE_URL", "/.auth/login/aad/callback"):
        assert needle in sh and needle in ps1, needle
    # The redirect step runs before the merge, and never stops the hook.
    assert ps1.index("Add-OpsRedirectUri\n") < ps1.index("$Owned = [ordered]")
    assert "-contains $uri" in ps1 and "@($existing + $uri)" in ps1


def test_the_roles_file_is_what_graph_accepts_for_app_roles() -> None:
    """`az ad app create --app-roles @file` posts the file as the application's appRoles: each entry a
    Graph appRole with a new GUID id, enabled, and without the read-only `origin`."""
    guid = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
    for role in ROLES:
        assert set(role) == {"allowedMemberTypes", "description", "displayName", "id", "isEnabled", "value"}
        assert guid.match(role["id"]) and role["isEnabled"] is True
        assert set(role["allowedMemberTypes"]) <= {"User", "Application"}
    assert len({role["id"] for role in ROLES}) == len(ROLES)
