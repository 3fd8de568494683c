"""The production wiring (``dependencies.build_from_settings``, what every trigger builds once per worker process in
Azure) run as it runs there: the app settings the Bicep writes (no Cosmos DB key, no Service Bus connection string,
the user-assigned identity's client id), the managed identity endpoint App Service gives the app
(``tests.identity.endpoint``: ``IDENTITY_ENDPOINT``/``IDENTITY_HEADER``, which ``azure.identity`` reads), and a
Cosmos DB account that takes Microsoft Entra ID tokens only (the local protocol server with
``localrun/cosmos_auth.cjs`` on: local auth off, the data role only, as infra/modules/cosmos.bicep and rbac.bicep
set it). The real ``DefaultAzureCredential``, the real azure-cosmos token policy and the real stores; the Service
Bus client's token is fetched through the SDK's own CBS authentication object, the one its AMQP link uses (no AMQP
server here). Everything else runs on emulators and keys elsewhere in the suite: this is the only place the
credential code of ``adapters/cosmos/client.py`` and ``adapters/servicebus/client.py`` runs."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from domain import transitions
from localrun.cosmos_server import CosmosServer
from settings import Settings
from tests.identity.conftest import APP_IDENTITY
from tests.identity.endpoint import AZURE_TOKEN_CREDENTIALS, IdentityEndpoint

pytestmark = pytest.mark.cosmos

OTHER_IDENTITY = "9b2e0a4c-1111-4e5f-8a9b-0c1d2e3f4a5b"
COSMOS_AUDIENCE = "https://127.0.0.1"  # the account's own scope, as the SDK asks for it (https://<host>/.default)
# The SDK asks for https://servicebus.azure.net//.default (its JWT_TOKEN_SCOPE), a resource with its trailing slash.
SERVICE_BUS_AUDIENCE = "https://servicebus.azure.net/"


def azure_settings(server: CosmosServer, **changed: str) -> Settings:
    """The app settings as infra/modules/functionapp.bicep writes them (the connections; the tuning settings at
    their defaults), the Cosmos DB endpoint the local server's. COSMOS_VERIFY_TLS=false is the one difference:
    the local server's certificate is self-signed."""
    values = {
        "ServiceBusConnection__fullyQualifiedNamespace": "sb-test.servicebus.windows.net",
        "ServiceBusConnection__credential": "managedidentity",
        "ServiceBusConnection__clientId": APP_IDENTITY,
        "COSMOS_ENDPOINT": server.endpoint,
        "COSMOS_DATABASE": "scheduler",
        "AZURE_CLIENT_ID": APP_IDENTITY,
        "AZURE_TOKEN_CREDENTIALS": AZURE_TOKEN_CREDENTIALS,
        "COSMOS_VERIFY_TLS": "false",
    }
    return Settings.from_env(values | changed)


def use_the_stores(ctx: Any, orders: int) -> None:
    """What an order's first steps do with Cosmos DB: create its order and its record, read them, count."""
    now = ctx.clock.now()
    for _ in range(orders):
        order_id = f"o-{uuid.uuid4().hex[:8]}"
        ctx.orders.create_or_verify({"id": order_id, "orderId": order_id, "items": []})
        ctx.states.create(transitions.new_record(order_id, None, now))
        assert ctx.states.get(order_id) is not None
        assert ctx.orders.get(order_id) is not None
    ctx.states.count(transitions.new_record("x", None, now).process_state)


def test_the_app_reaches_an_entra_only_cosmos_db_with_its_user_assigned_identity(
    production_wiring: Any, identity: IdentityEndpoint, entra_cosmos: CosmosServer
) -> None:
    entra_cosmos.set_auth([APP_IDENTITY], [COSMOS_AUDIENCE])
    try:
        ctx = production_wiring(azure_settings(entra_cosmos))
        use_the_stores(ctx, orders=10)
        log = entra_cosmos.auth_log()
    finally:
        entra_cosmos.set_auth(None)

    assert log["refused"] == [] and log["key"] == 0 and log["aad"] > 40, log
    cosmos = identity.for_resource(COSMOS_AUDIENCE)
    # One token for the life of the client, not one per request (the App Service endpoint is rate limited).
    assert len(cosmos) == 1 and log["tokens"] == 1
    assert cosmos[0].client_id == APP_IDENTITY


