"""A refusal by the pending cap tells its submitter ``Rejected`` and raises the ``OrderRejected`` alert. A
failed alert send used to abandon the message, then to hand it to a store-retry copy; but the copy is a Service
Bus send too: on five deliveries in a row whose alert and copy both failed (``harsh-refusals``, 300 orders,
seed 1, at 20 % send failures) the ``OrderSubmitted`` was dead-lettered ``MaxDeliveryCountExceeded``, its
refusal written and told but never alerted (``silent_failures`` 1). Now the alert whose send failed is handed
to the alert courier (``deliver_alert_v1``) before the message is settled, and the message is completed: the
courier sends it under the same id on durable timers, whatever Service Bus does right now. When Durable does not
take the courier either, the message is handled again later as a store-retry copy that finishes the refusal and
raises the alert again (``submission/courier_retry.py``): the hand-over's failure used to fail the trigger, and the
redeliveries Service Bus gives at once used up the message's five deliveries in a Durable outage of seconds.

Through the registered trigger with the Durable SDK's own client against the local Durable engine, which
replays the registered courier through the SDK and runs its activity through the Functions runtime; the
in-process broker and the Cosmos protocol server."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from azure.durable_functions import OrchestrationRuntimeStatus

from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE
from contracts.store_retry import retry_round
from localrun.durable.engine import DurableEngine
from localrun.durable.extension_api.handlers import empty
from orchestrators.names import DELIVER_ALERT
from orchestrators.status import FINAL_RETRY_DELAYS
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import context_with
from tests.deferral.support import DurableClientStub, alerts, order, send
from tests.deferral.test_refusal_written_first import Cap, SendsFailing, told
from tests.localrun.real_durable_client import RealDurableClient
from tests.runtime.test_activity_protocol_runtime import _invoke_activity

pytestmark = pytest.mark.cosmos


@pytest.fixture
def courier(functions: Any, clock: Any) -> Iterator[tuple[DurableEngine, RealDurableClient]]:
    """The local Durable engine with the registered alert courier (its activities run through the runtime)."""
    engine = DurableEngine({DELIVER_ALERT: functions[DELIVER_ALERT].func}, _invoke_activity, clock)
    real = RealDurableClient(engine)
    yield engine, real
    real.close()


def _deliver_with(functions: Any, broker: Any, real: RealDurableClient) -> int:
    """Delivers the next orders message to the registered trigger with the SDK's client; its sequence number."""
    message = broker.receive(ORDERS_QUEUE)
    assert message is not None
    fn = functions["submit_order"].func.client_function
    real.run(fn(message=message, message_actions=broker.actions, client=real.client))
    return int(message.sequence_number)


def test_a_refusal_whose_alert_cannot_be_sent_is_completed_and_alerted_by_the_courier(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any, courier: Any
) -> None:
    """Input: p1 refused (cap full) while sends to ``operator-alerts`` fail three times in a row (the delivery's
    own send, then the courier's first two).

    Expected: the one delivery completes the message (no copy, no redelivery: none of its deliveries spent)
    with the submitter told ``Rejected`` and the alert handed to the courier under
    ``alert:OrderRejected:p1:<seq>``; the courier, on its durable timers (5 s, 30 s), sends it under the
    alert's id once the queue takes it, and completes ``Sent``.
    Before: the message was handed to a store-retry copy (itself a send that can fail, then abandoned), and no
    courier was started."""
    engine, real = courier
    Cap(monkeypatch, full=True)
    context_with(ctx, sender=SendsFailing(broker, OPERATOR_ALERTS_QUEUE, times=3))
    send(broker, order())

    seq = _deliver_with(functions, broker, real)

    assert broker.peek(ORDERS_QUEUE, 10) == [] and broker.dead_letters(ORDERS_QUEUE) == []  # completed, no copy
    assert told(broker) == ["Rejected"] and alerts(broker) == []
    [instance] = engine.instances()
    assert (instance.instance_id, instance.name) == (f"alert:OrderRejected:p1:{seq}", DELIVER_ALERT)

    engine.run_until_idle()  # the courier's first send fails: a timer
    for delay in FINAL_RETRY_DELAYS[:2]:
        assert alerts(broker) == []
        clock.advance(delay)
        engine.run_until_idle()

    [alert] = broker.peek(OPERATOR_ALERTS_QUEUE, 10)
    assert alert.message_id == f"alert:OrderRejected:p1:{seq}"
    body = json.loads(alert.body)
    assert (body["kind"], body["orderId"], body["details"]) == ("OrderRejected", "p1", {"sequenceNumber": seq})
    assert instance.status is OrchestrationRuntimeStatus.Completed
    assert instance.output == {"result": "Sent", "alertId": f"alert:OrderRejected:p1:{seq}"}
    assert ctx.states.get("p1") is None and ctx.deferrals.get("p1").refuses(seq)


