"""Red team: a ``COSMOS_KEY`` that is no key.

Found on ed08fef. The key was free text, and the app builds its Cosmos DB client on the first invocation
(``dependencies.get_context``), not at start-up: ``COSMOS_KEY=abc`` started the app, and the client's constructor
raised ``binascii.Error`` ("Incorrect padding") in every invocation of every trigger; an ``orders`` message failed
on each delivery until Service Bus dead-lettered it ``MaxDeliveryCountExceeded``, no reason given. The key is
now read as the SDK reads it (base64), at start-up."""

from __future__ import annotations

import pytest

from localrun.cosmos_server import EMULATOR_KEY
from settings import Settings, SettingsError


@pytest.mark.parametrize("key", ["abc", "not base64!", "a", EMULATOR_KEY[:-1]])
def test_a_key_that_is_not_base64_stops_the_app_at_start_up_naming_it(key: str) -> None:
    from azure.cosmos import CosmosClient

    with pytest.raises(ValueError):  # binascii.Error, from the constructor
        CosmosClient("https://127.0.0.1:1", credential=key)
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"COSMOS_KEY": key})
    assert str(raised.value).startswith(f"COSMOS_KEY={key!r} is not valid")


@pytest.mark.parametrize("key", ["", EMULATOR_KEY])
def test_an_empty_key_or_one_the_sdk_takes_is_taken(key: str) -> None:
    assert Settings.from_env({"COSMOS_KEY": key}).cosmos_key == key
