"""Settings that reach a call to an Azure service are refused at start when the service would refuse what
they become, or when the queues' own policy (infra/modules/servicebus.bicep) makes them never take effect.
The local emulators are lenient here: the Cosmos protocol server takes any page size, and the runner's
queues keep a message for good; Azure does neither."""

from __future__ import annotations

import pytest

from contracts.names import QUEUE_MESSAGE_TTL_DAYS
from settings import Settings, SettingsError

# Cosmos DB reads a query's page size and its TOP count as 32-bit integers: the SDKs' ``MaxItemCount`` is an
# ``int?`` (https://learn.microsoft.com/dotnet/api/microsoft.azure.cosmos.queryrequestoptions.maxitemcount),
# sent as the ``x-ms-max-item-count`` header, "an integer"
# (https://learn.microsoft.com/rest/api/cosmos-db/common-cosmosdb-rest-request-headers); the service's query plan
# holds a TOP count as an unsigned 32-bit number (Azure/azure-cosmos-dotnet-v3#4939). The Python SDK sends
# whatever it is given.
INT32_MAX = 2**31 - 1

# The count settings that become a Cosmos DB page size or TOP count: the starter's ``SELECT TOP @limit``
# (``claimable``, at most STARTER_BATCH_SIZE), the supervisor's scan pages (SUPERVISOR_PAGE_SIZE, within
# SUPERVISOR_MAX_RECORDS) and its owed and compensation pages (``max_item_count=SUPERVISOR_MAX_RECORDS``).
PAGE_SIZES = ("STARTER_BATCH_SIZE", "SUPERVISOR_PAGE_SIZE", "SUPERVISOR_MAX_RECORDS")


@pytest.mark.parametrize("name", PAGE_SIZES)
def test_a_page_size_cosmos_db_cannot_take_is_refused_at_start_naming_it(name: str) -> None:
    Settings.from_env({name: str(INT32_MAX)})  # the largest it takes
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({name: str(INT32_MAX + 1)})
    assert str(raised.value).startswith(f"{name}='{INT32_MAX + 1}' is not valid")
    assert str(INT32_MAX) in str(raised.value)


# The queues keep a message QUEUE_MESSAGE_TTL_DAYS (``defaultMessageTimeToLive``), then dead-letter it
# (``TTLExpiredException``), deferred or not. A deferred message older than that is never there to look at.
TTL_MINUTES = QUEUE_MESSAGE_TTL_DAYS * 24 * 60


@pytest.mark.parametrize("name", ["PEEK_SWEEP_AGE_MINUTES", "ORDERLESS_PAYMENT_ALERT_MINUTES"])
def test_a_deferred_message_age_the_queue_never_keeps_a_message_to_is_refused(name: str) -> None:
    """The peek sweep looks only at deferred messages PEEK_SWEEP_AGE_MINUTES old, and tells an operator of a
    payment waiting for its order once it has waited ORDERLESS_PAYMENT_ALERT_MINUTES: at the queue's TTL or
    past it, the sweep never looks at anything (its safety net gone) or the PaymentWithoutOrder alert never
    goes out (the message is dead-lettered first)."""
    Settings.from_env({name: str(TTL_MINUTES - 1)})
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({name: str(TTL_MINUTES)})
    assert str(raised.value).startswith(f"{name}='{TTL_MINUTES}' is not valid")


def test_deferral_rounds_that_outlast_the_message_they_retry_are_refused() -> None:
    """A message deferred for a dependency is fetched again by DEFER_MAX_ROUNDS RetryDeferred rounds, each
    DEFER_RETRY_DELAY_SECONDS after the last: a last round due at the queue's TTL or later finds its message
    dead-lettered ``TTLExpiredException`` instead of deciding it."""
    ttl_seconds = QUEUE_MESSAGE_TTL_DAYS * 24 * 3600
    Settings.from_env({"DEFER_MAX_ROUNDS": "4", "DEFER_RETRY_DELAY_SECONDS": str(ttl_seconds // 4 - 1)})
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"DEFER_MAX_ROUNDS": "4", "DEFER_RETRY_DELAY_SECONDS": str(ttl_seconds // 4)})
    assert "DEFER_MAX_ROUNDS" in str(raised.value) and "DEFER_RETRY_DELAY_SECONDS" in str(raised.value)


def test_agent_settings_that_let_one_request_outlast_its_message_lock_are_refused() -> None:
    """An agent handles one request in one invocation: calls (each up to the remote call timeout, 10 s) and
    backoffs until the request's deadline (STEP_TIMEOUT_SECONDS after the step began) or AGENT_MAX_ATTEMPTS. The
    Functions host renews the request message's lock for 5 minutes (host.json ``maxAutoLockRenewalDuration``);
    an invocation still running after that loses it, and Service Bus hands the request to a second handler
    while the first still calls the service, until the max delivery count dead-letters it. The Bicep's queue
    policy assumes one delivery is handled well inside the lock; these settings are refused at start."""
    Settings.from_env({"STEP_TIMEOUT_SECONDS": "3600"})  # 4 calls and 3 backoffs at most: 64 s
    Settings.from_env({"AGENT_MAX_ATTEMPTS": "1100"})  # within the 60 s deadline: 70 s at most
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"STEP_TIMEOUT_SECONDS": "3600", "AGENT_MAX_ATTEMPTS": "400"})
    message = str(raised.value)
    assert all(name in message for name in ("STEP_TIMEOUT_SECONDS", "AGENT_MAX_ATTEMPTS", "AGENT_RETRY_MAX_MS"))


def test_the_agents_reply_send_counts_toward_its_message_lock() -> None:
    """The agent sends its reply in the invocation that made its calls, a send bounded at 30 s, the SDK's retries
    included (``settings.SEND_TIMEOUT``, ``adapters.servicebus.sender``): a deadline of 290 s and a last 10 s call
    left it no room in the 5-minute lock renewal. Accepted before the send was counted."""
    Settings.from_env({"STEP_TIMEOUT_SECONDS": "260", "AGENT_MAX_ATTEMPTS": "1000"})  # 270 s of calls, 30 s send
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"STEP_TIMEOUT_SECONDS": "290", "AGENT_MAX_ATTEMPTS": "1000"})
    assert "reply's send" in str(raised.value)
