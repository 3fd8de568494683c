"""An OrderSubmitted the pending cap (``MAX_PENDING``) refuses: the refusal is written (the order's deferral
document marked rejected, naming the message, and the notifications waiting for it released) before anyone
is told, and whatever handles the same message again finishes it; any other submission is judged afresh.
Through the registered trigger, the in-process broker and Cosmos.

Found by a fault-profile fuzzer (``localrun simulate``): with sends failing (30 %), a refused order's
``OrderRejected`` alert was lost (its send was only logged, and with no state record nothing sent it again:
``silent_failures``); with the state store failing (10 %), a refusal told to its submitter whose deferral
write failed was dead-lettered, leaving the notifications waiting for it deferred until their time to
live (``unmatched_notifications``, ``stranded_messages``)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE
from localrun.servicebus import InProcessBroker
from orchestrators.names import DELIVER_ALERT
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import context_with
from tests.deferral.support import DurableClientStub, alerts, deferred_sequence_numbers, deliver, notification, order
from tests.fakes import StateStoreThatFails
from tests.submission.test_redteam_store_outage_intake import SaveLandsThenFails

pytestmark = pytest.mark.cosmos


class Cap:
    """Whether the pending cap is full, as the test says (``submission.intake._pending_full``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, full: bool) -> None:
        self.full = full
        monkeypatch.setattr("submission.intake._pending_full", lambda ctx: self.full)


class SendsFailing:
    """The broker, except that the next ``times`` sends to ``queue`` fail (Service Bus unavailable)."""

    def __init__(self, broker: InProcessBroker, queue: str, times: int = 1) -> None:
        self.broker, self.queue, self.times = broker, queue, times

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue == self.queue and self.times > 0:
            self.times -= 1
            raise SendError(f"send to {queue!r} failed: ServiceCommunicationProblem")
        self.broker.send(queue, message)


class SettlementLost:
    """Message actions whose settlement never reaches Service Bus (the host stopped, the lock was lost)."""

    def complete(self, message: Any) -> None: ...

    def abandon(self, message: Any) -> None: ...

    def deadletter(self, message: Any, deadletter_reason: str | None = None, **_: Any) -> None: ...

    def defer(self, message: Any) -> None: ...


def submit(broker: InProcessBroker, body: dict[str, Any], message_id: str | None = None) -> None:
    broker.send(ORDERS_QUEUE, OutgoingMessage(body=json.dumps(body), message_id=message_id or body["orderId"]))


def told(broker: InProcessBroker, order_id: str = "p1") -> list[str]:
    updates = [json.loads(m.body) for m in broker.peek("client-statuses", 100)]
    return [u["status"] for u in updates if u["orderId"] == order_id]


def alert_kinds(broker: InProcessBroker) -> list[str]:
    return [a["kind"] for a in alerts(broker)]


def orders_waiting(broker: InProcessBroker) -> list[str]:
    """The types of the messages on ``orders`` neither deferred nor settled."""
    return [json.loads(m.body)["type"] for m in broker.peek(ORDERS_QUEUE, 100) if m.state.name != "DEFERRED"]


def test_a_refusal_whose_alert_cannot_be_sent_hands_it_to_the_courier_and_is_never_accepted(
    functions, ctx, broker, clock, monkeypatch
):
    """Expected: the refused order's operator alert is raised, whatever a send does, and its submitter is
    told ``Rejected`` (before the alert: an alert queue that keeps failing must not leave it untold); the
    message is never accepted later.
    Before: ``_reject`` sent ``Rejected``, then the alert with ``raise_alert_after_write``, which only logs a
    failed send (``AlertSendFailed``), and completed the message: with no state record, nothing ever sent the
    alert again (the fuzzer's ``silent_failures``: sends failing 30 %, ``max_pending`` 1). Then the failed send
    abandoned the message (later: handed it to a store-retry copy), which Service Bus failing on five deliveries
    wore out (``MaxDeliveryCountExceeded``, never alerted): now the alert goes to the alert courier
    (``test_refusal_alert_outlasts_the_delivery_count``). A redelivery (the settlement lost), the cap having
    room by then, finishes the refusal again: never accepted."""
    cap = Cap(monkeypatch, full=True)
    context_with(ctx, sender=SendsFailing(broker, OPERATOR_ALERTS_QUEUE))
    submit(broker, order())
    message = broker.receive(ORDERS_QUEUE)
    client = DurableClientStub()
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=message, message_actions=SettlementLost(), client=client))
    # the submitter is told first, then the alert's send fails: the alert goes to the courier, the refusal stands
    assert alert_kinds(broker) == [] and told(broker) == ["Rejected"]
    assert [(name, instance) for name, instance, _ in client.started] == [
        (DELIVER_ALERT, f"alert:OrderRejected:p1:{message.sequence_number}")
    ]
    assert ctx.deferrals.get("p1").refuses(message.sequence_number)  # written first

    cap.full = False  # the cap has room by the time the message comes again
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))
    assert deliver(functions, broker)
    assert alert_kinds(broker) == ["OrderRejected"]
    assert told(broker) == ["Rejected"]
    assert ctx.states.get("p1") is None and ctx.orders.get("p1") is None
    assert orders_waiting(broker) == [] and broker.dead_letters(ORDERS_QUEUE) == []  # completed


