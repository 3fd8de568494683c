"""Red team: Cosmos DB refusing the app's identity (Microsoft Entra ID, ``localrun/cosmos_auth.cjs``), through the
production wiring, the real ``DefaultAzureCredential`` and the real azure-cosmos SDK.

A 403 with substatus 5301 ("the principal has no data role") is what Azure answers for up to about 10 minutes
after a first deployment while the app's role assignment propagates, and again for good once someone removes the
role; a 401 is a token Cosmos DB does not take (expired, another audience or tenant). Neither was mapped by
``adapters.cosmos.errors.mapped_errors``: the SDK's ``CosmosHttpResponseError`` escaped every handler as an unknown
error, so an ``OrderSubmitted`` that met one failed its invocation, was redelivered at once and, its 5 deliveries
spent in seconds, dead-lettered: a valid order lost to a role assignment still propagating."""

from __future__ import annotations

import json
from typing import Any

import pytest

from localrun.cosmos_server import CosmosServer
from tests.identity.conftest import APP_IDENTITY
from tests.identity.endpoint import IdentityEndpoint
from tests.identity.test_production_wiring import COSMOS_AUDIENCE, OTHER_IDENTITY, azure_settings

pytestmark = pytest.mark.cosmos


def test_an_order_met_by_a_role_still_propagating_is_sent_again_for_later_and_created_once_it_is_granted(
    production_wiring: Any, identity: IdentityEndpoint, entra_cosmos: CosmosServer
) -> None:
    from adapters.cosmos.errors import StoreOutcomeUnknown, StoreRefused
    from submission.intake import handle_orders_message
    from tests.contexts import context_with
    from tests.fakes import FakeReceivedMessage, RecordingSender
    from tests.submission.corpus import order

    entra_cosmos.set_auth([OTHER_IDENTITY], [COSMOS_AUDIENCE])  # the app's role assignment not there yet
    try:
        sender = RecordingSender()
        ctx = context_with(production_wiring(azure_settings(entra_cosmos)), sender=sender)
        with pytest.raises(StoreRefused) as raised:
            ctx.states.get("o-1")
        assert not isinstance(raised.value, StoreOutcomeUnknown)  # refused: nothing was carried out
        assert "403" in str(raised.value) and "5301" in str(raised.value)
        first = handle_orders_message(ctx, FakeReceivedMessage.of(json.dumps(order(orderId="o-1")), "o-1"))
        assert first.settlement.kind == "complete"  # not abandoned: redelivered at once, then dead-lettered
        copies = [m for q, m in sender.sent if q == "orders"]
        assert len(copies) == 1 and copies[0].scheduled_enqueue_time is not None  # sent again, for later
        refused = entra_cosmos.auth_log()["refused"]
        assert refused and {(r["status"], r["substatus"]) for r in refused} == {(403, 5301)}

        entra_cosmos.set_auth([APP_IDENTITY], [COSMOS_AUDIENCE])  # the assignment propagated
        again = handle_orders_message(ctx, FakeReceivedMessage.from_sent(copies[0]))
        assert again.settlement.kind == "complete"
        record = ctx.states.get("o-1")
        assert record is not None and ctx.orders.get("o-1") is not None
        assert entra_cosmos.auth_log()["refused"] == []
    finally:
        entra_cosmos.set_auth(None)


def test_a_token_cosmos_db_does_not_take_is_a_refusal_too(
    production_wiring: Any, monkeypatch: pytest.MonkeyPatch, entra_cosmos: CosmosServer
) -> None:
    """A token for another audience (or tenant, or one Cosmos DB finds expired: clock skew) is a 401; while it lasts
    every request is refused, as a missing role is."""
    from adapters.cosmos.errors import StoreRefused

    entra_cosmos.set_auth([APP_IDENTITY], ["https://another-account.documents.azure.com"])
    try:
        with IdentityEndpoint([APP_IDENTITY]) as endpoint:
            endpoint.install(monkeypatch)
            ctx = production_wiring(azure_settings(entra_cosmos))
            with pytest.raises(StoreRefused, match="401"):
                ctx.states.get("o-1")
        refused = entra_cosmos.auth_log()["refused"]
    finally:
        entra_cosmos.set_auth(None)
    assert refused and {r["status"] for r in refused} == {401}


def test_the_supervisor_tells_when_its_scans_are_refused_and_when_one_is_answered_again(
    production_wiring: Any, identity: IdentityEndpoint, entra_cosmos: CosmosServer, caplog: Any
) -> None:
    """Red team, once a refusal is a ``StoreUnavailable``: the supervisor's scan takes it for a blip
    (``SupervisorScanInterrupted``, a warning), as the dead-letter watch and every other phase do. The supervisor
    says when its scans begin to be refused (``StoreAccessRefused``, once) and when one is answered again
    (``StoreAccessRestored``). The page is no longer its own (it kept the refusal's start in memory: a host restart
    started the count again): the ``storeAccessRefused`` log alert rule on every refused request
    (``tests/identity/test_redteam_refused2.py``); the supervisor sends no alert for it."""
    import logging
    from datetime import timedelta

    from adapters.clock import ManualClock
    from contracts.names import OPERATOR_ALERTS_QUEUE
    from supervisor.run import run_supervisor
    from supervisor.scan import ScanState
    from tests.contexts import context_with
    from tests.fakes import RecordingSender

    caplog.set_level(logging.INFO)
    sender, clock, state = RecordingSender(), ManualClock(), ScanState()
    ctx = context_with(production_wiring(azure_settings(entra_cosmos)), sender=sender, clock=clock, dead_letters=None)

    def events(name: str) -> list[Any]:
        return [r for r in caplog.records if getattr(r, "event", None) == name]

    entra_cosmos.set_auth([APP_IDENTITY], [COSMOS_AUDIENCE])
    try:
        run_supervisor(ctx, state)  # the client made: until then each request makes one, 4 reads of the account
        # what that answered run paged (its catch-up sweep pages the module's earlier documents, whose deadlines are
        # decades past this clock's 2000), not the refusals': none may be added while the role is missing
        paged = sender.message_ids(OPERATOR_ALERTS_QUEUE)
        entra_cosmos.set_auth([OTHER_IDENTITY], [COSMOS_AUDIENCE])  # the role removed
        caplog.clear()
        for _ in range(8):
            run_supervisor(ctx, state)
            clock.advance(timedelta(minutes=5))
        assert len(events("StoreAccessRefused")) == 1
        assert events("SupervisorPhaseFailed") == []
        assert events("StoreRequestRefused")  # what the rule counts
        assert sender.message_ids(OPERATOR_ALERTS_QUEUE) == paged

        entra_cosmos.set_auth([APP_IDENTITY], [COSMOS_AUDIENCE])
        run_supervisor(ctx, state)
    finally:
        entra_cosmos.set_auth(None)
    restored = events("StoreAccessRestored")
    assert len(restored) == 1 and restored[0].refusedSeconds == 40 * 60
    assert state.refusal.since is None