def test_a_token_that_expires_under_the_long_lived_client_is_renewed(
    production_wiring: Any, monkeypatch: pytest.MonkeyPatch, entra_cosmos: CosmosServer
) -> None:
    """The client lives as long as the worker process; the server refuses an expired token, so a token kept
    anywhere (a static header) would fail every request after it expired."""
    with IdentityEndpoint([APP_IDENTITY], lifetime=2.0) as endpoint:
        endpoint.install(monkeypatch)
        entra_cosmos.set_auth([APP_IDENTITY], [COSMOS_AUDIENCE])
        try:
            ctx = production_wiring(azure_settings(entra_cosmos))
            use_the_stores(ctx, orders=1)
            time.sleep(2.5)  # the first token has expired
            use_the_stores(ctx, orders=1)
            log = entra_cosmos.auth_log()
        finally:
            entra_cosmos.set_auth(None)

    assert log["refused"] == []
    assert log["tokens"] >= 2 and len(endpoint.for_resource(COSMOS_AUDIENCE)) >= 2


def test_the_data_role_alone_creates_no_database_or_container(
    production_wiring: Any, identity: IdentityEndpoint, entra_cosmos: CosmosServer
) -> None:
    """The app's identity holds Cosmos DB Built-in Data Contributor, which creates no database and no container
    (the Bicep does): the production wiring must not try (``ensure_database`` is for the emulator only). The
    server refuses such a write here as Azure does."""
    from azure.cosmos.exceptions import CosmosHttpResponseError

    from adapters.cosmos.client import ensure_database

    entra_cosmos.set_auth([APP_IDENTITY], [COSMOS_AUDIENCE])
    try:
        ctx = production_wiring(azure_settings(entra_cosmos))
        use_the_stores(ctx, orders=1)
        assert entra_cosmos.auth_log()["refused"] == []
        from adapters.cosmos.client import create_client

        with pytest.raises(CosmosHttpResponseError) as refused:
            ensure_database(create_client(azure_settings(entra_cosmos)), "another")
        assert refused.value.status_code == 403
    finally:
        entra_cosmos.set_auth(None)


def test_an_identity_without_the_data_role_is_refused_as_azure_refuses_it(
    production_wiring: Any, monkeypatch: pytest.MonkeyPatch, entra_cosmos: CosmosServer
) -> None:
    """The server's check is not a formality: a token of another identity (one the role was not given to) is a
    403, and a key a 401. The stores raise the 403 as ``StoreRefused`` (tests/identity/test_redteam_refused.py); a
    401 to a key-signed request is a setting to fix, not a role propagating: the SDK's error, unchanged
    (tests/identity/test_redteam_refused2.py)."""
    from azure.cosmos.exceptions import CosmosHttpResponseError

    from adapters.cosmos.errors import StoreRefused

    with IdentityEndpoint([APP_IDENTITY, OTHER_IDENTITY]) as endpoint:
        endpoint.install(monkeypatch)
        entra_cosmos.set_auth([APP_IDENTITY], [COSMOS_AUDIENCE])
        try:
            with pytest.raises(StoreRefused) as by_other:
                ctx = production_wiring(azure_settings(entra_cosmos, AZURE_CLIENT_ID=OTHER_IDENTITY))
                use_the_stores(ctx, orders=1)
            with pytest.raises(CosmosHttpResponseError) as by_key:
                use_the_stores(production_wiring(azure_settings(entra_cosmos, COSMOS_KEY=entra_cosmos.key)), 1)
        finally:
            entra_cosmos.set_auth(None)

    cause = by_other.value.__cause__
    assert isinstance(cause, CosmosHttpResponseError) and cause.status_code == 403
    assert by_key.value.status_code == 401