def test_a_refusal_whose_mark_cannot_be_written_tells_nobody_and_is_decided_again_later(
    functions, ctx, broker, clock, monkeypatch
):
    """Expected: a refusal that could not be written has promised nothing: nobody is told, the message is
    handled again later (a store-retry copy) and decided afresh; the cap has room by then, so the order is
    accepted and the payment notification waiting for it applied.
    Before: ``_reject`` told the submitter ``Rejected`` and raised the alert first, then failed to write the
    release, so the message was dead-lettered ``OrderRejected`` and the waiting notification stayed deferred
    until its time to live (the fuzzer's ``unmatched_notifications`` and ``stranded_messages``: the state
    store failing 10 %, prepaid orders whose notification comes first)."""
    submit(broker, notification(), "n-1")
    assert deliver(functions, broker)
    [waiting] = deferred_sequence_numbers(broker)
    cap = Cap(monkeypatch, full=True)
    down = context_with(ctx, deferrals=StateStoreThatFails(ctx.deferrals, "save"))
    submit(broker, order())
    assert deliver(functions, broker)
    assert told(broker) == [] and alert_kinds(broker) == []
    assert broker.dead_letters(ORDERS_QUEUE) == []
    assert ctx.deferrals.get("p1").rejected_at is None  # nothing written

    context_with(down, deferrals=ctx.deferrals)  # the store is back
    cap.full = False
    clock.advance(STORE_RETRY_DELAYS[0])
    while deliver(functions, broker):  # the copy, then the look-again the notification scheduled
        pass
    assert told(broker) == ["Received"]
    assert ctx.states.get("p1").payment.sequence_number == waiting
    assert deferred_sequence_numbers(broker) == []


def test_a_refusal_written_with_its_response_lost_is_finished_by_its_copy_even_with_room(
    functions, ctx, broker, clock, monkeypatch
):
    """Expected: once the refusal is written, it stands: the notification that was waiting is dead-lettered
    ``OrderRejected`` (alerted), and so is one that arrives meanwhile; the copy, handled when the cap has room,
    finishes the refusal (alert, ``Rejected``) instead of accepting an order whose payment was dead-lettered."""
    submit(broker, notification(), "n-1")
    assert deliver(functions, broker)
    cap = Cap(monkeypatch, full=True)
    lost = context_with(ctx, deferrals=SaveLandsThenFails(ctx.deferrals))
    submit(broker, order())
    assert deliver(functions, broker)
    assert told(broker) == [] and alert_kinds(broker) == []
    context_with(lost, deferrals=ctx.deferrals)

    submit(broker, notification(notification_id="n-2"), "n-2")  # while the copy waits: for a rejected order
    assert deliver(functions, broker)
    cap.full = False
    clock.advance(STORE_RETRY_DELAYS[0])
    while deliver(functions, broker):
        pass
    assert told(broker) == ["Rejected"]
    assert sorted(alert_kinds(broker)) == ["NotificationForRejectedOrder"] * 2 + ["OrderRejected"]
    assert [d.reason for d in broker.dead_letters(ORDERS_QUEUE)] == ["OrderRejected", "OrderRejected"]
    assert ctx.states.get("p1") is None and deferred_sequence_numbers(broker) == []


def test_a_redelivery_after_the_submitter_was_told_finishes_the_refusal_and_collapses(
    functions, ctx, broker, clock, monkeypatch
):
    """Expected: the submitter told ``Rejected`` never hears ``Received`` for the same message: its settlement
    lost (the host stopped, the lock expired), its redelivery finds the refusal and says the same again
    (the same status MessageId and alert id: duplicate detection keeps one of each). The trigger sees no
    delivery count (the Python SDK-type binding drops the AMQP header: localrun/servicebus/wire.py), so the
    refusal is known by the message's sequence number, read in the deferral document.
    Before: the redelivery, the cap having room, accepted the order."""
    cap = Cap(monkeypatch, full=True)
    submit(broker, order())
    message = broker.receive(ORDERS_QUEUE)
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=message, message_actions=SettlementLost(), client=DurableClientStub()))
    assert told(broker) == ["Rejected"] and alert_kinds(broker) == ["OrderRejected"]

    cap.full = False
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))
    assert deliver(functions, broker)  # the same message again
    assert told(broker) == ["Rejected"] and alert_kinds(broker) == ["OrderRejected"]
    assert ctx.states.get("p1") is None and orders_waiting(broker) == []


