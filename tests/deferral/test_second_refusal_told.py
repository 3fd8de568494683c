"""A second refusal of an order by the pending cap (another ``OrderSubmitted``, refused again while the cap is
still full) is told to its submitter like the first, even within Service Bus's 10 minutes of duplicate
detection: the ``Rejected`` status's MessageId and the ``OrderRejected`` alert's id name the refused message (its
sequence number as sent: submission/intake.py ``refusal_variant``), where both were the order's alone
(``<orderId>:Rejected:0``, ``alert:OrderRejected:<orderId>``), so the broker dropped the second refusal's as
duplicates of the first's. The alert of a second refusal of the same content is held (one page per refused
content while the refusals go on: tests/submission/test_rejection_storm.py); another content's is raised. The same
message handled again (its redelivery, a copy) still tells under its own ids, which collapse; so does the courier,
which delivers a status whose send failed.

Through the registered trigger, the in-process broker (whose duplicate detection compares MessageIds as they
are, within a window that starts at the first send) and Cosmos, as tests/deferral/test_refusal_written_first.py."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest

from activities import scheduler_steps
from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.activities import PublishStatusInput
from contracts.names import ORDERS_QUEUE
from localrun.servicebus import InProcessBroker
from tests.contexts import context_with
from tests.deferral.support import DurableClientStub, alerts, deliver, order
from tests.deferral.test_refusal_written_first import Cap, SettlementLost, alert_kinds, submit, told

pytestmark = pytest.mark.cosmos


class StatusQueueDown:
    """The broker, except that sends to the submitter's status queue fail (Service Bus unavailable there)."""

    def __init__(self, broker: InProcessBroker) -> None:
        self.broker = broker

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue == "client-statuses":
            raise SendError(f"send to {queue!r} failed: ServiceCommunicationProblem")
        self.broker.send(queue, message)


def status_ids(broker: InProcessBroker) -> list[str]:
    return [m.message_id for m in broker.peek("client-statuses", 100)]


def refuse(functions: Any, broker: InProcessBroker, message_id: str, client: DurableClientStub | None = None) -> int:
    """Submits order p1 under ``message_id`` and delivers it (the cap full: refused); its sequence number."""
    return refuse_content(functions, broker, message_id, client)


def refuse_content(
    functions: Any, broker: InProcessBroker, message_id: str, client: DurableClientStub | None = None, **content: Any
) -> int:
    """``refuse`` of order p1 with ``content`` changed."""
    submit(broker, order(**content), message_id)
    [message] = [m for m in broker.peek(ORDERS_QUEUE, 100) if m.message_id == message_id]
    assert deliver(functions, broker, client)
    return int(message.sequence_number)


def test_a_second_refusal_within_the_duplicate_window_is_told_and_alerted_again(
    functions, ctx, broker, clock, monkeypatch
):
    """Input: M1 (order p1) refused by the pending cap; two minutes later the submitter submits again (M2,
    MessageId p1:again), and the cap is still full.

    Expected (docs/design.md, Submission: each refusal tells its submitter ``Rejected``; an ``OrderRejected``
    alert per refused content): two ``Rejected`` statuses, each naming its message; one alert for the same content
    (M2's held), another for M3, the order with another content.
    Before: M2's status and alert had M1's ids (``p1:Rejected:0``, ``alert:OrderRejected:p1``), so Service Bus
    dropped both as duplicates: M2's submitter heard nothing."""
    Cap(monkeypatch, full=True)
    m1 = refuse(functions, broker, "p1")
    clock.advance(timedelta(minutes=2))
    m2 = refuse(functions, broker, "p1:again")

    assert told(broker) == ["Rejected", "Rejected"], status_ids(broker)
    assert alert_kinds(broker) == ["OrderRejected"]
    assert status_ids(broker) == [f"p1:Rejected:0:{m1}", f"p1:Rejected:0:{m2}"]
    m3 = refuse_content(functions, broker, "p1:other", shipTo="2 Other St")
    assert told(broker) == ["Rejected"] * 3
    assert [a["details"]["sequenceNumber"] for a in alerts(broker)] == [m1, m3]


def test_the_same_refused_message_handled_again_still_tells_under_its_own_ids(
    functions, ctx, broker, clock, monkeypatch
):
    """Input: M1 refused and told, then M2 refused and told, then M1's settlement turns out lost and Service Bus
    redelivers it (the cap still full).

    Expected: M1's redelivery finishes its own refusal under M1's ids: the broker keeps one of each, so
    nobody hears anything twice; M2's stand beside them."""
    Cap(monkeypatch, full=True)
    submit(broker, order())
    message = broker.receive(ORDERS_QUEUE)
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=message, message_actions=SettlementLost(), client=DurableClientStub()))
    m2 = refuse(functions, broker, "p1:again")
    assert told(broker) == ["Rejected", "Rejected"]

    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))
    assert deliver(functions, broker)  # M1 again
    assert status_ids(broker) == [f"p1:Rejected:0:{message.sequence_number}", f"p1:Rejected:0:{m2}"]
    assert alert_kinds(broker) == ["OrderRejected"]  # M1's; M2, the same content, held, and so is M1 again
    assert ctx.states.get("p1") is None


def test_the_courier_delivers_a_second_refusal_under_its_own_id(functions, ctx, broker, clock, monkeypatch):
    """Input: the submitter's status queue fails while M1 and then M2 (order p1) are refused: both ``Rejected``
    statuses go to the courier (``deliver_status_v1``), which later sends each through the ``publish_status``
    activity.

    Expected: two couriers (a courier still delivering M1's status must not take M2's for it: one instance per
    refused message), each sending under its message's status MessageId, so the submitter hears both.
    Before: both were owed as ``status:p1:Rejected:0`` (the second start found the first courier) and sent
    as ``p1:Rejected:0``."""
    Cap(monkeypatch, full=True)
    down = context_with(ctx, sender=StatusQueueDown(broker))
    client = DurableClientStub()
    m1 = refuse(functions, broker, "p1", client)
    m2 = refuse(functions, broker, "p1:again", client)
    context_with(down, sender=broker)
    assert told(broker) == []

    couriers = [(instance, payload) for name, instance, payload in client.started if name == "deliver_status_v1"]
    assert [instance for instance, _ in couriers] == [f"status:p1:Rejected:0:{m1}", f"status:p1:Rejected:0:{m2}"]
    for _, payload in couriers:  # what the courier hands its activity: its input, through the contract
        scheduler_steps.publish_status(ctx, PublishStatusInput.from_json(json.loads(json.dumps(payload))))
    assert status_ids(broker) == [f"p1:Rejected:0:{m1}", f"p1:Rejected:0:{m2}"]
    assert told(broker) == ["Rejected", "Rejected"]