def test_the_service_bus_client_fetches_its_token_with_the_identity(
    production_wiring: Any, identity: IdentityEndpoint, entra_cosmos: CosmosServer
) -> None:
    """The token the Service Bus SDK's AMQP link sends on its CBS link: fetched through the SDK's own
    authentication object, for Service Bus's audience, with the identity ServiceBusConnection__clientId names
    (the one the triggers use)."""
    from azure.servicebus._common.utils import create_authentication

    ctx = production_wiring(azure_settings(entra_cosmos))
    client = ctx.sender._client  # the ServiceBusClient every sender, receiver and browser of the app shares
    for queue in ("orders", "client-status"):
        sender = client.get_queue_sender(queue)  # not opened: that would connect to the namespace
        assert create_authentication(sender).get_token().token  # what the CBS link puts on the wire

    requests = identity.for_resource(SERVICE_BUS_AUDIENCE)
    assert [r.client_id for r in requests] == [APP_IDENTITY]  # one token for both links


def _within(seconds: float, call: Any) -> float:
    """How long ``call()`` took; fails if it has not returned within ``seconds`` (it is left to finish alone)."""
    import threading

    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    began = time.monotonic()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert outcome, f"still waiting after {seconds} s"
    if outcome[0] is not None:
        raise outcome[0]
    return time.monotonic() - began


def test_a_token_request_the_identity_endpoint_never_answers_is_given_up_and_tried_again(
    production_wiring: Any, identity: IdentityEndpoint, entra_cosmos: CosmosServer
) -> None:
    """Red team: the credentials asked the endpoint with azure-core's default transport, 300 s to read an answer,
    and azure-identity tries a token request 4 times: a request the endpoint took and never answered held the
    caller 300 s, and one that never answers about 20 minutes. The first such request is the Cosmos DB client's,
    made while the first invocation of a worker builds the wiring, holding the lock every other invocation of the
    worker waits on (``dependencies.get_context``); later, a token's renewal is made inside a Cosmos DB call or a
    Service Bus send, past the 230 s an HTTP-triggered function has and the 30 s of a send (``SEND_TIMEOUT``).
    Each try now gives up after ``IDENTITY_READ_TIMEOUT`` and the next one is made."""
    from azure.servicebus._common.utils import create_authentication

    from settings import IDENTITY_READ_TIMEOUT

    bound = IDENTITY_READ_TIMEOUT.total_seconds() + 10  # one try given up, the next answered
    entra_cosmos.set_auth([APP_IDENTITY], [COSMOS_AUDIENCE])
    try:
        identity.stall_next = 1
        built: list[Any] = []
        _within(bound, lambda: built.append(production_wiring(azure_settings(entra_cosmos))))
        use_the_stores(built[0], orders=1)
        assert entra_cosmos.auth_log()["refused"] == []
    finally:
        entra_cosmos.set_auth(None)

    identity.stall_next = 1
    sender = built[0].sender._client.get_queue_sender("orders")
    _within(bound, lambda: create_authentication(sender).get_token())
    assert len(identity.for_resource(COSMOS_AUDIENCE)) == len(identity.for_resource(SERVICE_BUS_AUDIENCE)) == 2


def test_a_token_the_identity_cannot_renew_is_a_store_outage(
    production_wiring: Any, monkeypatch: pytest.MonkeyPatch, entra_cosmos: CosmosServer
) -> None:
    """Red team: when the client's token expired and the managed identity endpoint failed (a 503 on every try),
    the store calls raised azure-identity's ``CredentialUnavailableError`` (a ``ClientAuthenticationError``), which
    ``mapped_errors`` did not map: not a ``StoreUnavailable``, so the ``orders`` handler's outage path
    (``submission.store_outage``: the message sent again for later) was skipped, the invocation failed, and Service
    Bus redelivered the order at once until its 5 deliveries were spent and it was dead-lettered. Nothing was sent:
    a ``StoreUnavailable`` (a write not carried out) now, handled as every Cosmos DB outage is."""
    import json

    from adapters.cosmos.errors import StoreOutcomeUnknown, StoreUnavailable
    from submission.intake import handle_orders_message
    from tests.contexts import context_with
    from tests.fakes import FakeReceivedMessage, RecordingSender
    from tests.submission.corpus import order

    with IdentityEndpoint([APP_IDENTITY], lifetime=2.0) as endpoint:
        endpoint.install(monkeypatch)
        entra_cosmos.set_auth([APP_IDENTITY], [COSMOS_AUDIENCE])
        try:
            sender = RecordingSender()
            ctx = context_with(production_wiring(azure_settings(entra_cosmos)), sender=sender)
            use_the_stores(ctx, orders=1)
            time.sleep(2.5)  # the token has expired: the next call asks for another
            endpoint.failing = 503
            with pytest.raises(StoreUnavailable) as raised:
                ctx.states.get("o-1")
            assert not isinstance(raised.value, StoreOutcomeUnknown)  # no request was sent
            result = handle_orders_message(ctx, FakeReceivedMessage.of(json.dumps(order(orderId="o-2")), "o-2"))
        finally:
            entra_cosmos.set_auth(None)

    assert result.settlement.kind == "complete"
    assert sender.message_ids("orders") != []  # its copy, due later (submission/store_outage.py)


