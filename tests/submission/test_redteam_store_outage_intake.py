"""Red team (store_outage, b18486a): intake paths where handling the message again LATER (a copy) is not
the same as handling it again at once (a redelivery), and round properties a client controls."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE
from contracts.store_retry import ORIGINAL_PROPERTY, ROUND_PROPERTY, retry_round
from tests.contexts import context_with
from tests.fakes import FakeReceivedMessage, RecordingActions, RecordingClient, StateStoreThatFails
from tests.submission.corpus import order


def deliver(functions: dict[str, Any], message: FakeReceivedMessage) -> RecordingActions:
    actions = RecordingActions()
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=message, message_actions=actions, client=RecordingClient()))
    return actions


def room_for_more(functions: dict[str, Any], ctx: Any) -> None:
    """Order b (Pending) is cancelled, so the pending cap has room again."""
    cancel = {"type": "CancelOrder", "schemaVersion": 1, "orderId": "b", "reason": "x"}
    deliver(functions, FakeReceivedMessage.of(cancel, "b:cancel"))
    ctx.counts.clear()


def test_redteam_store_outage_infinite_round_property_is_not_a_whole_number_and_reads_as_round_0():
    """Expected (retry_round's contract: "anything that is not a whole number is round 0"): a float
    ``storeRetryRound`` of +inf (an AMQP double any client can set) reads as 0.
    On b18486a: ``int(float('inf'))`` raised ``OverflowError``, which ``retry_round`` does not catch."""
    assert retry_round({ROUND_PROPERTY: float("inf")}) == 0


@pytest.mark.cosmos
def test_redteam_store_outage_cancel_for_unknown_order_with_infinite_round_crashes_the_trigger(
    functions, app_context, sender
):
    """Expected: a CancelOrder for an order the app never saw is settled whatever application properties
    the client put on it: like any cancellation of an unknown order it looks again later (its order may
    be on its way), as round 1, the client's +inf read as round 0.
    On b18486a: ``cancel_order`` called ``retry_round`` on the client's ``storeRetryRound`` = +inf, which raises
    ``OverflowError`` out of the trigger: the message is never settled (in Azure: lock expiry,
    redelivered until MaxDeliveryCountExceeded, an unhandled-exception failure logged on each delivery)."""
    body = {"type": "CancelOrder", "schemaVersion": 1, "orderId": "never-seen", "reason": "x"}
    message = FakeReceivedMessage.of(body, "never-seen:cancel")
    message.application_properties = {ROUND_PROPERTY: float("inf")}
    actions = deliver(functions, message)
    assert actions.only[0] == "complete"
    [copy] = [m for q, m in sender.sent if q == ORDERS_QUEUE]
    assert copy.application_properties == {ROUND_PROPERTY: 1, ORIGINAL_PROPERTY: str(message.sequence_number)}


def copies(sender: Any) -> list[Any]:
    return [m for q, m in sender.sent if q == ORDERS_QUEUE]


@pytest.mark.cosmos
def test_redteam_store_outage_rejected_order_is_accepted_later_by_its_copy(functions, app_context, sender):
    """Expected: an order the pending cap refused (the submitter was told ``Rejected``: "nothing written,
    submit again later") is not taken afterwards behind the submitter's back; if the refusal cannot be
    finished, the submitter is not told ``Rejected`` for an order the app then processes.
    On b18486a: ``submit_order`` published ``Rejected`` and raises the ``OrderRejected`` alert, THEN
    ``release_for_rejected_order`` writes the deferral document; that write fails (StoreUnavailable), so
    ``retry_later`` sends a copy due 10 s later and completes the message. By then the cap has room and
    the copy creates the order: the submitter gets ``Rejected`` then ``Received`` for the same order, which
    is now processed (charged, shipped). Then the refusal was dead-lettered ``OrderRejected`` instead, which
    left the notifications waiting for the order deferred until their time to live. Now the refusal is
    written before anyone is told: a write that fails has promised nothing, and the copy decides afresh."""
    from settings import Settings

    ctx = context_with(app_context, settings=Settings.from_env({}, MAX_PENDING="1", MAX_IN_FLIGHT="1"))
    deliver(functions, FakeReceivedMessage.of(order(orderId="a"), "a"))  # Processing (in flight 1 of 1)
    deliver(functions, FakeReceivedMessage.of(order(orderId="b"), "b"))  # Pending: the cap is full
    ctx.counts.clear()

    down = context_with(ctx, deferrals=StateStoreThatFails(ctx.deferrals, "save"))  # type: ignore[arg-type]  # outage
    refused = deliver(functions, FakeReceivedMessage.of(order(orderId="c"), "c")).only
    assert refused[0] == "complete", refused  # a copy, for later
    told = [b["status"] for b in sender.bodies("client-statuses") if b["orderId"] == "c"]
    assert told == [] and "OrderRejected" not in [a["kind"] for a in sender.bodies("operator-alerts")]
    context_with(down, deferrals=ctx.deferrals)  # the store is back

    room_for_more(functions, ctx)
    [copy] = copies(sender)
    assert deliver(functions, FakeReceivedMessage.from_sent(copy)).only[0] == "complete"

    told = [b["status"] for b in sender.bodies("client-statuses") if b["orderId"] == "c"]
    assert told == ["Received"] and ctx.states.get("c") is not None, f"order c: told {told}"


class SaveLandsThenFails:
    """The deferral log; its next ``save`` is written but its response is lost (StoreUnavailable)."""

    def __init__(self, log: Any) -> None:
        self._log, self.armed = log, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def save(self, doc: Any) -> Any:
        written = self._log.save(doc)
        if self.armed:
            self.armed = False
            from adapters.cosmos.errors import StoreUnavailable

            raise StoreUnavailable("deferrals: 503 after the write landed")
        return written


@pytest.mark.cosmos
def test_redteam_store_outage_rejected_prepaid_order_taken_by_its_copy_after_its_payment_was_dead_lettered(
    functions, app_context, sender
):
    """Expected: once the refusal is written and the order's payment notification was dead-lettered
    ``OrderRejected`` ("its order was rejected"), the order is not created afterwards: its copy, handled
    when the cap has room, finishes the refusal (``Rejected`` to the submitter) instead.
    On b18486a: the rejection's deferral write (``rejectedAt``) landed with its response lost, so
    ``retry_later`` copied the OrderSubmitted. A PaymentNotification arriving meanwhile is dead-lettered
    ``OrderRejected`` (rejectedAt is set); 10 s later the copy finds room under the cap and creates the
    prepaid order: ``Rejected`` then ``Received`` on the submitter's queue, and an accepted prepaid order
    whose only payment notification is already in the dead-letter queue (its payment step can only wait
    and fail)."""
    from settings import Settings

    ctx = context_with(app_context, settings=Settings.from_env({}, MAX_PENDING="1", MAX_IN_FLIGHT="1"))
    deliver(functions, FakeReceivedMessage.of(order(orderId="a"), "a"))
    deliver(functions, FakeReceivedMessage.of(order(orderId="b"), "b"))
    ctx.counts.clear()

    real_log = ctx.deferrals
    lost = context_with(ctx, deferrals=SaveLandsThenFails(real_log))
    refused = deliver(functions, FakeReceivedMessage.of(order(orderId="c", prepaid=True), "c")).only
    assert refused[0] == "complete", refused  # the refusal is written: its copy finishes it
    context_with(lost, deferrals=real_log)

    note = {
        "type": "PaymentNotification",
        "schemaVersion": 1,
        "notificationId": "n-c",
        "orderId": "c",
        "amountCents": 2500,
        "currency": "EUR",
        "providerReference": "psp-n-c",
    }
    paid = deliver(functions, FakeReceivedMessage.of(note, "n-c")).only
    assert paid[0] == "deadletter" and paid[1]["reason"] == "OrderRejected"

    room_for_more(functions, ctx)
    [copy] = copies(sender)
    assert deliver(functions, FakeReceivedMessage.from_sent(copy)).only[0] == "complete"

    told = [b["status"] for b in sender.bodies("client-statuses") if b["orderId"] == "c"]
    assert told == ["Rejected"]
    record = ctx.states.get("c")
    assert record is None, f"order c: told {told}, its payment dead-lettered OrderRejected, then created {record}"
