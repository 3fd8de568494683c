"""A status the intake could not send goes to its courier orchestration before the message is settled
(``notifications.status.hand_to_courier``). When Durable cannot take the courier either, the message is handled
again later as a store-retry copy (``submission/courier_retry.py``), whose handling says the status again.

Found by ``localrun fuzz`` seed 7985 (150 orders): a pending-cap refusal's ``Rejected`` whose send failed while the
Durable backend answered empty 500s; the hand-over failed, the message was completed, and the status was logged
lost (``StatusSendFailed``): the runner's ``lost`` 1, the submitter never told.

Through the registered ``orders`` trigger, the in-process broker and the Cosmos protocol server; the Durable client
is the tests' stub, down (its starts raise as the SDK does for an empty 500, its status reads know of nothing)."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta
from typing import Any

import pytest

from adapters.servicebus.sender import SendError
from adapters.servicebus.settlement import Settlement
from contracts.names import ORDERS_QUEUE
from contracts.store_retry import retry_round
from notifications.status import OwedStatus
from orchestrators.names import DELIVER_STATUS
from submission.courier_retry import settlement_after_hand_over
from submission.result import IntakeResult
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import context_with
from tests.deferral.support import DurableClientStub, deliver, order, send
from tests.deferral.test_refusal_written_first import Cap, SendsFailing, told

pytestmark = pytest.mark.cosmos


class DurableDown(DurableClientStub):
    """Starts of the status courier fail as the Durable SDK fails them on an empty 500 (``Exception(None)``), and
    status reads know of no instance."""

    async def start_new(
        self, orchestration_function_name: str, instance_id: str | None = None, client_input: Any | None = None
    ) -> str:
        if orchestration_function_name == DELIVER_STATUS:
            raise Exception(None)
        return await super().start_new(orchestration_function_name, instance_id, client_input)

    async def get_status(self, instance_id: str) -> Any:
        return None


def test_a_refusal_whose_status_durable_does_not_take_is_handled_again_and_told(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any, caplog: Any
) -> None:
    """Input: p1 refused (cap full); the send of its ``Rejected`` fails, and Durable does not take the courier.

    Expected: the message is completed with a copy of it on ``orders``, round 1, due after the first store-retry
    delay (10 s), and ``StatusNotHandedOver`` logged naming the failure; once Durable is back, the copy is handled
    (the refusal, written by the first delivery, finished) and the submitter is told ``Rejected``.
    Before: the message was completed with no copy and ``StatusSendFailed`` logged: the status lost."""
    Cap(monkeypatch, full=True)
    context_with(ctx, sender=SendsFailing(broker, "client-statuses", times=1))
    send(broker, order())
    caplog.set_level(logging.INFO)

    assert deliver(functions, broker, DurableDown())

    [copy] = broker.peek(ORDERS_QUEUE, 10)
    assert retry_round(copy.application_properties) == 1
    assert json.loads(copy.body)["orderId"] == "p1" and told(broker) == []
    assert broker.dead_letters(ORDERS_QUEUE) == []
    [event] = [r for r in caplog.records if getattr(r, "event", None) == "StatusNotHandedOver"]
    assert event.levelno == logging.WARNING and "an error answer with no body" in event.getMessage()
    assert not [r for r in caplog.records if getattr(r, "event", None) == "StatusSendFailed"]
    assert broker.receive(ORDERS_QUEUE) is None  # not due yet

    clock.advance(STORE_RETRY_DELAYS[0] + timedelta(seconds=1))
    client = DurableClientStub()
    assert deliver(functions, broker, client)

    assert told(broker) == ["Rejected"]
    assert client.started == []  # sent at once: no courier
    assert broker.peek(ORDERS_QUEUE, 10) == [] and broker.dead_letters(ORDERS_QUEUE) == []


def test_a_copy_that_cannot_be_sent_abandons_the_message(
    functions: Any, ctx: Any, broker: Any, monkeypatch: Any
) -> None:
    """Input: as above, and the copy's send to ``orders`` fails too (Service Bus failing).

    Expected: the message is abandoned (redelivered: its next delivery says the status again), never completed
    with the status lost."""
    Cap(monkeypatch, full=True)

    class Failing:
        def send(self, queue: str, message: Any) -> None:
            if queue in (ORDERS_QUEUE, "client-statuses"):
                raise SendError(f"send to {queue!r} failed: ServiceCommunicationProblem")
            broker.send(queue, message)

    context_with(ctx, sender=Failing())
    send(broker, order())
    message = broker.receive(ORDERS_QUEUE)
    fn = functions["submit_order"].func.client_function
    settled: list[str] = []

    class Actions:
        def complete(self, message: Any) -> None:
            settled.append("complete")

        def abandon(self, message: Any) -> None:
            settled.append("abandon")

    asyncio.run(fn(message=message, message_actions=Actions(), client=DurableDown()))

    assert settled == ["abandon"]


@pytest.mark.parametrize(
    "settlement",
    [Settlement.abandon("store down"), Settlement.deadletter("InvalidFields", "bad"), Settlement.complete()],
)
def test_only_a_completed_message_with_a_status_durable_did_not_take_is_copied(ctx: Any, settlement: Any) -> None:
    """A message the handler abandons is handled again anyway, one it dead-letters is not to be handled again, and
    one whose statuses were all taken is done: each keeps the handler's settlement, and nothing is sent."""
    owed = OwedStatus("p1", "Rejected", 0, "client-statuses")
    sent: list[Any] = []
    context_with(ctx, sender=type("Recording", (), {"send": lambda self, queue, message: sent.append(queue)})())
    not_taken = () if settlement.kind == "complete" else (owed,)
    result = IntakeResult(settlement, owed=(owed,), kind="OrderSubmitted")
    assert settlement_after_hand_over(ctx, object(), result, not_taken) == settlement  # type: ignore[arg-type]
    assert sent == []


def test_an_accepted_order_whose_received_durable_does_not_take_is_completed_with_it_owed(
    functions: Any, ctx: Any, broker: Any, monkeypatch: Any
) -> None:
    """Input: p1 accepted (cap not full); the send of its ``Received`` fails, and Durable does not take the courier.

    Expected: the message is completed with no copy: the record owes ``Received`` (``receivedOwed``), which its next
    writer says. Before the red team's change, a copy was sent (and in the last round the message was abandoned
    into a dead letter)."""
    Cap(monkeypatch, full=False)
    context_with(ctx, sender=SendsFailing(broker, "client-statuses", times=1))
    send(broker, order())

    assert deliver(functions, broker, DurableDown())

    assert [json.loads(m.body)["type"] for m in broker.peek(ORDERS_QUEUE, 10)] == []
    assert broker.dead_letters(ORDERS_QUEUE) == [] and told(broker) == []
    assert ctx.states.get("p1").received_owed is not None
