"""Red team: a URL setting the app cannot call.

Found on ed08fef. A URL was any ``http://`` or ``https://`` text with something after the scheme and no
whitespace. ``PAYMENT_SERVICE_URL=http://[::1`` (a bracket left open) was taken at start-up, and every call of
the payment agent raised ``ValueError`` ("Invalid IPv6 URL") while the request was built, which is no
``RemoteError``: it escaped the agent's trigger on every delivery until Service Bus dead-lettered the request
``MaxDeliveryCountExceeded``, no reply sent. Others (a port out of range or not a number, no host, an empty
label, a query or fragment that the app's ``/<action>`` is appended after) were taken too, and every call
failed. A URL is now checked as the app uses it, at start-up, naming the setting."""

from __future__ import annotations

import contextlib

import pytest

from adapters.remote.http_service import HttpRemoteService
from adapters.remote.interface import RemoteCall, RemoteError
from settings import SETTINGS, Setting, Settings, SettingsError

URLS = [s for s in SETTINGS if s.kind.expected.endswith("an http:// or https:// URL")]
UNUSABLE = [
    "http://[::1",
    "http://[::1]x",
    "http://127.0.0.1:99999",
    "http://host:abc",
    "http://user@",
    "http://:80",
    "http://a..b",
    "http://host/path?x=1",
    "http://host/path#top",
    "https://h\u00e9te.example",
    "http://host\x7f",
    "HTTPS://host",
]
CALL = RemoteCall("payment", "charge", "order-7", "order-7:charge-payment", 3, {"amountCents": 700})


def test_the_url_settings_are_found() -> None:
    assert {s.name for s in URLS} >= {"COSMOS_ENDPOINT", "PAYMENT_SERVICE_URL", "SHIPPING_SERVICE_URL"}


@pytest.mark.parametrize("setting", URLS, ids=lambda s: s.name)
@pytest.mark.parametrize("url", UNUSABLE)
def test_a_url_the_app_cannot_call_is_refused_at_start_up_naming_the_setting(setting: Setting, url: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({setting.name: url})
    assert str(raised.value).startswith(f"{setting.name}={url!r} is not valid")


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9", "https://payments.example.com/v2", "http://[::1]:9/", "https://xn--hte-9la.example"]
)
def test_a_url_taken_is_one_a_call_can_use(url: str) -> None:
    """Every call to a URL the settings take fails, if at all, as a ``RemoteError`` (nothing listens there)."""
    taken = Settings.from_env({"PAYMENT_SERVICE_URL": url}).payment_service_url
    with contextlib.suppress(RemoteError):
        HttpRemoteService(taken, timeout_seconds=0.5).call(CALL)
