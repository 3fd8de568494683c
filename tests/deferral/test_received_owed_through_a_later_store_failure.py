"""A ``Received`` whose send failed, in the delivery that created the order, is handed to the courier even when
the state store fails later in that delivery.

Runner, harsh-refusals.json, 300 orders, seed 1, ord-00248 (``missing_statuses`` 1): the delivery that created
the record failed its ``Received`` send, then the write marking it owed (``receivedOwed``) failed (a 503; it
is tried again since), then it applied the order's deferred payment notification and read the record again:
that read failed too, the message went to a store-retry copy, and the owed ``Received`` went with nothing. The
copy found the order begun and said nothing; the submitter heard ``Processing`` and ``Completed`` only. The
delivery that created the record no longer reads it again (only a duplicate submission needs the re-read)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapters.cosmos.errors import StoreUnavailable
from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.names import ORDERS_QUEUE
from localrun.servicebus import InProcessBroker
from orchestrators import names
from submission.intake import MARK_RETRY_DELAYS
from tests.contexts import while_using
from tests.deferral.support import DurableClientStub, deferred_sequence_numbers, deliver, notification, order, send

pytestmark = pytest.mark.cosmos

MARK_WRITES = 1 + len(MARK_RETRY_DELAYS)


class ReceivedSendFails:
    """The broker, refusing the first ``Received`` sent to the submitter's queue (a transient Service Bus error)."""

    def __init__(self, broker: InProcessBroker) -> None:
        self._broker = broker
        self.refused = 0

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue == "client-statuses" and json.loads(message.body)["status"] == "Received" and not self.refused:
            self.refused += 1
            raise SendError(f"send to {queue!r} failed (injected)")
        self._broker.send(queue, message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._broker, name)


class StoreFailingAfterTheCreate:
    """The state store: the replaces after the record's creation fail ``MARK_WRITES`` times (the owed mark's write
    and its retries), and every read fails after the next replace, which succeeds (the deferred notification's
    apply)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.created = False
        self.replaces = 0

    def create(self, record: Any) -> Any:
        written = self._store.create(record)
        self.created = True
        return written

    def replace(self, record: Any) -> Any:
        if self.created:
            self.replaces += 1
            if self.replaces <= MARK_WRITES:
                raise StoreUnavailable("state store: 503 on replace (injected)")
        return self._store.replace(record)

    def get(self, order_id: str) -> Any:
        if self.replaces > MARK_WRITES:
            raise StoreUnavailable("state store: 503 on get (injected)")
        return self._store.get(order_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_received_owed_is_handed_to_the_courier_though_a_read_after_the_deferred_payment_fails(
    functions: dict[str, Any], ctx: Any, broker: InProcessBroker
) -> None:
    send(broker, notification())
    assert deliver(functions, broker)
    assert len(deferred_sequence_numbers(broker)) == 1  # waits for its order

    sender = ReceivedSendFails(broker)
    store = StoreFailingAfterTheCreate(ctx.states)
    client = DurableClientStub()
    with while_using(ctx, sender=sender, states=store):
        send(broker, order())
        assert deliver(functions, broker, client)

    assert sender.refused == 1 and store.replaces == MARK_WRITES + 1  # the send, the mark's tries, then the apply
    record = ctx.states.get("p1")
    assert record is not None and record.payment is not None and record.received_owed is None
    couriers = [(name, input_) for name, _, input_ in client.started if name == names.DELIVER_STATUS]
    assert [input_["status"] for _, input_ in couriers] == ["Received"]
    # the message was completed, not handed to a store-retry copy
    assert [m.subject for m in broker.peek(ORDERS_QUEUE, 10)] == ["RetryDeferred"]
