"""Red team (rt-refused-2): does a refusal of the app's identity by Cosmos DB that lasts always reach an operator?
Through the production wiring, the real ``DefaultAzureCredential`` and the real azure-cosmos SDK against the local
server taking Entra ID tokens only (``localrun/cosmos_auth.cjs``); what Application Insights keeps of the app's
records through the real exporter (``tests/observability/exported.py``); the log alert rules run as Azure Monitor
runs them (``tests/infra/log_alerts.py``).

Found: the page for a lasting refusal (``StoreAccessRefused``) rested on the supervisor's memory of since when its
scans were refused. A host restart (Flex Consumption recycles instances) started the 20 minutes again: a host
restarting every 10 minutes behind a role removed for good paged nobody, ever. And it rested on the scan, a read: an
identity given Cosmos DB Built-in Data Reader (reads answered, writes refused) paged nothing until its orders were
dead-lettered an hour later. Now every refused request is logged (``StoreRequestRefused``) and the
``storeAccessRefused`` log alert rule pages once refusals have gone on in each of five 5-minute periods.

Found too: a 401 to a request signed with a key (local development's connection string: a wrong key, or local
authorization disabled on the account) was taken for the identity refused, a ``StoreRefused``: the developer saw a
quiet loop of orders sent again for later instead of the error. It escapes as the SDK's error again."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from localrun.cosmos_server import CosmosServer
from tests.identity.conftest import APP_IDENTITY
from tests.identity.endpoint import IdentityEndpoint
from tests.identity.test_production_wiring import COSMOS_AUDIENCE, OTHER_IDENTITY, azure_settings
from tests.infra.log_alerts import LogRule
from tests.observability.exported import exported

pytestmark = pytest.mark.cosmos

Event = tuple[float, str, dict[str, str]]


def _supervised(
    production_wiring: Any, server: CosmosServer, minutes: int, restart_every: int, refused_until: int
) -> list[Event]:
    """The supervisor run every 5 minutes for ``minutes`` (it runs every 30 seconds), by a host restarted every
    ``restart_every`` minutes (a new worker: what its supervisor remembers, ``ScanState``, starts empty), the app's
    role removed until ``refused_until``: what Application Insights keeps, with the minute each was logged. One
    client throughout: a worker's first store requests with no client yet make one each, and under a refusal that
    takes the SDK about 15 seconds a supervisor run (its account reads refused), too slow for this test."""
    from adapters.clock import ManualClock
    from supervisor.run import run_supervisor
    from supervisor.scan import ScanState
    from tests.contexts import context_with
    from tests.fakes import RecordingSender

    clock, events = ManualClock(), []
    server.set_auth([APP_IDENTITY], [COSMOS_AUDIENCE])
    ctx = context_with(production_wiring(azure_settings(server)), sender=RecordingSender(), clock=clock)
    ctx = context_with(ctx, dead_letters=None)
    ctx.states.get("o-none")  # the client made
    state = ScanState()
    for minute in range(0, minutes + 1, 5):
        server.set_auth([OTHER_IDENTITY] if minute < refused_until else [APP_IDENTITY], [COSMOS_AUDIENCE])
        if minute % restart_every == 0:
            state = ScanState()
        with exported() as rows:
            run_supervisor(ctx, state)
        events += [(minute + 0.5, row.table, row.properties) for row in rows]
        clock.advance(timedelta(minutes=5))
    return events


def _named(events: list[Event], name: str) -> list[Event]:
    return [e for e in events if e[2].get("event") == name]


def test_a_refusal_that_lasts_pages_once_though_the_host_restarts_every_ten_minutes(
    production_wiring: Any, identity: IdentityEndpoint, entra_cosmos: CosmosServer
) -> None:
    """The role removed for good, the host restarted every 10 minutes: each worker's supervisor starts its count
    again (a ``StoreAccessRefused`` warning at each start), and before, no worker lived the 20 minutes it waited to
    page. The rule counts the refusals Application Insights keeps: one page, 20 to 25 minutes in, none after."""
    try:
        events = _supervised(production_wiring, entra_cosmos, minutes=60, restart_every=10, refused_until=999)
    finally:
        entra_cosmos.set_auth(None)
    assert len(_named(events, "StoreAccessRefused")) == 7  # one per worker: each started counting again
    refused = _named(events, "StoreRequestRefused")
    assert refused and {(e[2]["status"], e[2]["substatus"]) for e in refused} == {("403", "5301")}
    pages = LogRule.of("storeAccessRefused").pages(events, until=60)
    assert len(pages) == 1 and 20 <= pages[0][0] <= 25


def test_a_role_still_propagating_pages_nobody(
    production_wiring: Any, identity: IdentityEndpoint, entra_cosmos: CosmosServer
) -> None:
    """Refused for the first 12 minutes (RBAC documents up to about 10), then answered: no page."""
    try:
        events = _supervised(production_wiring, entra_cosmos, minutes=40, restart_every=60, refused_until=12)
    finally:
        entra_cosmos.set_auth(None)
    assert _named(events, "StoreRequestRefused") and len(_named(events, "StoreAccessRestored")) == 1
    assert LogRule.of("storeAccessRefused").pages(events, until=40) == []


def test_writes_refused_while_reads_are_answered_page_before_the_orders_are_dead_lettered(
    production_wiring: Any, identity: IdentityEndpoint, entra_cosmos: CosmosServer
) -> None:
    """The app's identity given Cosmos DB Built-in Data Reader instead of Data Contributor: the supervisor's scans are
    answered (nothing for its memory to count: no ``StoreAccessRefused``), an order's writes refused. The order waits
    (sent to ``orders`` again for later, about an hour of copies before it is dead-lettered); the rule pages once,
    20 to 25 minutes in, before any is dead-lettered. Before, the first page was the dead letter, an hour later."""
    from adapters.clock import ManualClock
    from submission.intake import handle_orders_message
    from supervisor.run import run_supervisor
    from supervisor.scan import ScanState
    from tests.contexts import context_with
    from tests.fakes import FakeReceivedMessage, RecordingSender
    from tests.submission.corpus import order

    sender, clock, state, events = RecordingSender(), ManualClock(), ScanState(), []
    entra_cosmos.set_auth([OTHER_IDENTITY], [COSMOS_AUDIENCE], readers=[APP_IDENTITY])
    try:
        ctx = context_with(
            production_wiring(azure_settings(entra_cosmos)), sender=sender, clock=clock, dead_letters=None
        )
        message = FakeReceivedMessage.of(json.dumps(order(orderId="o-reader")), "o-reader")
        for minute in range(31):
            with exported() as rows:
                result = handle_orders_message(ctx, message)
                if minute % 2 == 0:
                    run_supervisor(ctx, state)
            events += [(minute + 0.5, row.table, row.properties) for row in rows]
            assert result.settlement.kind == "complete"  # sent again for later: not abandoned, not dead-lettered
            message = FakeReceivedMessage.from_sent([m for q, m in sender.sent if q == "orders"][-1])
            clock.advance(timedelta(minutes=1))
        refused = entra_cosmos.auth_log()["refused"]
    finally:
        entra_cosmos.set_auth(None)
    assert refused and all(r["method"] != "GET" and r["substatus"] == 5301 for r in refused)
    assert _named(events, "StoreAccessRefused") == []  # the supervisor's scans were answered
    assert _named(events, "SupervisorScan")
    pages = LogRule.of("storeAccessRefused").pages(events, until=30)
    assert len(pages) == 1 and 20 <= pages[0][0] <= 25


def test_a_key_cosmos_db_refuses_is_an_error_not_a_quiet_retry_loop(
    production_wiring: Any, entra_cosmos: CosmosServer
) -> None:
    """Local development with a connection string whose key is wrong (or an account with local authorization
    disabled): a 401 to a key-signed request. Not a role propagating: the SDK's error escapes, as it did before
    refusals were mapped (the invocation fails, saying so), not an ``orders`` message sent again for later every
    minute for an hour with a warning a developer does not read as "your key is wrong"."""
    from azure.cosmos.exceptions import CosmosHttpResponseError

    from adapters.cosmos.errors import StoreUnavailable
    from submission.intake import handle_orders_message
    from tests.contexts import context_with
    from tests.fakes import FakeReceivedMessage, RecordingSender
    from tests.submission.corpus import order

    entra_cosmos.set_auth([APP_IDENTITY], [COSMOS_AUDIENCE])  # a key-signed request: 401
    sender = RecordingSender()
    try:
        settings = azure_settings(entra_cosmos, COSMOS_KEY="d3Jvbmcta2V5LW5vdC10aGUtYWNjb3VudHM=")
        ctx = context_with(production_wiring(settings), sender=sender)
        with pytest.raises(CosmosHttpResponseError) as raised:
            ctx.states.get("o-key")
        assert raised.value.status_code == 401 and not isinstance(raised.value, StoreUnavailable)
        message = FakeReceivedMessage.of(json.dumps(order(orderId="o-key")), "o-key")
        with pytest.raises(CosmosHttpResponseError, match="Local Authorization is disabled"):
            handle_orders_message(ctx, message)
        refused = entra_cosmos.auth_log()["refused"]
    finally:
        entra_cosmos.set_auth(None)
    assert [q for q, _ in sender.sent if q == "orders"] == []  # no copy sent for later
    assert refused and {(r["status"], r["substatus"]) for r in refused} == {(401, 0)}
