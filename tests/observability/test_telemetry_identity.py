"""Which identity telemetry signs in with: the one ``APPLICATIONINSIGHTS_AUTHENTICATION_STRING`` names.

Three parties read that string: the Functions host, the Azure Monitor exporter when the worker sets up export
(``PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY``), and the app (``observability.setup``), which passes its own
bounded credential. The host and the exporter take its ``ClientId`` (a user-assigned identity) or, without one,
the system-assigned identity. The app took ``AZURE_CLIENT_ID`` instead, whatever the string said: an app whose
string asks for the system-assigned identity (or another user-assigned one) exported as another identity than
the host's, refused by Application Insights if that one holds no Monitoring Metrics Publisher role. It also took
any text containing ``Authorization=AAD``, a text the exporter drops (an empty pair: no credential at all)."""

from __future__ import annotations

from typing import Any

import pytest

from settings import SETTINGS, Settings, SettingsError

SETTING = next(s for s in SETTINGS if s.name == "APPLICATIONINSIGHTS_AUTHENTICATION_STRING")
STRING_ID = "11111111-2222-3333-4444-555555555555"
OTHER_ID = "99999999-8888-7777-6666-555555555555"


class Recorded:
    """Stands in for ``ManagedIdentityCredential`` to record which identity each party asks for."""

    def __init__(self, client_id: str | None = None, **_: Any) -> None:
        self.client_id = client_id


def _apps_identity(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> str | None:
    import azure.identity

    from observability.setup import _credential

    monkeypatch.setattr(azure.identity, "ManagedIdentityCredential", Recorded)
    credential = _credential(env).get("credential")
    assert isinstance(credential, Recorded)
    return credential.client_id


def _exporters_identity(text: str, monkeypatch: pytest.MonkeyPatch) -> str | None:
    from azure.monitor.opentelemetry.exporter.export import _base

    monkeypatch.setattr(_base, "ManagedIdentityCredential", Recorded)
    monkeypatch.setenv("APPLICATIONINSIGHTS_AUTHENTICATION_STRING", text)
    credential = _base._get_authentication_credential()
    assert isinstance(credential, Recorded), text
    return credential.client_id


@pytest.mark.parametrize(
    ("text", "identity"),
    [
        (f"Authorization=AAD;ClientId={STRING_ID}", STRING_ID),
        (f"clientid={STRING_ID};AUTHORIZATION=AAD", STRING_ID),
        ("Authorization=AAD", None),  # the system-assigned identity
    ],
)
def test_the_app_signs_in_as_the_identity_the_string_names_as_the_exporter_does(
    text: str, identity: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert SETTING.parse(text) == text
    env = {"APPLICATIONINSIGHTS_AUTHENTICATION_STRING": text, "AZURE_CLIENT_ID": OTHER_ID}
    assert _apps_identity(env, monkeypatch) == _exporters_identity(text, monkeypatch) == identity


def test_no_string_no_credential() -> None:
    from observability.setup import _credential

    assert SETTING.parse("") == ""
    assert _credential({"AZURE_CLIENT_ID": OTHER_ID}) == {}


@pytest.mark.parametrize("text", SETTING.kind.refuses)
def test_a_string_the_host_and_exporter_would_read_apart_stops_the_app_at_start_up(text: str) -> None:
    with pytest.raises(SettingsError, match="APPLICATIONINSIGHTS_AUTHENTICATION_STRING="):
        Settings.from_env({"APPLICATIONINSIGHTS_AUTHENTICATION_STRING": text})


def test_a_trailing_semicolon_leaves_the_exporter_without_a_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    """Why ``Authorization=AAD;`` is refused though the host reads it: the worker's exporter would send
    telemetry unauthenticated, which an Application Insights with local authentication off drops."""
    from azure.monitor.opentelemetry.exporter.export import _base

    monkeypatch.setenv("APPLICATIONINSIGHTS_AUTHENTICATION_STRING", "Authorization=AAD;")
    assert _base._get_authentication_credential() is None