def test_a_copy_of_a_copy_still_finishes_the_refusal(functions, ctx, broker, clock, monkeypatch):
    """Every copy carries the sequence number of the message as its sender sent it: a copy made from a copy
    (the store failing again when the first copy came) is still known as the refused message."""
    cap = Cap(monkeypatch, full=True)
    lost = context_with(ctx, deferrals=SaveLandsThenFails(ctx.deferrals))
    submit(broker, order())
    assert deliver(functions, broker)  # written, its response lost: a copy
    reading = context_with(lost, deferrals=StateStoreThatFails(ctx.deferrals, "get"))
    clock.advance(STORE_RETRY_DELAYS[0])
    assert deliver(functions, broker)  # the copy cannot read the document: a copy of the copy
    context_with(reading, deferrals=ctx.deferrals)
    assert told(broker) == []

    cap.full = False
    clock.advance(STORE_RETRY_DELAYS[1])
    assert deliver(functions, broker)
    assert told(broker) == ["Rejected"] and alert_kinds(broker) == ["OrderRejected"]
    assert ctx.states.get("p1") is None


def test_a_new_submission_of_a_refused_order_is_judged_afresh_even_under_the_same_message_id(
    functions, ctx, broker, clock, monkeypatch
):
    """A new message for a refused order ("submit again later", says its status) is another submission,
    judged afresh, even under the same MessageId (docs/deploy.md: an order's is its order id), sent again
    past duplicate detection's 10 minutes: accepted when the cap has room, which withdraws the refusal."""
    cap = Cap(monkeypatch, full=True)
    submit(broker, order())
    assert deliver(functions, broker)
    assert told(broker) == ["Rejected"]

    cap.full = False
    clock.advance(broker.policy(ORDERS_QUEUE).duplicate_detection_window + timedelta(seconds=1))
    submit(broker, order())
    assert deliver(functions, broker)
    assert told(broker) == ["Rejected", "Received"]
    assert ctx.states.get("p1") is not None
    doc = ctx.deferrals.get("p1")
    assert doc.rejected_at is None  # withdrawn; the refused message is still named (never accepted later)


def test_a_payment_for_an_accepted_resubmission_waits_for_it_instead_of_being_dead_lettered(
    functions, ctx, broker, clock, monkeypatch
):
    """Expected: once a submission of the order is accepted, its notifications are applied to it. One that
    arrives while the accepted submission is being written (here: its state record's create failed, a copy
    due later) waits for it.
    Before: the refusal of the first submission stayed on the deferral document (``rejectedAt``), so the
    notification found no state record and was dead-lettered ``OrderRejected``: a prepaid order accepted
    without its payment."""
    cap = Cap(monkeypatch, full=True)
    submit(broker, order())
    assert deliver(functions, broker)
    cap.full = False

    creating = context_with(ctx, states=StateStoreThatFails(ctx.states, "create"))
    submit(broker, order(), "p1:again")
    assert deliver(functions, broker)  # accepted, its record not written yet: a copy
    submit(broker, notification(), "n-1")
    assert deliver(functions, broker)
    assert broker.dead_letters(ORDERS_QUEUE) == []  # waiting for its order, not dead-lettered
    context_with(creating, states=ctx.states)

    clock.advance(STORE_RETRY_DELAYS[0])
    while deliver(functions, broker):
        pass
    record = ctx.states.get("p1")
    assert record is not None and record.payment is not None and record.payment.notification_id == "n-1"
    assert told(broker) == ["Rejected", "Received"]
    assert deferred_sequence_numbers(broker) == []


class CountingReads:
    """The deferral log, counting its reads."""

    def __init__(self, log: Any) -> None:
        self._log, self.reads = log, 0

    def get(self, order_id: str) -> Any:
        self.reads += 1
        return self._log.get(order_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


def test_a_submission_reads_the_deferral_document_once_whether_refused_accepted_or_a_duplicate(
    functions, ctx, broker, monkeypatch
):
    """The read that decides (was this very message refused?) is the read that lists the notifications
    waiting for the order and that the refusal's write starts from: no read is added to a submission, but one:
    a submission that writes the state record of an order refused before reads the document again once the
    record exists (a refusal marked meanwhile by another submission is withdrawn: deferral/recovery.py
    ``settle_refusals``)."""
    cap = Cap(monkeypatch, full=True)
    reads = CountingReads(ctx.deferrals)
    context_with(ctx, deferrals=reads)
    submit(broker, order())
    assert deliver(functions, broker)
    assert (told(broker), reads.reads) == (["Rejected"], 1)

    cap.full = False
    for message_id, read in (("p1:again", 2), ("p1:duplicate", 1)):  # accepted (the refusal withdrawn), a duplicate
        reads.reads = 0
        submit(broker, order(), message_id)
        assert deliver(functions, broker)
        assert reads.reads == read, message_id
    assert told(broker) == ["Rejected", "Received"]
