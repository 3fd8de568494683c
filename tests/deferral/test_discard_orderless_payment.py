"""An operator discards a payment notification deferred for an order nobody submitted (``deferral.discard``), after
refunding it: before, nothing in the app did, so it waited its 14 days, the peek sweep re-read it every run and
reported it expired at the end, and an order submitted under its id meanwhile took it and captured against the
refunded reference. Through the registered ``submit_order`` trigger, the in-process broker (real deferral, peek
and dead-letter semantics) and the Cosmos protocol server."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest

from adapters.servicebus.deferred import ReceiveError
from contracts.names import ORDERS_QUEUE
from deferral.discard import discard_deferred
from deferral.sweep import ORDERLESS_ALERT, peek_sweep
from domain import transitions
from domain.deferral import DISCARDED, EntryStatus
from settings import Settings
from tests.contexts import context_with, while_using
from tests.deferral.conftest import ORDERS_TTL
from tests.deferral.support import (
    DurableClientStub,
    alerts,
    deferred_sequence_numbers,
    deliver,
    deliver_all,
    notification,
    order,
    send,
)

pytestmark = pytest.mark.cosmos

OPERATOR = "ops@contoso.example"
REASON = "refunded at the provider, ticket 4711"


def orderless(functions: Any, ctx: Any, broker: Any, clock: Any) -> tuple[Any, int]:
    """p1's notification deferred for an order nobody submitted, and told to an operator (``PaymentWithoutOrder``)."""
    ctx = context_with(ctx, settings=Settings.from_env({}, ORDERLESS_PAYMENT_ALERT_MINUTES="20"))
    send(broker, notification())
    deliver_all(functions, broker)
    [seq] = deferred_sequence_numbers(broker)
    clock.advance(timedelta(minutes=21))
    deliver_all(functions, broker)  # its look again, due long ago: the order has not come
    assert peek_sweep(ctx).alerted == 1
    return ctx, seq


def dead_letter_of(broker: Any, seq: int) -> Any:
    [dead] = [d for d in broker.dead_letters(ORDERS_QUEUE) if d.sequence_number == seq]
    return dead


def test_a_discarded_payment_is_dead_lettered_never_re_read_never_expired_and_never_taken_by_a_later_order(
    functions, ctx, broker, clock
):
    ctx, seq = orderless(functions, ctx, broker, clock)

    done = discard_deferred(ctx, "p1", seq, OPERATOR, REASON)

    assert (done.outcome, done.dead_lettered) == ("discarded", True)
    dead = dead_letter_of(broker, seq)  # in the dead-letter queue, not completed: nothing lost
    assert dead.reason == DISCARDED
    assert OPERATOR in dead.description and REASON in dead.description
    entry = ctx.deferrals.get("p1").entry(seq)
    assert entry.status is EntryStatus.DEAD_LETTERED
    assert (entry.discarded_by, entry.discard_reason) == (OPERATOR, REASON)
    assert deferred_sequence_numbers(broker) == []

    # the sweep no longer sees it, and past its time to live nothing reports it expired
    clock.advance(ORDERS_TTL + timedelta(minutes=5))
    report = peek_sweep(ctx)
    assert (report.deferred_seen, report.expired, report.alerted) == (0, 0, 0)
    assert [a["kind"] for a in alerts(broker)] == [ORDERLESS_ALERT]

    # an order submitted under its id afterwards does not take it: it waits for a payment of its own
    client = DurableClientStub()
    send(broker, order())
    assert deliver(functions, broker, client)
    deliver_all(functions, broker)
    record = ctx.states.get("p1")
    assert record is not None and record.payment is None
    [(_, _, started)] = client.started
    assert "psp-n-1" not in repr(started)
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEAD_LETTERED
    assert dead_letter_of(broker, seq).reason == DISCARDED


