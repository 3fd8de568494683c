"""Red team of the last store-retry round's hand-over (``submission.intake._hand_over``, merge 426960f): inputs
and interleavings under which a message completed after its last round, or handed to a later round, could drop
what it carried. Through the registered trigger, the in-process broker and the Cosmos protocol server."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.deferral_store import DeferralLog
from adapters.cosmos.errors import StoreUnavailable
from contracts.names import ORDERS_QUEUE, PAYMENT_NOTIFIED_EVENT, STATE_CONTAINER
from deferral.sweep import peek_sweep
from domain import deferral
from domain.deferral import DeferralDocument, EntryStatus
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import context_with
from tests.deferral import test_last_round_left_to_others
from tests.deferral.support import (
    DurableClientStub,
    alerts,
    deferred_for_the_order_database,
    deferred_sequence_numbers,
    deliver,
    deliver_all,
    notification,
    order,
)
from tests.deferral.test_payment_paths import begin_payment_step
from tests.deferral.test_refusal_written_first import submit
from tests.deferral.test_submission_handed_over_at_its_last_round import (
    FLAG,
    LAST,
    dead_letter_reasons,
    refused_then_resubmitted,
    submit_in_round,
)
from tests.fakes import StateStoreThatFails

pytestmark = pytest.mark.cosmos

broker = test_last_round_left_to_others.broker  # orders keeps a message 14 days, as the Bicep's queue does


class SavesThrottled:
    """The deferral log, except that a save of a document ``throttled`` says is answered with a 429 past the SDK's
    retries."""

    def __init__(self, log: DeferralLog, throttled: Callable[[DeferralDocument], bool]) -> None:
        self._log, self._throttled = log, throttled

    def get(self, order_id: str) -> DeferralDocument | None:
        return self._log.get(order_id)

    def save(self, doc: DeferralDocument) -> DeferralDocument:
        if self._throttled(doc):
            raise StoreUnavailable(f"deferral log: 429 on save of {doc.order_id}")
        return self._log.save(doc)


def flag_write(doc: DeferralDocument) -> bool:
    """The write taking the notifications listed under a refusal off the document (``notifications_flagged``,
    after their ``NotificationsForAcceptedOrder`` alert went out)."""
    return not doc.to_flag()


@pytest.mark.parametrize("round_number", [LAST, LAST - 1])
def test_a_payment_a_duplicate_submission_applied_reaches_the_waiting_payment_step_though_a_later_write_failed(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any, round_number: int
) -> None:
    """Input: n-0 dead-lettered under a refusal of p1 (listed); M2 accepted, its record created in round
    ``round_number`` while n-1 waited for the order, applying n-1 failing; the attempt p1:1 begins its prepaid
    payment step and waits for the notification. M2's redelivery applies n-1, raises the alert naming n-0, and the
    write taking n-0 off the document is throttled.

    Expected: the ``PaymentNotified`` event of n-1 is raised to p1:1 (completed in the last round, a copy before).
    Before: dropped with the hand-over's ``Recovery()`` (or the store failure's copy): n-1 was on the record, its
    entry resolved, so nothing raised it again; the step waited out its deadline for a payment it had."""
    _, n1, failing, with_failing = refused_then_resubmitted(functions, ctx, broker, monkeypatch, round_number)
    failing.failing = {"replace"}
    clock.advance(STORE_RETRY_DELAYS[round_number - 1])
    while ctx.states.get("p1") is None:  # n-1's look again, then the copy: the record created, n-1 not applied
        assert deliver(functions, broker)
    failing.failing = set()
    assert "payment" not in begin_payment_step(with_failing)  # p1:1 waits for the notification

    context_with(with_failing, deferrals=SavesThrottled(ctx.deferrals, flag_write))
    client = DurableClientStub()
    assert deliver(functions, broker, client)  # the redelivery of the copy
    assert ctx.states.get("p1").payment.sequence_number == n1
    assert ctx.deferrals.get("p1").entry(n1).status is EntryStatus.APPLIED
    assert [a["kind"] for a in alerts(broker)].count(FLAG) == 1
    [(instance, event, data)] = client.raised
    assert (instance, event, data["notificationId"]) == ("p1:1", PAYMENT_NOTIFIED_EVENT, "n-1")
    assert dead_letter_reasons(broker) == ["OrderRejected"]
    copies = [m.message_id for m in broker.peek(ORDERS_QUEUE, 100) if m.state.name != "DEFERRED"]
    assert [c.split(":store-retry:")[-1].split(":")[0] for c in copies] == ([] if round_number == LAST else [f"{LAST}"])


class ReadFailsFrom:
    """The state store, except that its ``get`` answers a 429 past the SDK's retries from the ``nth`` call on."""

    def __init__(self, store: Any, nth: int) -> None:
        self._store, self.calls, self.nth = store, 0, nth

    def get(self, order_id: str) -> Any:
        self.calls += 1
        if self.calls >= self.nth:
            raise StoreUnavailable(f"state store: 429 on read of {order_id}")
        return self._store.get(order_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@pytest.mark.parametrize("round_number", [0, LAST])
def test_a_payment_a_duplicate_submission_applied_reaches_the_waiting_step_though_the_record_could_not_be_read_again(
    functions: Any, ctx: Any, broker: Any, round_number: int
) -> None:
    """Input: n-1 waits for p1; p1's submission creates the record, applying n-1 failing (abandoned); the attempt
    p1:1 begins its payment step and waits. The submission's redelivery (a duplicate now) applies n-1, and the
    read of the record again after it (for whether ``Received`` is owed) is throttled.

    Expected: the ``PaymentNotified`` event of n-1 reaches p1:1 and the message is completed (the record as read
    before decides ``Received``, as when nothing was applied). Before: the failed read handed the message to a
    store-retry copy (in its last round abandoned it: a dead letter after five), the event dropped with it."""
    submit(broker, notification(), "n-1")
    assert deliver(functions, broker)
    [n1] = deferred_sequence_numbers(broker)
    with_failing = context_with(ctx, states=StateStoreThatFails(ctx.states, "replace"))
    submit_in_round(broker, order(), round_number, "p1")
    assert deliver(functions, broker)  # the record created, n-1 not applied: abandoned
    assert "payment" not in begin_payment_step(ctx)

    context_with(
        with_failing, states=ReadFailsFrom(ctx.states, 3)
    )  # the delivery's read, apply's read, then the read again
    client = DurableClientStub()
    assert deliver(functions, broker, client)
    assert ctx.states.get("p1").payment.sequence_number == n1
    [(instance, event, _)] = client.raised
    assert (instance, event) == ("p1:1", PAYMENT_NOTIFIED_EVENT)
    assert [m.subject for m in broker.peek(ORDERS_QUEUE, 100) if m.state.name != "DEFERRED"] == ["RetryDeferred"]
    assert dead_letter_reasons(broker) == []


def test_a_retry_whose_deferral_document_this_version_cannot_read_for_an_hour_is_still_dead_lettered(
    functions: Any, ctx: Any, broker: Any, clock: Any, cosmos_db: Any
) -> None:
    """Input: n-1 deferred while the order database is down (its round 1 retry scheduled); then its order's deferral
    document holds what this version cannot read (a newer version's entry reason, written before a rollback) for
    longer than the store-retry rounds.

    Expected: the retry's last copy is abandoned until Service Bus dead-letters it ``MaxDeliveryCountExceeded``, as
    before the last-round hand-over: the dead-letter watch pages. The peek sweep cannot read that document either
    (it skips the message, a warning in its log, no alert), so completed (``IntakeLeftToSweep``, a store failure's
    hand-over) the payment waited deferred with nobody told."""
    orders, _ = deferred_for_the_order_database(functions, ctx, broker)
    [seq] = deferred_sequence_numbers(broker)
    orders.failing = False
    state = cosmos_db.get_container_client(STATE_CONTAINER)
    item = state.read_item(deferral.document_id("p1"), partition_key="p1")
    newer = {k: v for k, v in item.items() if not k.startswith("_")}
    newer["entries"] = [{**newer["entries"][0], "reason": "AwaitingFraudCheck"}]
    state.replace_item(newer["id"], newer)
    for _ in range(len(STORE_RETRY_DELAYS) + 5):
        clock.advance(timedelta(minutes=1))
        deliver_all(functions, broker)
    assert dead_letter_reasons(broker) == ["MaxDeliveryCountExceeded"]
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert json.loads(dead.body)["type"] == "RetryDeferred"
    assert deferred_sequence_numbers(broker) == [seq]
    assert peek_sweep(ctx).failed == 1  # the sweep cannot read the document: nothing it does tells anyone


@pytest.mark.parametrize("round_number", [0, LAST])
def test_a_payment_applied_before_another_waiting_notification_failed_still_reaches_the_waiting_step(
    functions: Any, ctx: Any, broker: Any, round_number: int
) -> None:
    """Input: n-1 and then n-2 (a second payment) wait for p1; p1's submission creates the record, applying them
    failing (abandoned); the attempt p1:1 begins its payment step and waits. The redelivery applies n-1, rejects n-2
    (``PaymentAlreadyReceived``), and the write resolving n-2's entry is throttled.

    Expected: n-1's ``PaymentNotified`` reaches p1:1 (the message handed over in its last round, a copy before); n-2
    is left deferred, its entry waiting, for whoever decides it next. Before: the event was dropped with the
    failure (raised out of the recovery before it returned)."""
    submit(broker, notification(), "n-1")
    submit(broker, notification(notification_id="n-2"), "n-2")
    assert deliver(functions, broker) and deliver(functions, broker)
    n1, n2 = deferred_sequence_numbers(broker)
    with_failing = context_with(ctx, states=StateStoreThatFails(ctx.states, "replace"))
    submit_in_round(broker, order(), round_number, "p1")
    assert deliver(functions, broker)
    assert "payment" not in begin_payment_step(ctx)

    def resolving_n2(doc: DeferralDocument) -> bool:
        entry = doc.entry(n2)
        return entry is not None and entry.status is EntryStatus.DEAD_LETTERED

    context_with(with_failing, states=ctx.states, deferrals=SavesThrottled(ctx.deferrals, resolving_n2))
    client = DurableClientStub()
    assert deliver(functions, broker, client)
    assert ctx.states.get("p1").payment.sequence_number == n1
    assert [(i, e) for i, e, _ in client.raised] == [("p1:1", PAYMENT_NOTIFIED_EVENT)]
    assert ctx.deferrals.get("p1").entry(n2).status is EntryStatus.DEFERRED
    assert deferred_sequence_numbers(broker) == [n2]
    assert dead_letter_reasons(broker) == []
