"""A ``Rejected`` the status courier still holds never contradicts a submission accepted since.

The pending cap refuses an ``OrderSubmitted`` and its ``Rejected`` cannot be sent: the intake hands it to the status
courier (``deliver_status_v1``), which retries it on durable timers for about six hours. Meanwhile the submitter
submits the order again, the cap has room, and that submission is accepted (the state record written, ``Received``
told, the attempt started). The courier's next try used to deliver the stale ``Rejected`` after ``Received`` (even
after ``Completed``): the submitter told its order was refused when it was accepted (found by a red team). Now each
of the courier's tries of a ``Rejected`` first looks for the order's state record (``activities.scheduler_steps.
refusal_superseded``): one written since speaks for the order, so the refusal is not told (``StatusSuperseded``),
the courier ends, and its last try alerts nothing. A refusal that stands (no record) is still told.

Through the registered trigger with the Durable SDK's own client against the local Durable engine, which replays
the registered courier through the SDK and runs its ``publish_status`` activity through the Functions runtime; the
in-process broker and the Cosmos protocol server (as tests/deferral/test_refusal_alert_outlasts_the_delivery_count.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from azure.durable_functions import OrchestrationRuntimeStatus

from activities.scheduler_steps import publish_status
from adapters.cosmos.errors import StoreUnavailable
from contracts.activities import PublishStatusInput
from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE
from domain.records import StateRecord
from domain.states import ProcessState
from localrun.durable.engine import DurableEngine
from orchestrators.names import DELIVER_STATUS
from orchestrators.status import FINAL_RETRY_DELAYS
from tests.contexts import context_with
from tests.deferral.support import DurableClientStub, alerts, deliver, order, send
from tests.deferral.test_refusal_written_first import Cap, SendsFailing, told
from tests.fakes import RecordingSender
from tests.localrun.real_durable_client import RealDurableClient
from tests.runtime.test_activity_protocol_runtime import _invoke_activity

STATUSES = "client-statuses"


@pytest.fixture
def courier(functions: Any, clock: Any) -> Iterator[tuple[DurableEngine, RealDurableClient]]:
    """The local Durable engine with the registered status courier (its activity runs through the runtime)."""
    engine = DurableEngine({DELIVER_STATUS: functions[DELIVER_STATUS].func}, _invoke_activity, clock)
    real = RealDurableClient(engine)
    yield engine, real
    real.close()


def _refused_with_its_rejected_owed(functions: Any, ctx: Any, broker: Any, monkeypatch: Any, real: Any) -> Cap:
    """p1 refused by the full cap while sends to its submitter's queue fail twice (the intake's own send of
    ``Rejected``, then the courier's first try): the courier holds the ``Rejected``, waiting on its first timer."""
    cap = Cap(monkeypatch, full=True)
    context_with(ctx, sender=SendsFailing(broker, STATUSES, times=2))
    send(broker, order())
    message = broker.receive(ORDERS_QUEUE)
    fn = functions["submit_order"].func.client_function
    real.run(fn(message=message, message_actions=broker.actions, client=real.client))
    return cap


@pytest.mark.cosmos
def test_a_rejected_the_courier_holds_is_not_told_once_a_later_submission_was_accepted(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any, courier: Any, caplog: Any
) -> None:
    """Input: p1 refused (cap full), its ``Rejected`` handed to the courier; the submitter submits p1 again (a new
    message) once the cap has room: accepted, ``Received`` told. Then the courier's timer fires and it tries again,
    the submitter's queue taking sends by now.

    Expected: the courier sends nothing (the accepted submission speaks for the order), logs ``StatusSuperseded``
    and completes; the submitter heard ``Received`` only; no ``StatusUndelivered`` alert.
    Before: the courier's second try delivered ``Rejected`` after ``Received``."""
    caplog.set_level(logging.INFO)
    engine, real = courier
    cap = _refused_with_its_rejected_owed(functions, ctx, broker, monkeypatch, real)
    [instance] = engine.instances()
    assert instance.name == DELIVER_STATUS and instance.instance_id.startswith("status:p1:Rejected:0:")
    engine.run_until_idle()  # the courier's first try fails: waiting on its timer
    assert told(broker) == [] and ctx.states.get("p1") is None

    cap.full = False
    send(broker, order(), "p1:again")  # the submitter tries again, the cap has room
    assert deliver(functions, broker, DurableClientStub())
    assert ctx.states.get("p1") is not None and told(broker) == ["Received"]

    clock.advance(FINAL_RETRY_DELAYS[0])
    engine.run_until_idle()

    assert told(broker) == ["Received"]
    assert instance.status is OrchestrationRuntimeStatus.Completed
    assert [a["kind"] for a in alerts(broker)] == ["OrderRejected"]  # the refusal's own alert, nothing more
    superseded = [r for r in caplog.records if getattr(r, "event", None) == "StatusSuperseded"]
    assert [(r.orderId, r.status) for r in superseded] == [("p1", "Rejected")]


