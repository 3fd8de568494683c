"""A ``PaymentNotification`` under the ``notificationId`` of another one, applied or waiting, that says
something else (another amount, currency or provider reference) is a conflict, never a repeat: it is
dead-lettered ``ConflictingNotification`` with an operator alert and a ``PaymentRejected`` event, on
every path (after its order, deferred before it, deferred for a dependency, beside a copy of the other).

Found by red team 6: ``domain.payments.decide_payment`` took any notification under the applied id for a
duplicate, before comparing anything, and completed it silently; a second real payment under a reused id
(another provider reference) was money at the provider nobody was told of."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE
from domain.deferral import DeferralReason, EntryStatus
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import context_with, while_using
from tests.deferral.conftest import ORDERS_TTL
from tests.deferral.support import (
    TOTAL,
    alerts,
    deferred_for_the_order_database,
    deferred_sequence_numbers,
    deliver,
    deliver_all,
    notification,
    order,
    send,
)
from tests.fakes import OrderStoreThatFailsOnRead, StateStoreThatFails

pytestmark = pytest.mark.cosmos

CONFLICTS: dict[str, dict[str, Any]] = {
    "amountCents": {"amount": TOTAL * 40},
    "currency": {"currency": "USD"},
    "providerReference": {"providerReference": "psp-someone-else"},
}


def dead_letters(broker: Any) -> list[tuple[str, str]]:
    return [(d.message_id, d.reason) for d in broker.dead_letters(ORDERS_QUEUE)]


def conflict_alerts(broker: Any) -> list[dict[str, Any]]:
    return [a for a in alerts(broker) if a["kind"] == "ConflictingNotification"]


@pytest.mark.parametrize("field", sorted(CONFLICTS))
def test_a_notification_reusing_the_applied_id_with_other_data_is_dead_lettered_and_alerted(
    functions: Any, ctx: Any, broker: Any, caplog: pytest.LogCaptureFixture, field: str
) -> None:
    send(broker, order())
    deliver(functions, broker)
    send(broker, notification())
    deliver(functions, broker)
    applied = ctx.states.get("p1")
    assert applied.payment is not None and applied.payment.notification_id == "n-1"

    caplog.set_level(logging.INFO)
    send(broker, notification(**CONFLICTS[field]), message_id="n-1-again")
    deliver(functions, broker)

    assert ctx.states.get("p1").version == applied.version  # the applied payment is kept
    assert dead_letters(broker) == [("n-1-again", "ConflictingNotification")]
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert field in dead.description
    [alert] = conflict_alerts(broker)
    assert list(alert["details"]["differences"]) == [field]
    assert alert["details"]["applied"]["providerReference"] == "psp-n-1"
    events = [r for r in caplog.records if getattr(r, "event", None) == "PaymentRejected"]
    assert [(r.reason, r.notificationId) for r in events] == [("ConflictingNotification", "n-1")]  # type: ignore[attr-defined]


def test_the_same_notification_again_is_still_a_duplicate(functions: Any, ctx: Any, broker: Any) -> None:
    send(broker, order())
    deliver(functions, broker)
    send(broker, notification())
    deliver(functions, broker)
    send(broker, notification(), message_id="n-1-again")  # another MessageId, the same notification
    deliver(functions, broker)
    assert dead_letters(broker) == [] and alerts(broker) == []


def test_two_notifications_under_one_id_before_their_order_the_second_is_dead_lettered(
    functions: Any, ctx: Any, broker: Any
) -> None:
    """Both arrive before their order (both deferred); the first is applied when the order arrives, the
    second (another amount) is a conflict, not resolved as applied too."""
    send(broker, notification(), message_id="m-a")
    deliver(functions, broker)
    send(broker, notification(amount=1), message_id="m-b")
    deliver(functions, broker)
    first, second = deferred_sequence_numbers(broker)
    send(broker, order())
    deliver(functions, broker)

    assert ctx.states.get("p1").payment.amount_cents == TOTAL
    assert dead_letters(broker) == [("m-b", "ConflictingNotification")]
    doc = ctx.deferrals.get("p1")
    assert (doc.entry(first).status, doc.entry(second).status) == (EntryStatus.APPLIED, EntryStatus.DEAD_LETTERED)
    assert len(conflict_alerts(broker)) == 1


def test_a_conflicting_notification_deferred_for_a_dependency_is_dead_lettered_on_its_retry(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """One applied, the other deferred (the order database down when it came): decided on its retry."""
    orders, with_orders = deferred_for_the_order_database(functions, ctx, broker)  # the genuine one, deferred
    orders.failing = False
    clock.advance(with_orders.settings.defer_retry_delay)
    deliver_all(functions, broker)
    assert with_orders.states.get("p1").payment.provider_reference == "psp-n-1"

    orders.failing = True
    send(broker, notification(providerReference="psp-other"), message_id="n-1-other")
    assert deliver(functions, broker)  # deferred for the order database
    [seq] = deferred_sequence_numbers(broker)
    assert with_orders.deferrals.get("p1").entry(seq).reason is DeferralReason.DEPENDENCY_UNAVAILABLE
    orders.failing = False
    clock.advance(with_orders.settings.defer_retry_delay)
    deliver_all(functions, broker)

    assert dead_letters(broker) == [("n-1-other", "ConflictingNotification")]
    assert with_orders.deferrals.get("p1").entry(seq).status is EntryStatus.DEAD_LETTERED
    assert len(conflict_alerts(broker)) == 1


def test_a_copy_of_the_applied_notification_does_not_settle_a_conflicting_one_waiting_under_its_id(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """A copy (``submission.store_outage``) settles an entry of the same notification under another
    sequence number with its own outcome; one under the same id that says something else is not the
    same notification: before, it was marked applied and later completed, silently."""
    orders = OrderStoreThatFailsOnRead(ctx.orders)
    octx: Any = context_with(ctx, orders=orders)
    send(broker, order())
    deliver_all(functions, broker)
    orders.failing = True
    send(broker, notification(providerReference="psp-other"), message_id="other")
    assert deliver(functions, broker)  # deferred for the order database, its retry due in 30 s
    [other] = deferred_sequence_numbers(broker)
    orders.failing = False
    with while_using(octx, states=StateStoreThatFails(octx.states, "get")):
        send(broker, notification(), message_id="genuine")
        assert deliver(functions, broker)  # the state store down: copied, due in 10 s
    clock.advance(STORE_RETRY_DELAYS[0])
    deliver_all(functions, broker)  # the copy: applied
    assert octx.states.get("p1").payment.provider_reference == "psp-n-1"
    assert octx.deferrals.get("p1").entry(other).status is EntryStatus.DEFERRED  # not settled by the copy

    clock.advance(octx.settings.defer_retry_delay)
    deliver_all(functions, broker)  # its retry round
    assert dead_letters(broker) == [("other", "ConflictingNotification")]
    assert octx.deferrals.get("p1").entry(other).status is EntryStatus.DEAD_LETTERED


def test_a_conflicting_notification_gone_from_the_queue_is_reported_expired_not_applied(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """A tracked message found gone is ``Applied`` if the payment on the record is its notification (a copy
    of it was applied); another notification under the same id is not: it expired, and is alerted so."""
    send(broker, notification(providerReference="psp-other"), message_id="other")
    deliver_all(functions, broker)  # before its order: deferred
    [other] = deferred_sequence_numbers(broker)
    clock.advance(ORDERS_TTL)  # it expires while it waits
    send(broker, notification(), message_id="genuine")
    deliver_all(functions, broker)
    send(broker, order())
    deliver_all(functions, broker)

    assert ctx.states.get("p1").payment.provider_reference == "psp-n-1"
    assert ctx.deferrals.get("p1").entry(other).status is EntryStatus.EXPIRED
    assert "DeferredMessageExpired" in [a["kind"] for a in alerts(broker)]
