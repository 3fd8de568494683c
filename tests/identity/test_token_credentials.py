"""``AZURE_TOKEN_CREDENTIALS``: which of ``DefaultAzureCredential``'s credentials the app's Cosmos DB and Service Bus
clients try (``adapters/identity.py``). azure-identity reads the variable itself; the Bicep sets it to
``ManagedIdentityCredential``, so in Azure a token comes from the managed identity or the error says why the
managed identity gave none. Unset, the chain goes on to every other credential (the environment's secrets, the
Azure CLI, ...): an identity not assigned to the app, or a wrong client id, was answered by whatever came next, or
failed with eight credentials' reasons. The app reads the same variable at start-up and refuses a value the SDK
would raise on from the first client it builds."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from settings import SETTINGS, TOKEN_CREDENTIALS, Settings, SettingsError
from tests.identity.conftest import APP_IDENTITY
from tests.identity.endpoint import AZURE_TOKEN_CREDENTIALS, IdentityEndpoint
from tests.identity.test_production_wiring import COSMOS_AUDIENCE, OTHER_IDENTITY

SETTING = next(s for s in SETTINGS if s.name == "AZURE_TOKEN_CREDENTIALS")


def _sdk_refusal(value: str, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """The SDK's ValueError for ``value``, or None when it builds the credential."""
    from adapters.identity import managed_identity

    monkeypatch.setenv("AZURE_TOKEN_CREDENTIALS", value)
    try:
        managed_identity(APP_IDENTITY)
    except ValueError as exc:
        return str(exc)
    return None


def test_the_app_accepts_exactly_the_values_the_pinned_sdk_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    refusal = _sdk_refusal("no-such-credential", monkeypatch)
    assert refusal is not None
    listed = re.search(r"Valid values are: (.*)\.$", refusal)
    assert listed, refusal
    assert set(listed.group(1).split(", ")) == TOKEN_CREDENTIALS
    for value in [*sorted(TOKEN_CREDENTIALS), "ManagedIdentityCredential", " PROD ", ""]:
        assert _sdk_refusal(value, monkeypatch) is None, value
        assert SETTING.parse(value) == value.strip().lower()
    for bad in SETTING.kind.refuses:
        assert _sdk_refusal(bad, monkeypatch) is not None, bad


def test_a_value_the_sdk_would_raise_on_stops_the_app_at_start_up_naming_it() -> None:
    with pytest.raises(SettingsError, match="AZURE_TOKEN_CREDENTIALS='ManagedIdentity' is not valid"):
        Settings.from_env({"AZURE_TOKEN_CREDENTIALS": "ManagedIdentity"})


@pytest.fixture
def azure_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An ``az`` first on PATH that answers ``az account get-access-token`` with a token and notes each call: a
    developer's signed-in Azure CLI, or any other credential a misconfigured app would fall through to."""
    calls = tmp_path / "az-calls"
    script = tmp_path / "az"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{calls}"\n'
        'echo \'{"accessToken": "cli-token", "expires_on": 4070908800, "tokenType": "Bearer"}\'\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return calls


def test_in_azure_an_identity_the_app_does_not_have_fails_saying_so_and_tries_nothing_else(
    monkeypatch: pytest.MonkeyPatch, azure_cli: Path
) -> None:
    """The app's identity is not the one assigned (a wrong client id, an identity removed from the app): the
    endpoint answers 400. As the Bicep deploys it, the error is the managed identity's, and no other credential
    is asked."""
    from azure.core.exceptions import ClientAuthenticationError

    from adapters.identity import managed_identity

    with IdentityEndpoint([OTHER_IDENTITY]) as endpoint:
        endpoint.install(monkeypatch)
        credential = managed_identity(APP_IDENTITY)
        assert [type(c).__name__ for c in credential.credentials] == ["ManagedIdentityCredential"]
        with pytest.raises(ClientAuthenticationError) as refused:
            credential.get_token(f"{COSMOS_AUDIENCE}/.default")
    assert "Unable to load the proper Managed Identity" in str(refused.value)
    assert "AzureCliCredential" not in str(refused.value)
    assert not azure_cli.exists()
    assert AZURE_TOKEN_CREDENTIALS == "ManagedIdentityCredential" == SETTING.deployed


def test_without_the_setting_the_same_app_takes_a_token_from_whatever_comes_next(
    monkeypatch: pytest.MonkeyPatch, azure_cli: Path
) -> None:
    """What the setting prevents: unset, the same misconfigured app runs on another identity's token."""
    from adapters.identity import managed_identity

    with IdentityEndpoint([OTHER_IDENTITY]) as endpoint:
        endpoint.install(monkeypatch)
        monkeypatch.delenv("AZURE_TOKEN_CREDENTIALS")
        token = managed_identity(APP_IDENTITY).get_token(f"{COSMOS_AUDIENCE}/.default")
    assert token.token == "cli-token"
    assert "get-access-token" in azure_cli.read_text()


def test_the_assigned_identity_still_gets_its_token_with_the_setting(
    monkeypatch: pytest.MonkeyPatch, azure_cli: Path
) -> None:
    from adapters.identity import managed_identity

    with IdentityEndpoint([APP_IDENTITY]) as endpoint:
        endpoint.install(monkeypatch)
        token = managed_identity(APP_IDENTITY).get_token(f"{COSMOS_AUDIENCE}/.default")
        asked = endpoint.for_resource(COSMOS_AUDIENCE)
    assert token.token != "cli-token" and [a.client_id for a in asked] == [APP_IDENTITY]
    assert not azure_cli.exists()