@pytest.mark.cosmos
def test_a_refusal_that_stands_is_still_told_by_the_courier(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any, courier: Any
) -> None:
    """Input: as above, but nobody submits p1 again: the refusal stands (no state record).

    Expected: the courier's second try delivers ``Rejected`` under the refused message's status MessageId and the
    courier completes ``Sent``."""
    engine, real = courier
    _refused_with_its_rejected_owed(functions, ctx, broker, monkeypatch, real)
    [instance] = engine.instances()
    seq = instance.instance_id.rsplit(":", 1)[1]
    engine.run_until_idle()
    assert told(broker) == []

    clock.advance(FINAL_RETRY_DELAYS[0])
    engine.run_until_idle()

    assert told(broker) == ["Rejected"]
    assert [m.message_id for m in broker.peek(STATUSES, 10)] == [f"p1:Rejected:0:{seq}"]
    assert instance.status is OrchestrationRuntimeStatus.Completed
    assert instance.output == {"result": "Sent", "status": "Rejected"}
    assert ctx.states.get("p1") is None


def _context(sender: RecordingSender, states: object) -> Any:
    from tests.notifications.test_status_after_write import storeless_context as bare

    return context_with(bare(sender), states=states)


class ReplyQueueDown(RecordingSender):
    def send(self, queue: str, message: object) -> None:
        if queue == STATUSES:
            from adapters.servicebus.sender import SendError

            raise SendError(f"send to {queue!r} failed: ServiceCommunicationProblem")
        super().send(queue, message)  # type: ignore[arg-type]


COURIERS_TRY = {"orderId": "p1", "status": "Rejected", "attempt": 0, "replyTo": STATUSES, "variant": "42"}


def test_the_last_try_of_a_superseded_rejected_sends_nothing_and_alerts_nothing() -> None:
    """Input: the courier's last try of p1's ``Rejected`` (about six hours after the refusal), the submitter's queue
    still failing, and p1 has a state record (a later submission was accepted).

    Expected: nothing sent, no ``StatusUndelivered`` alert (nothing was given up: there is nothing to tell), and the
    activity succeeds (the courier ends).
    Before: the try sent, failed, and alerted ``StatusUndelivered`` for a refusal the order had outgrown."""

    class Accepted:
        def get(self, order_id: str) -> StateRecord:
            at = datetime(2026, 1, 1, tzinfo=UTC)
            return StateRecord(id=order_id, order_id=order_id, process_state=ProcessState.PROCESSED, updated_at=at)

    sender = ReplyQueueDown()
    publish_status(_context(sender, Accepted()), PublishStatusInput.from_json({**COURIERS_TRY, "lastTry": True}))
    assert sender.sent == []


def test_a_try_that_cannot_look_for_the_record_fails_and_the_last_one_alerts_status_undelivered() -> None:
    """Input: a try of the courier's ``Rejected`` whose read of the state record fails (Cosmos DB 503).

    Expected: nothing sent (whether the refusal stands is not known), the activity fails (the courier's timers try
    again); on the last try, alerted ``StatusUndelivered`` as when its send fails: nothing tries again."""

    class StoreDown:
        def get(self, order_id: str) -> None:
            raise StoreUnavailable("Cosmos DB 503 on read")

    for extra, alerted in (({}, []), ({"lastTry": True}, ["alert:StatusUndelivered:p1:Rejected:0:42"])):
        sender = RecordingSender()
        with pytest.raises(StoreUnavailable):
            publish_status(_context(sender, StoreDown()), PublishStatusInput.from_json({**COURIERS_TRY, **extra}))
        assert sender.message_ids(STATUSES) == []
        assert sender.message_ids(OPERATOR_ALERTS_QUEUE) == alerted