def test_the_same_discard_posted_again_is_a_repeat_and_another_operators_is_refused(functions, ctx, broker, clock):
    ctx, seq = orderless(functions, ctx, broker, clock)
    assert discard_deferred(ctx, "p1", seq, OPERATOR, REASON).outcome == "discarded"

    again = discard_deferred(ctx, "p1", seq, OPERATOR, REASON)
    assert (again.outcome, again.dead_lettered) == ("repeated", False)
    other = discard_deferred(ctx, "p1", seq, "someone@contoso.example", REASON)
    assert other.outcome == "refused" and "DeadLettered already" in other.why and OPERATOR in other.why
    assert [d.sequence_number for d in broker.dead_letters(ORDERS_QUEUE)] == [seq]
    assert discard_deferred(ctx, "p1", seq + 1000, OPERATOR, REASON).outcome == "unknown"
    assert discard_deferred(ctx, "nobody", seq, OPERATOR, REASON).outcome == "unknown"


def test_a_payment_whose_order_exists_is_applied_not_discarded(functions, ctx, broker, clock):
    ctx, seq = orderless(functions, ctx, broker, clock)
    # the order's state record is written; its submission has not looked for the notification yet
    ctx.states.create(transitions.new_record("p1", None, clock.now()))

    done = discard_deferred(ctx, "p1", seq, OPERATOR, REASON)

    assert done.outcome == "order-exists" and "applied to it" in done.why
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEFERRED
    assert deferred_sequence_numbers(broker) == [seq]


def test_a_payment_whose_submission_was_dead_lettered_after_writing_its_order_document_is_discarded(
    functions, ctx, broker, clock
):
    """The submission wrote the order document, then met an hour of store failures writing the state record and was
    dead-lettered: the payment is the alert's (``PaymentWithoutOrder``: a submission in the dead-letter queue). The
    first version took the order document for an order being submitted and refused every such discard (a simulation
    of 45 % throttling: 9 refused, none done)."""
    ctx, seq = orderless(functions, ctx, broker, clock)
    ctx.orders.create_or_verify({"id": "p1", "orderId": "p1", "totalCents": 2500, "currency": "EUR"})

    done = discard_deferred(ctx, "p1", seq, OPERATOR, REASON)

    assert (done.outcome, done.dead_lettered) == ("discarded", True)
    assert dead_letter_of(broker, seq).reason == DISCARDED


