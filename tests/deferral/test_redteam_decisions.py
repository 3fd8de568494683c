"""Red team on 871ae34: a deferred message decided once is never decided again the other way; what a
processor does not fetch cannot wear it out; a message that no longer parses resolves its entry; the
``TooManyDeferred`` alert comes once per order each clock hour."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

import localrun.servicebus.deferred as sbdeferred
from contracts.names import ORDERS_QUEUE
from deferral.sweep import peek_sweep
from domain.deferral import WAITING_LIMIT, EntryStatus
from tests.contexts import context_with
from tests.deferral.support import (
    alerts,
    deferred_for_the_order_database,
    deferred_sequence_numbers,
    deliver,
    deliver_all,
    notification,
    order,
    send,
)
from tests.fakes import OrderStoreThatFailsOnRead

pytestmark = pytest.mark.cosmos


def scheduled(broker: Any) -> list[dict[str, Any]]:
    return [json.loads(m.body) for m in broker.peek(ORDERS_QUEUE, 100) if m.state.name == "SCHEDULED"]


def lose_next_settle_fetch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The next fetch-to-settle returns nothing (locked by another processor / a Service Bus blip)."""
    real = sbdeferred.BrokerDeferredReceiver.receive_deferred
    state = {"armed": True}

    def once(self: Any, seqs: Any) -> Any:
        if state["armed"]:
            state["armed"] = False
            return []
        return real(self, seqs)

    monkeypatch.setattr(sbdeferred.BrokerDeferredReceiver, "receive_deferred", once)


def at_the_last_round(functions: Any, ctx: Any, broker: Any, clock: Any) -> tuple[Any, Any, int]:
    """A notification deferred while the order database is down, through every RetryDeferred round but the
    last (which is scheduled, not yet due)."""
    orders, octx = deferred_for_the_order_database(functions, ctx, broker)
    [seq] = deferred_sequence_numbers(broker)
    while scheduled(broker)[0]["round"] < octx.settings.defer_max_rounds:
        clock.advance(octx.settings.defer_retry_delay)
        assert deliver(functions, broker)
    return orders, octx, seq


