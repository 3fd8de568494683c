"""An order's deferral document tracks at most ``WAITING_LIMIT`` messages still deferred: it is one Cosmos DB
document (2 MB at most), and a flood of notifications for an order that never comes would otherwise grow
it until every write to it failed (HTTP 413, on every later notification of that order). Red team on
3737d51 (a hypothesis: about 6,000 waiting notifications). Past the limit a new one is dead-lettered
``TooManyDeferred``, whichever path would have recorded it."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from adapters.servicebus.sender import OutgoingMessage
from contracts.names import ORDERS_QUEUE
from deferral.sweep import peek_sweep
from domain.deferral import WAITING_LIMIT
from tests.deferral.support import alerts, deferred_sequence_numbers, deliver_all, notification, order, send

pytestmark = pytest.mark.cosmos


def test_notifications_past_the_limit_are_dead_lettered_and_those_kept_are_applied(functions, ctx, broker) -> None:
    for n in range(WAITING_LIMIT + 2):
        send(broker, notification(notification_id=f"n-{n}"))
    deliver_all(functions, broker)
    assert len(deferred_sequence_numbers(broker)) == WAITING_LIMIT
    dead = broker.dead_letters(ORDERS_QUEUE)
    assert [d.reason for d in dead] == ["TooManyDeferred"] * 2
    assert f"order p1 has {WAITING_LIMIT} messages deferred already" in (dead[0].description or "")
    assert len(ctx.deferrals.get("p1").waiting()) == WAITING_LIMIT
    assert [a["kind"] for a in alerts(broker)].count("TooManyDeferred") >= 1  # the real one may be among them

    send(broker, order())  # the order arrives: the first is applied, the others do not fit it
    deliver_all(functions, broker)
    assert ctx.states.get("p1").payment.notification_id == "n-0"
    assert len(ctx.deferrals.get("p1").waiting()) == 0
    assert "DeferredMessageExpired" not in [a["kind"] for a in alerts(broker)]


def test_the_peek_sweep_dead_letters_an_untracked_message_its_full_order_cannot_take(
    functions, ctx, broker, clock
) -> None:
    for n in range(WAITING_LIMIT):
        send(broker, notification(notification_id=f"n-{n}"))
    deliver_all(functions, broker)
    # one more deferred by a handler whose tracking write was lost (a crash between defer and record)
    broker.send(ORDERS_QUEUE, OutgoingMessage(body=json.dumps(notification(notification_id="x")), message_id="x"))
    untracked = broker.receive(ORDERS_QUEUE)
    broker.actions.defer(untracked)

    clock.advance(ctx.settings.peek_sweep_age + timedelta(seconds=1))
    report = peek_sweep(ctx)
    assert report.dead_lettered == 1 and report.failed == 0
    assert [(d.message_id, d.reason) for d in broker.dead_letters(ORDERS_QUEUE)] == [("x", "TooManyDeferred")]
    assert len(deferred_sequence_numbers(broker)) == WAITING_LIMIT
