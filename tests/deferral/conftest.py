"""The app context over the Cosmos protocol server with the in-process broker as its sender and
deferred-message store (real deferral semantics, on the test's manual clock)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

import deferral.apply
import submission.intake
from contracts.messages import ClientText, OrderSubmitted, PaymentNotification
from contracts.names import ALL_QUEUES, ORDERS_QUEUE, STATE_CONTAINER
from localrun.servicebus import InProcessBroker, QueuePolicy

ORDERS_TTL = timedelta(hours=1)


@pytest.fixture
def broker(clock: Any) -> InProcessBroker:
    broker = InProcessBroker(clock)
    for queue in dict.fromkeys(ALL_QUEUES):
        policy = QueuePolicy(default_ttl=ORDERS_TTL) if queue == ORDERS_QUEUE else None
        broker.declare_queue(queue, policy)
    return broker


@pytest.fixture
def ctx(app_context: Any, broker: InProcessBroker, cosmos_db: Any) -> Any:
    """``app_context`` with the broker as its sender and deferred-message store, installed in its place (a test of
    deferral uses this context, never ``app_context``)."""
    from adapters.cosmos.deferral_store import CosmosDeferralLog
    from tests.contexts import context_with

    return context_with(
        app_context,
        sender=broker,
        deferred=broker.deferred_store,
        deferrals=CosmosDeferralLog(cosmos_db.get_container_client(STATE_CONTAINER)),
    )


class _OrderSubmittedBefore(OrderSubmitted):
    customer_id: ClientText  # type: ignore[assignment]


class _PaymentNotificationBefore(PaymentNotification):
    notification_id: ClientText  # type: ignore[assignment]
    provider_reference: ClientText  # type: ignore[assignment]


@pytest.fixture
def previous_release() -> Iterator[pytest.MonkeyPatch]:
    """The contracts of the release before: an identifier may hold tabs and line breaks. ``undo()`` upgrades."""
    with pytest.MonkeyPatch.context() as patch:
        handlers = submission.intake.HANDLERS
        patch.setitem(handlers, "OrderSubmitted", (_OrderSubmittedBefore, handlers["OrderSubmitted"][1]))
        patch.setitem(handlers, "PaymentNotification", (_PaymentNotificationBefore, handlers["PaymentNotification"][1]))
        patch.setitem(deferral.apply.DEFERRABLE, "PaymentNotification", _PaymentNotificationBefore)
        yield patch