def test_a_redelivery_whose_alert_fails_again_finds_the_courier_delivering_it(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any, courier: Any
) -> None:
    """Input: p1 refused with its alert's send failing; the settlement is lost (the lock expired), so the message
    is delivered again while the courier still waits on its timer, and the alert's send fails again.

    Expected: the second hand-over finds the same courier (its start refused: the instance exists and runs) and
    the message is completed all the same; one courier, one alert in the end."""
    engine, real = courier
    Cap(monkeypatch, full=True)
    context_with(ctx, sender=SendsFailing(broker, OPERATOR_ALERTS_QUEUE, times=3))
    send(broker, order())
    message = broker.receive(ORDERS_QUEUE)
    fn = functions["submit_order"].func.client_function

    class LockLost:
        def complete(self, message: Any) -> None: ...

    real.run(fn(message=message, message_actions=LockLost(), client=real.client))
    engine.run_until_idle()  # the courier's first send fails (the second failure): waiting on its timer
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))

    seq = _deliver_with(functions, broker, real)  # the third failure: the courier is still running

    assert broker.peek(ORDERS_QUEUE, 10) == [] and broker.dead_letters(ORDERS_QUEUE) == []
    assert [i.instance_id for i in engine.instances()] == [f"alert:OrderRejected:p1:{seq}"]
    clock.advance(FINAL_RETRY_DELAYS[0])
    engine.run_until_idle()
    assert [a["alertId"] for a in alerts(broker)] == [f"alert:OrderRejected:p1:{seq}"]


class DurableDown(DurableClientStub):
    """A durable client whose starts of the alert courier fail (the Durable extension unreachable), and which
    knows of no instance."""

    async def start_new(
        self, orchestration_function_name: str, instance_id: str | None = None, client_input: Any | None = None
    ) -> str:
        if orchestration_function_name == DELIVER_ALERT:
            raise Exception("Cannot connect to host localhost:7071")
        return await super().start_new(orchestration_function_name, instance_id, client_input)

    async def get_status(self, instance_id: str) -> Any:
        return None


def _bare_500s(real: RealDurableClient, down: bool) -> None:
    """The Durable extension, through the SDK's client, answering every call with an empty 500 (the Functions host
    failing in front of it, the runner's ``"bare": true`` outages) while ``down``."""
    real.api.before_answer = (lambda method, path: empty(500)) if down else (lambda method, path: None)


def _events(caplog: Any, name: str) -> list[Any]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