def test_a_new_worker_that_cannot_reach_cosmos_db_yet_handles_an_order_as_a_store_outage(
    production_wiring: Any, identity: IdentityEndpoint, entra_cosmos: CosmosServer
) -> None:
    """Red team: the wiring made the Cosmos DB client when it was built, and its constructor reads the database
    account (after a token): with the identity endpoint failing (or Cosmos DB unreachable, or answering 503) when a
    new worker took its first message, ``build_from_settings`` raised, so every invocation of that worker failed
    before the app's own handling, and an ``orders`` message was redelivered at once until dead-lettered (Flex
    Consumption adds workers under load, an outage included). The client is now made at the first request: the
    failure is that request's ``StoreUnavailable``, the order is sent again for later, and once the endpoint answers
    the next request makes the client."""
    import json

    from submission.intake import handle_orders_message
    from tests.contexts import context_with
    from tests.fakes import FakeReceivedMessage, RecordingSender
    from tests.submission.corpus import order

    entra_cosmos.set_auth([APP_IDENTITY], [COSMOS_AUDIENCE])
    try:
        identity.failing = 503
        sender = RecordingSender()
        ctx = context_with(production_wiring(azure_settings(entra_cosmos)), sender=sender)
        result = handle_orders_message(ctx, FakeReceivedMessage.of(json.dumps(order(orderId="o-1")), "o-1"))
        assert result.settlement.kind == "complete" and sender.message_ids("orders") != []  # its copy, for later
        identity.failing = None
        time.sleep(5.2)  # MSAL answers a request like one that got a 5xx with that answer for 5 s (its throttle)
        use_the_stores(ctx, orders=1)
        log = entra_cosmos.auth_log()
    finally:
        entra_cosmos.set_auth(None)

    assert log["refused"] == [] and log["aad"] > 0


def test_requests_that_waited_while_the_client_failed_to_be_made_fail_with_it(
    production_wiring: Any, identity: IdentityEndpoint, entra_cosmos: CosmosServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Red team: requests of a new worker wait for the one making the client (its lock); when that failed, each
    made a try of its own in turn, so with the identity endpoint taking requests and answering none (each try
    about 25 s: 4 token requests of IDENTITY_READ_TIMEOUT) the n-th of n concurrent invocations (the orders
    trigger takes 16 at once) waited n tries. A request that waited while another's try failed now fails with it:
    all of them after one try."""
    import threading
    from datetime import timedelta

    from adapters.cosmos.errors import StoreUnavailable

    monkeypatch.setattr("settings.IDENTITY_READ_TIMEOUT", timedelta(seconds=0.5))  # a try in seconds, not 25
    identity.stall_next = 1000
    ctx = production_wiring(azure_settings(entra_cosmos))
    began = time.monotonic()
    ended: list[tuple[float, BaseException | None]] = []

    def request() -> None:
        try:
            ctx.states.get("o-1")
            ended.append((time.monotonic() - began, None))
        except BaseException as error:
            ended.append((time.monotonic() - began, error))

    requests = [threading.Thread(target=request) for _ in range(3)]
    for thread in requests:
        thread.start()
    for thread in requests:
        thread.join(300)

    assert len(ended) == 3 and all(isinstance(error, StoreUnavailable) for _, error in ended)
    first, last = min(t for t, _ in ended), max(t for t, _ in ended)
    assert last < first * 1.5, ended  # one try for the three, not three in turn