def test_an_applied_entry_whose_settlement_was_lost_is_completed_by_the_sweep_not_decided_again(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    orders, octx, seq = at_the_last_round(functions, ctx, broker, clock)
    orders.failing = False  # back for the last round
    clock.advance(octx.settings.defer_retry_delay)
    lose_next_settle_fetch(monkeypatch)
    assert deliver(functions, broker)  # last round applies it; its settle fetch comes back empty
    assert octx.states.get("p1").payment.sequence_number == seq
    assert octx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    assert deferred_sequence_numbers(broker) == [seq]  # left to the sweep to settle "as decided"

    orders.failing = True  # a second blip of the order database when the sweep comes
    clock.advance(octx.settings.peek_sweep_age + timedelta(minutes=1))
    peek_sweep(octx)
    dead = [d for d in broker.dead_letters(ORDERS_QUEUE) if d.sequence_number == seq]
    kinds = [a["kind"] for a in alerts(broker)]
    # what should hold: an applied payment's message is completed, no give-up alert
    assert octx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    assert dead == [], f"applied payment's message dead-lettered: {[(d.reason, d.description) for d in dead]}"
    assert "DeferredMessageGaveUp" not in kinds, kinds


def test_a_message_given_up_whose_settlement_was_lost_is_dead_lettered_by_the_sweep_not_applied_later(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    orders, octx, seq = at_the_last_round(functions, ctx, broker, clock)
    clock.advance(octx.settings.defer_retry_delay)
    lose_next_settle_fetch(monkeypatch)
    assert deliver(functions, broker)  # last round gives up: DEAD_LETTERED + GaveUp alert; settle fetch empty
    assert octx.deferrals.get("p1").entry(seq).status is EntryStatus.DEAD_LETTERED
    assert "DeferredMessageGaveUp" in [a["kind"] for a in alerts(broker)]
    orders.failing = False
    clock.advance(octx.settings.peek_sweep_age + timedelta(minutes=1))
    peek_sweep(octx)
    assert octx.states.get("p1").payment is None, "applied after the operator was told it was dead-lettered"
    [dead] = [d for d in broker.dead_letters(ORDERS_QUEUE) if d.sequence_number == seq]
    assert dead.reason == "DependencyUnavailable"


def test_a_tracked_message_that_no_longer_parses_is_dead_lettered_by_the_sweep_and_its_entry_resolved(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import deferral.apply
    import deferral.sweep
    from contracts.parsing import InvalidMessage, parse

    send(broker, notification())
    deliver(functions, broker)  # tracked, deferred (OrderNotSubmitted)
    [seq] = deferred_sequence_numbers(broker)

    def new_rule(body: Any, accepted: Any) -> Any:  # a contract rule deployed since it was deferred
        got = parse(body, accepted)
        if getattr(got, "notification_id", None) == "n-1":
            raise InvalidMessage("InvalidFields", "field 'providerReference' breaks the new rule")
        return got

    monkeypatch.setattr(deferral.sweep, "parse", new_rule)
    monkeypatch.setattr(deferral.apply, "parse", new_rule)
    clock.advance(ctx.settings.peek_sweep_age + timedelta(minutes=1))
    peek_sweep(ctx)
    [dead] = [d for d in broker.dead_letters(ORDERS_QUEUE) if d.sequence_number == seq]
    assert dead.reason == "InvalidFields"
    status = ctx.deferrals.get("p1").entry(seq).status
    send(broker, order())
    deliver_all(functions, broker)
    kinds = [a["kind"] for a in alerts(broker)]
    assert (status, kinds) == (EntryStatus.DEAD_LETTERED, []), (
        status,
        kinds,
        ctx.deferrals.get("p1").entry(seq).status,
    )


def test_a_message_only_peeked_does_not_give_up_early_for_deliveries_spent_before_it_was_deferred(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import submission.payments
    from adapters.servicebus.sender import SendError

    orders = OrderStoreThatFailsOnRead(ctx.orders)
    octx: Any = context_with(ctx, orders=orders)
    send(broker, order())
    deliver(functions, broker)
    orders.failing = True
    real = submission.payments.schedule_round  # type: ignore[attr-defined]
    fails = {"left": 3}

    def flaky(*a: Any, **k: Any) -> Any:  # a Service Bus blip on the RetryDeferred send: abandoned 3 times
        if fails["left"]:
            fails["left"] -= 1
            raise SendError("blip")
        return real(*a, **k)

    monkeypatch.setattr(submission.payments, "schedule_round", flaky)
    send(broker, notification())
    for _ in range(4):
        assert deliver(functions, broker)
    [seq] = deferred_sequence_numbers(broker)
    clock.advance(octx.settings.defer_retry_delay)
    assert deliver(functions, broker)  # round 1 (of DEFER_MAX_ROUNDS=3), peeked: nothing fetched to wait
    dead = [d.reason for d in broker.dead_letters(ORDERS_QUEUE) if d.sequence_number == seq]
    assert dead == [], f"gave up at round 1: {dead}, alerts {[a['kind'] for a in alerts(broker)]}"


def test_the_too_many_deferred_alert_comes_once_per_duplicate_window_per_order(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """Red team on 871ae34: the doc promised one an hour; the alert's id is per order, so Service Bus's
    duplicate detection keeps one every 10 minutes (what the doc now says)."""
    for n in range(WAITING_LIMIT + 5):
        send(broker, notification(notification_id=f"n-{n}"))
        deliver_all(functions, broker)
    assert [a["kind"] for a in alerts(broker)].count("TooManyDeferred") == 1
    clock.advance(timedelta(minutes=11))
    send(broker, notification(notification_id="n-late"))
    deliver_all(functions, broker)
    assert [a["kind"] for a in alerts(broker)].count("TooManyDeferred") == 2