def test_an_alert_durable_does_not_take_has_its_message_handled_again_as_a_copy(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any, courier: Any, caplog: Any
) -> None:
    """Input: p1 refused, its alert's send failing once; Durable answers the courier's start (and its status read)
    with empty 500s.

    Expected: the delivery completes the message (the trigger does not fail) with a copy of it on ``orders``, round 1,
    due after the first store-retry delay (10 s), and ``AlertNotHandedOver`` (WARNING) names the alert; the submitter
    is told ``Rejected`` once. With Durable back, the copy is handled: the refusal, written by the first delivery, is
    finished again and the alert sent under the same id (the queue takes it now); nothing is left on ``orders``.
    Before: the hand-over raised ``AlertHandOverFailed``, the trigger failed and the message was redelivered at once:
    an outage of more than a few seconds used up its five deliveries (``MaxDeliveryCountExceeded``)."""
    engine, real = courier
    Cap(monkeypatch, full=True)
    context_with(ctx, sender=SendsFailing(broker, OPERATOR_ALERTS_QUEUE, times=1))
    send(broker, order())
    caplog.set_level(logging.INFO)
    _bare_500s(real, down=True)

    seq = _deliver_with(functions, broker, real)  # raises nothing

    [copy] = broker.peek(ORDERS_QUEUE, 10)
    assert retry_round(copy.application_properties) == 1 and json.loads(copy.body)["orderId"] == "p1"
    assert broker.dead_letters(ORDERS_QUEUE) == [] and alerts(broker) == [] and engine.instances() == []
    [event] = _events(caplog, "AlertNotHandedOver")
    assert event.levelno == logging.WARNING and event.alertId == f"alert:OrderRejected:p1:{seq}"
    assert broker.receive(ORDERS_QUEUE) is None  # not due yet

    _bare_500s(real, down=False)
    clock.advance(STORE_RETRY_DELAYS[0] + timedelta(seconds=1))
    _deliver_with(functions, broker, real)

    assert [a["alertId"] for a in alerts(broker)] == [f"alert:OrderRejected:p1:{seq}"]
    assert told(broker) == ["Rejected"]  # the copy's Rejected collapsed under the same MessageId
    assert broker.peek(ORDERS_QUEUE, 10) == [] and broker.dead_letters(ORDERS_QUEUE) == []
    assert engine.instances() == []  # sent at once: no courier


def test_an_alert_outlasts_a_twelve_minute_durable_outage_without_using_up_the_deliveries(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any, courier: Any
) -> None:
    """Input: p1 refused while ``operator-alerts`` refuses every send and Durable answers empty 500s for 12 minutes
    (the runner profile's long outage).

    Expected: each handling completes its message with the copy of the next round (10 s, 30 s, then a minute apart),
    the trigger never failing and no message dead-lettered; the first copy handled after Durable is back hands the
    alert to its courier (``alert:OrderRejected:p1:<seq>``, the original's sequence number) and completes with no
    copy. Before: the first delivery failed the trigger, and the five redeliveries Service Bus gives it at once
    (abandoned each time) dead-lettered it ``MaxDeliveryCountExceeded``, the alert never sent."""
    engine, real = courier
    Cap(monkeypatch, full=True)
    context_with(ctx, sender=SendsFailing(broker, OPERATOR_ALERTS_QUEUE, times=1000))
    send(broker, order())
    _bare_500s(real, down=True)
    back = clock.now() + timedelta(minutes=12)

    seq = _deliver_with(functions, broker, real)
    handled = 1
    while copies := broker.peek(ORDERS_QUEUE, 10):
        [copy] = copies
        assert retry_round(copy.application_properties) == handled and handled < 20
        clock.advance(STORE_RETRY_DELAYS[handled - 1] + timedelta(seconds=1))
        _bare_500s(real, down=clock.now() < back)
        _deliver_with(functions, broker, real)
        handled += 1
        assert broker.dead_letters(ORDERS_QUEUE) == []

    assert handled > 5 and clock.now() >= back  # more handlings than Service Bus gives one message
    assert broker.peek(ORDERS_QUEUE, 10) == [] and broker.dead_letters(ORDERS_QUEUE) == []
    [instance] = engine.instances()
    assert (instance.instance_id, instance.name) == (f"alert:OrderRejected:p1:{seq}", DELIVER_ALERT)
    # each handling told it again under the same MessageId: one kept per 10 minutes of duplicate detection
    assert {m.message_id for m in broker.peek("client-statuses", 100)} == {f"p1:Rejected:0:{seq}"}
