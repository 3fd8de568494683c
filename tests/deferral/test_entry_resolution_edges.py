"""Edges of resolving deferral entries with no message behind them (deferral/apply.py ``make_room``,
deferral/tracking.py ``settle_decided``), found by a red team on the commits that added them:

* a look for an order's waiting messages cut short by a throttled read must not use up its period
  (``absentCheckedAt`` is stamped once the look is over), or the retried message is refused;
* an entry recorded less than ``PEEK_SWEEP_AGE_MINUTES`` ago is not looked for: its message may have a
  store-retry copy on the way, and it would be reported expired, then applied;
* an entry stored before digests were kept is matched to a "copy" by notification id alone: it takes
  the copy's "applied", never its rejection (the rejected one may be another notification under that id)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

import deferral.apply
from adapters.cosmos.errors import StoreUnavailable
from contracts.names import ORDERS_QUEUE
from domain.deferral import DeferralReason, EntryStatus
from tests.deferral.support import alerts, deferred_sequence_numbers, deliver, deliver_all, notification, order, send
from tests.deferral.test_waiting_limit import GONE, entries_gone_from_the_queue

pytestmark = pytest.mark.cosmos


class StatesGetFailsOnce:
    """The state store whose next ``get`` is throttled (a 429: StoreUnavailable, nothing written)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.armed = True

    def get(self, *args: Any, **kwargs: Any) -> Any:
        if self.armed:
            self.armed = False
            raise StoreUnavailable("state store: 429 on get")
        return self._store.get(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_a_throttled_read_while_making_room_costs_the_real_payment_its_place(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Order p1's list is full of entries whose messages are gone. The real notification arrives; make_room
    stamps absentCheckedAt, then one read of the state record (account_for_absent) is throttled: the
    StoreUnavailable propagates, the notification is copied (store_outage) and completed. Its copy comes back
    10 s later to the same full list, but absentCheckedAt says the entries were looked for 10 s ago: nothing is
    looked for, and the real payment is dead-lettered TooManyDeferred although 20 places are free to be had."""
    from submission.store_outage import STORE_RETRY_DELAYS

    entries_gone_from_the_queue(ctx, "p1", GONE, DeferralReason.ORDER_NOT_SUBMITTED)
    real_make_room = deferral.apply.make_room
    calls = [0]

    def make_room_with_one_throttled_read(c: Any, order_id: str, receiver: Any = None) -> bool:
        calls[0] += 1
        if calls[0] == 1:
            c = dataclasses.replace(c, states=StatesGetFailsOnce(c.states))
        return real_make_room(c, order_id, receiver)

    monkeypatch.setattr(deferral.apply, "make_room", make_room_with_one_throttled_read)
    send(broker, notification())
    assert deliver(functions, broker)  # the 429 inside make_room: copied and completed
    assert broker.dead_letters(ORDERS_QUEUE) == []
    assert ctx.deferrals.get("p1").absent_checked_at is None  # the look was cut short: the period is not used up
    clock.advance(STORE_RETRY_DELAYS[0] + timedelta(seconds=1))
    deliver_all(functions, broker)  # the copy
    # expected: the gone entries are looked for again (the look never finished) and the copy is recorded
    assert [d.reason for d in broker.dead_letters(ORDERS_QUEUE)] == [], (
        "the real notification was dead-lettered TooManyDeferred: the unfinished look's stamp blocked the copy's"
    )
    assert len(deferred_sequence_numbers(broker)) == 1


def test_make_room_reports_expired_an_original_whose_store_retry_copy_is_on_its_way(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """n-1 is recorded before its order exists, the host stops before its look again is sent; its redelivery
    meets a state store failure and is copied (scheduled 10 s later) and completed. Within those 10 s another
    notification finds the order's list full: make_room peeks the original's number, finds it gone and the
    state record without the payment, and marks it Expired with a DeferredMessageExpired alert ("left the
    queue before it could be applied") although its copy is scheduled and is applied when the order comes."""
    import submission.payments as payments
    from tests.contexts import context_with
    from tests.deferral.test_redelivery_resolves_its_recorded_entry import fails
    from tests.fakes import StateStoreThatFails

    entries_gone_from_the_queue(ctx, "p1", range(9000, 9000 + 19), DeferralReason.ORDER_NOT_SUBMITTED)
    send(broker, notification())
    monkeypatch.setattr(payments, "schedule_look_again", fails(RuntimeError("host stopped")))
    with pytest.raises(RuntimeError):
        deliver(functions, broker)
    monkeypatch.undo()
    original = next(e for e in ctx.deferrals.get("p1").waiting() if e.notification_id == "n-1")
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))
    down = context_with(ctx, states=StateStoreThatFails(ctx.states, "get"))
    assert deliver(functions, broker)  # the redelivery: copied (10 s), completed
    context_with(down, states=ctx.states)
    assert [m.state.name for m in broker.peek(ORDERS_QUEUE, 100)] == ["SCHEDULED"]  # the copy, a new number

    send(broker, notification(notification_id="n-2", amount=1), message_id="n-2")  # a stray one
    assert deliver(functions, broker)  # the list is full: make_room looks for every waiting message
    expired = [a["details"]["sequenceNumber"] for a in alerts(broker) if a["kind"] == "DeferredMessageExpired"]
    clock.advance(timedelta(seconds=11))
    send(broker, order())
    deliver_all(functions, broker)
    assert ctx.states.get("p1").payment.notification_id == "n-1"  # the copy was applied after all
    assert ctx.deferrals.get("p1").entry(original.sequence_number).status is EntryStatus.APPLIED
    assert original.sequence_number not in expired, (
        f"DeferredMessageExpired raised for #{original.sequence_number}, whose copy was on its way and was applied"
    )


def test_a_conflicting_copy_dead_letters_the_real_payment_waiting_under_a_legacy_entry(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """Pre-existing (settle_copied_original), carried into settle_decided and, by HEAD~1, into copies fetched by
    number: an entry recorded before digests were kept (notificationDigest "") is matched by notificationId
    alone. The real n-1 waits for its RetryDeferred under such an entry; a message saying n-1 with another amount
    and an application property storeRetryRound=1 (a client may set any property; or a genuine conflicting
    notification copied after a store blip) is rejected on delivery, and settle_decided(copy=True) marks the
    real one's entry DeadLettered. Its retry then completes without fetching it, and the sweep dead-letters the
    real payment 'PaymentAmountMismatch' as recorded: no alert names it (the alert was for the other digest)."""
    import json

    from adapters.servicebus.sender import OutgoingMessage
    from deferral.sweep import peek_sweep
    from tests.deferral.support import deferred_for_the_order_database

    orders, with_orders = deferred_for_the_order_database(functions, ctx, broker)
    doc = with_orders.deferrals.get("p1")
    [real] = doc.entries
    legacy = dataclasses.replace(real, notification_digest="")  # recorded by a version before digests
    with_orders.deferrals.save(dataclasses.replace(doc, entries=[legacy]))
    orders.failing = False
    broker.send(
        ORDERS_QUEUE,
        OutgoingMessage(
            body=json.dumps(notification(amount=1)),
            message_id="other",
            application_properties={"storeRetryRound": 1},
        ),
    )
    assert deliver(functions, broker)  # the other n-1: PaymentAmountMismatch, dead-lettered
    clock.advance(with_orders.settings.defer_retry_delay + timedelta(seconds=1))
    deliver_all(functions, broker)  # the real one's RetryDeferred
    clock.advance(with_orders.settings.peek_sweep_age * 2)
    peek_sweep(with_orders)
    assert with_orders.states.get("p1").payment is not None, (
        f"the real n-1 (#{real.sequence_number}) was never applied; entry: "
        f"{with_orders.deferrals.get('p1').entry(real.sequence_number).status}, dead letters: "
        f"{[(d.message_id, d.reason) for d in broker.dead_letters(ORDERS_QUEUE)]}"
    )
