"""Red team: a ``COSMOS_DATABASE`` that no Cosmos DB database can be named.

Found on ed08fef. The name was any text without surrounding spaces. Cosmos DB refuses ``/``, ``\\``, ``?`` and
``#`` in a resource id and more than 255 characters, and the SDK pastes the name into the request path: with
``sched/uler`` every store call failed (the protocol server of the tests: an unmapped ``CosmosHttpResponseError``,
"no route", which fails the ``orders`` trigger on every delivery until ``MaxDeliveryCountExceeded``), and with
``sched#uler`` or ``sched?uler`` the path is cut at that character, so the reads asked for something else and
found nothing. Such a name now stops the app at start-up, naming the setting."""

from __future__ import annotations

import pytest

from settings import Settings, SettingsError


@pytest.mark.parametrize(
    "name", ["sched/uler", "sched\\uler", "sched?uler", "sched#uler", "x" * 256, "sched\tuler", "sched\x7f", "a\u2028b"]
)
def test_a_database_name_cosmos_db_refuses_stops_the_app_at_start_up(name: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"COSMOS_DATABASE": name})
    assert str(raised.value).startswith(f"COSMOS_DATABASE={name!r} is not valid")


@pytest.mark.parametrize("name", ["scheduler", "x" * 255, "orders-2026_prod", "sch\u00e9duler", "a b"])
def test_a_name_cosmos_db_takes_is_taken(name: str) -> None:
    assert Settings.from_env({"COSMOS_DATABASE": name}).cosmos_database == name