class FailingFetch:
    """The broker's deferred store, whose receivers fail every fetch by sequence number (Service Bus unreachable
    after the discard was written: as a crash between the write and the dead-lettering)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    @contextmanager
    def open(self, queue: str) -> Iterator[Any]:
        with self.inner.open(queue) as receiver:
            yield Failing(receiver)


class Failing:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def receive_deferred(self, sequence_numbers: Sequence[int]) -> list[Any]:
        raise ReceiveError("receive_deferred: the connection was lost")


def test_a_discard_written_but_not_dead_lettered_is_dead_lettered_as_recorded_by_the_sweep(
    functions, ctx, broker, clock
):
    ctx, seq = orderless(functions, ctx, broker, clock)
    with while_using(ctx, deferred=FailingFetch(broker.deferred_store)) as failing, pytest.raises(ReceiveError):
        discard_deferred(failing, "p1", seq, OPERATOR, REASON)
    # written first: nothing applies it any more, and its message still waits, deferred
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEAD_LETTERED
    assert deferred_sequence_numbers(broker) == [seq]

    send(broker, order())  # an order submitted now does not take it
    deliver_all(functions, broker)
    assert ctx.states.get("p1").payment is None

    clock.advance(timedelta(minutes=1))
    peek_sweep(ctx)  # a resolved entry whose message is still deferred: settled as recorded
    assert dead_letter_of(broker, seq).reason == DISCARDED
    assert OPERATOR in dead_letter_of(broker, seq).description
    assert ctx.states.get("p1").payment is None


def test_the_same_discard_posted_again_finishes_the_dead_lettering(functions, ctx, broker, clock):
    ctx, seq = orderless(functions, ctx, broker, clock)
    with while_using(ctx, deferred=FailingFetch(broker.deferred_store)) as failing, pytest.raises(ReceiveError):
        discard_deferred(failing, "p1", seq, OPERATOR, REASON)

    again = discard_deferred(ctx, "p1", seq, OPERATOR, REASON)

    assert (again.outcome, again.dead_lettered) == ("repeated", True)
    assert dead_letter_of(broker, seq).reason == DISCARDED


def test_a_message_gone_from_the_queue_is_accounted_for_and_not_discarded(functions, ctx, broker, clock):
    ctx, seq = orderless(functions, ctx, broker, clock)
    with broker.deferred_store.open(ORDERS_QUEUE) as receiver:  # gone by another way (removed by hand, say)
        [message] = receiver.receive_deferred([seq])
        receiver.dead_letter(message, "RemovedByHand", "")

    done = discard_deferred(ctx, "p1", seq, OPERATOR, REASON)

    assert done.outcome == "refused" and "not on the orders queue (expired)" in done.why
    entry = ctx.deferrals.get("p1").entry(seq)
    assert entry.status is EntryStatus.EXPIRED and entry.discarded_by == ""  # the truth: it left the queue
    assert dead_letter_of(broker, seq).reason == "RemovedByHand"


def test_a_message_past_its_time_to_live_is_not_discarded(functions, ctx, broker, clock):
    ctx, seq = orderless(functions, ctx, broker, clock)
    clock.advance(ORDERS_TTL)

    done = discard_deferred(ctx, "p1", seq, OPERATOR, REASON)

    assert done.outcome == "refused" and "expired at" in done.why
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEFERRED  # the sweep reports it, as before
    peek_sweep(ctx)
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.EXPIRED


class SubmitsAround:
    """The deferral log, where the order's submission is delivered at the discard's write: ``before`` it (the
    submission read the entry waiting and applies it), or right ``after`` it (its state record written before the
    discard looks for the order again)."""

    def __init__(self, inner: Any, seq: int, submit: Any, when: str) -> None:
        self.inner, self.seq, self.submit, self.when, self.done = inner, seq, submit, when, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def save(self, doc: Any) -> Any:
        entry = doc.entry(self.seq)
        mine = entry is not None and entry.discarded_by == OPERATOR and not self.done
        if mine and self.when == "before":
            self.done = True
            self.submit()
        saved = self.inner.save(doc)
        if mine and self.when == "after":
            self.done = True
            self.submit()
        return saved


def discard_racing(ctx: Any, seq: int, log_at_the_race: Any) -> Any:
    """The discard of ``seq`` run over ``log_at_the_race`` (the deferral log wrapped to race it); ``ctx`` keeps the
    plain log."""
    return discard_deferred(context_with(ctx, deferrals=log_at_the_race), "p1", seq, OPERATOR, REASON)


def submit_order(functions: Any, broker: Any) -> None:
    send(broker, order())
    deliver_all(functions, broker)


@pytest.mark.parametrize("when", ["before", "after"])
def test_an_order_submitted_while_the_discard_is_written_takes_its_payment(functions, ctx, broker, clock, when):
    ctx, seq = orderless(functions, ctx, broker, clock)

    done = discard_racing(ctx, seq, SubmitsAround(ctx.deferrals, seq, lambda: submit_order(functions, broker), when))

    assert done.outcome in ("order-exists", "refused"), done
    assert not [d for d in broker.dead_letters(ORDERS_QUEUE) if d.reason == DISCARDED]
    if when == "before":  # the submission applied it: its Applied stands
        assert ctx.states.get("p1").payment.sequence_number == seq
        assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
        return
    # the submission found it discarded and left it; the discard, finding the order, took itself back: it waits
    # again, and the peek sweep applies it to its order
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEFERRED
    assert "taken back" in done.why
    clock.advance(timedelta(minutes=1))
    assert peek_sweep(ctx).recovered == 1
    assert ctx.states.get("p1").payment.sequence_number == seq


def test_a_discard_dead_lettered_as_recorded_before_it_could_be_taken_back_stands_and_says_so(
    functions, ctx, broker, clock
):
    """Between the discard's write and its second look for the order, the order is submitted (it leaves the entry,
    resolved) and the peek sweep, finding the entry resolved and its message deferred, dead-letters it as recorded:
    taking the discard back would leave an entry waiting for a message in the dead-letter queue."""
    ctx, seq = orderless(functions, ctx, broker, clock)

    def submit_and_sweep() -> None:
        submit_order(functions, broker)
        peek_sweep(ctx)

    done = discard_racing(ctx, seq, SubmitsAround(ctx.deferrals, seq, submit_and_sweep, "after"))

    assert (done.outcome, done.dead_lettered) == ("recorded", False)
    assert "discard stands" in done.why and "resubmit" in done.why
    assert dead_letter_of(broker, seq).reason == DISCARDED
    entry = ctx.deferrals.get("p1").entry(seq)
    assert entry.status is EntryStatus.DEAD_LETTERED and entry.discarded_by == OPERATOR
    assert ctx.states.get("p1").payment is None


def test_discarding_a_store_retry_copy_resolves_its_original_waiting_for_the_same_notification(
    functions, ctx, broker, clock
):
    """The notification deferred on its last allowed delivery is dead-lettered by that defer and handed over as a
    store-retry copy (``test_deferred_on_its_last_delivery.py``): two entries wait, the original's (its message in
    the dead-letter queue) and the copy's, which the alert names. Discarding the copy resolves the original in the
    same write; before, the original waited on and the order submitted later reported it ``DeferredMessageExpired``
    to the operator who had just discarded it."""
    from tests.deferral.test_deferred_on_its_last_delivery import deferred_on_its_last_delivery

    ctx = context_with(ctx, settings=Settings.from_env({}, ORDERLESS_PAYMENT_ALERT_MINUTES="20"))
    original = deferred_on_its_last_delivery(functions, broker)
    for _ in range(3):  # the copy (10 s), deferred for the order in its turn; the original's look again
        clock.advance(ctx.settings.defer_retry_delay)
        deliver_all(functions, broker)
    [copy] = deferred_sequence_numbers(broker)
    assert copy > original
    assert {e.sequence_number for e in ctx.deferrals.get("p1").waiting()} == {original, copy}

    done = discard_deferred(ctx, "p1", copy, OPERATOR, REASON)

    assert (done.outcome, done.dead_lettered) == ("discarded", True)
    entries = {e.sequence_number: e for e in ctx.deferrals.get("p1").entries}
    assert entries[original].status is EntryStatus.DEAD_LETTERED
    assert entries[original].detail.startswith(f"{DISCARDED}: decided on its copy #{copy}")
    send(broker, order())
    deliver_all(functions, broker)
    clock.advance(ctx.settings.peek_sweep_age + timedelta(minutes=2))
    deliver_all(functions, broker)
    peek_sweep(ctx)
    assert ctx.states.get("p1").payment is None
    assert [a for a in alerts(broker) if a["kind"] == "DeferredMessageExpired"] == []
    assert dead_letter_of(broker, copy).reason == DISCARDED


def test_a_discard_whose_payment_a_submission_applied_meanwhile_says_so_and_does_not_stand(
    functions, ctx, broker, clock
):
    """The order's submission wrote its state record and read the entry waiting just before the discard's write, then
    applied the payment (``Applied`` replaces the discard, as the truth about a payment) and completed its message,
    all before the discard's second look. Found the order and the message gone, the discard answered that it stood,
    its message dead-lettered as discarded (and logged ``DeferredDiscarded``), while the order had taken the payment
    and its message was completed: the operator was told the opposite of what happened."""
    import json

    from contracts.messages import OrderSubmitted
    from contracts.parsing import parse
    from deferral.recovery import recover_for_order

    ctx, seq = orderless(functions, ctx, broker, clock)
    read_before = ctx.deferrals.get("p1")  # what the submission read, the entry waiting

    def submission_applies_what_it_read() -> None:
        submitted = parse(json.dumps(order()).encode(), {"OrderSubmitted": OrderSubmitted})
        ctx.orders.create_or_verify(submitted.order_document())
        ctx.states.create(transitions.new_record("p1", None, clock.now()))
        recovered = recover_for_order(ctx, "p1", read_before, [])
        assert recovered.applied == 1

    done = discard_racing(ctx, seq, SubmitsAround(ctx.deferrals, seq, submission_applies_what_it_read, "after"))

    assert ctx.states.get("p1").payment.sequence_number == seq
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    assert not [d for d in broker.dead_letters(ORDERS_QUEUE) if d.reason == DISCARDED]
    assert done.outcome == "order-exists", done
    assert "applied" in done.why and "stands" not in done.why
    assert done.entry is not None and done.entry.status is EntryStatus.APPLIED


def test_discarding_the_original_of_a_waiting_store_retry_copy_names_the_copy_and_pages_nobody(
    functions, ctx, broker, clock
):
    """Both entries of one notification wait, the original's (its message dead-lettered by the defer on its last
    delivery) and its store-retry copy's, and the console offers a Discard on each. The original's, discarded first,
    was accounted for as a message gone: resolved ``Expired`` and a ``DeferredMessageExpired`` alert paged for a
    payment whose copy still waited (the false alert the discard of a copy resolves its originals to avoid)."""
    from tests.deferral.test_deferred_on_its_last_delivery import deferred_on_its_last_delivery

    ctx = context_with(ctx, settings=Settings.from_env({}, ORDERLESS_PAYMENT_ALERT_MINUTES="20"))
    original = deferred_on_its_last_delivery(functions, broker)
    for _ in range(3):
        clock.advance(ctx.settings.defer_retry_delay)
        deliver_all(functions, broker)
    [copy] = deferred_sequence_numbers(broker)
    clock.advance(ctx.settings.peek_sweep_age + timedelta(minutes=1))  # both entries old: what the alert came after

    done = discard_deferred(ctx, "p1", original, OPERATOR, REASON)

    assert done.outcome == "refused" and f"#{copy}" in done.why, done
    assert [a for a in alerts(broker) if a["kind"] == "DeferredMessageExpired"] == []
    entries = {e.sequence_number: e for e in ctx.deferrals.get("p1").entries}
    assert entries[original].status is EntryStatus.DEFERRED
    assert entries[copy].status is EntryStatus.DEFERRED
    # the copy, discarded as the answer says, takes its original with it
    assert discard_deferred(ctx, "p1", copy, OPERATOR, REASON).outcome == "discarded"
    assert ctx.deferrals.get("p1").entry(original).status is EntryStatus.DEAD_LETTERED
    assert [a for a in alerts(broker) if a["kind"] == "DeferredMessageExpired"] == []


class SweepSettlesAtTheTakeBack:
    """The deferral log where the order's submission is delivered right after the discard's write (it finds the entry
    discarded and leaves it), and the peek sweep, which read the entry discarded before the discard took itself back,
    dead-letters its message as recorded right after the take-back's write."""

    def __init__(self, inner: Any, seq: int, broker: Any, submit: Any) -> None:
        self.inner, self.seq, self.broker, self.submit = inner, seq, broker, submit
        self.discarded: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def save(self, doc: Any) -> Any:
        from deferral.apply import settle_as_recorded

        entry = doc.entry(self.seq)
        saved = self.inner.save(doc)
        if entry is not None and entry.discarded_by == OPERATOR and self.discarded is None:
            self.discarded = entry
            self.submit()
        elif entry is not None and entry.status is EntryStatus.DEFERRED and self.discarded is not None:
            with self.broker.deferred_store.open(ORDERS_QUEUE) as receiver:  # the sweep, as it read the entry
                assert settle_as_recorded(receiver, self.discarded)
        return saved


def test_a_discard_whose_message_the_sweep_dead_lettered_as_it_was_taken_back_stands_and_says_so(
    functions, ctx, broker, clock
):
    """Taken back (its order found), the discard left the entry waiting while the peek sweep, which had read it
    discarded, dead-lettered its message ``DiscardedByOperator``: the payment was in the dead-letter queue, its entry
    waiting for a message that was gone (the order waiting for a payment that never came), and the operator was told
    409, the payment applied to the order. The discard looks at the queue again after the take-back."""
    ctx, seq = orderless(functions, ctx, broker, clock)

    done = discard_racing(
        ctx, seq, SweepSettlesAtTheTakeBack(ctx.deferrals, seq, broker, lambda: submit_order(functions, broker))
    )

    assert dead_letter_of(broker, seq).reason == DISCARDED
    entry = ctx.deferrals.get("p1").entry(seq)
    assert entry.status is EntryStatus.DEAD_LETTERED and entry.discarded_by == OPERATOR, entry
    assert (done.outcome, done.dead_lettered) == ("recorded", False), done
    assert "discard stands" in done.why and "resubmit" in done.why
