"""Red team (rt-upgrade2): an ``orders`` message whose order has a document this version cannot read (a newer
version's process state, ``"Paused"`` say, or a deferral entry's reason it does not know; met during a rolling
upgrade or after a rollback) raised ``DocumentError`` out of the ``submit_order`` trigger: the message was
abandoned, redelivered at once and dead-lettered ``MaxDeliveryCountExceeded`` within seconds (a duplicate of the
order, its cancellation, its payment notification: lost to an operator's resubmit), a traceback per delivery.

Now it is handled as in a store outage: the document left as it is, the message sent again to ``orders`` for
later (``IntakeRetryScheduled`` naming the field: the newer version, or this one once the newer is back, handles
the copy) and the original completed. Driven through the registered trigger over the real Cosmos SDK (the local
protocol server)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE, STATE_CONTAINER
from domain import deferral
from tests.fakes import RecordingSender
from tests.submission.corpus import order
from tests.submission.test_redteam47_conflict_storm import _submit

pytestmark = pytest.mark.cosmos

CANCEL = {"type": "CancelOrder", "schemaVersion": 1, "orderId": "ord-1", "reason": "changed my mind"}
PAYMENT = {
    "type": "PaymentNotification",
    "schemaVersion": 1,
    "orderId": "ord-1",
    "notificationId": "n-1",
    "amountCents": 2500,
    "currency": "EUR",
    "providerReference": "p-1",
}


def _newer(cosmos_db: Any, doc_id: str, **changes: Any) -> dict[str, Any]:
    state = cosmos_db.get_container_client(STATE_CONTAINER)
    item = state.read_item(doc_id, partition_key="ord-1")
    newer = {k: v for k, v in item.items() if not k.startswith("_")} | changes
    state.replace_item(doc_id, newer)
    return newer


def _stored(cosmos_db: Any, doc_id: str) -> dict[str, Any]:
    item = cosmos_db.get_container_client(STATE_CONTAINER).read_item(doc_id, partition_key="ord-1")
    return {k: v for k, v in item.items() if not k.startswith("_")}


@pytest.mark.parametrize("body", [order(), CANCEL, PAYMENT], ids=["duplicate order", "cancel", "payment"])
def test_a_message_for_an_order_whose_record_this_version_cannot_read_is_handled_again_later(
    functions: dict[str, Any], app_context: Any, sender: RecordingSender, cosmos_db: Any, caplog: Any, body: Any
) -> None:
    caplog.set_level(logging.WARNING)
    _submit(functions, order())
    newer = _newer(cosmos_db, "ord-1", processState="Paused", pausedBy="ops")
    sent_before = len(sender.sent)
    kind, _ = _submit(functions, body).only  # before: DocumentError out of the trigger, abandoned
    assert kind == "complete"
    [(queue, copy)] = sender.sent[sent_before:]
    assert queue == ORDERS_QUEUE and copy.scheduled_enqueue_time is not None
    assert _stored(cosmos_db, "ord-1") == newer  # left as the newer version wrote it
    [scheduled] = [r for r in caplog.records if getattr(r, "event", "") == "IntakeRetryScheduled"]
    assert "field processState" in scheduled.getMessage()


def test_a_payment_whose_deferral_document_this_version_cannot_read_is_handled_again_later(
    functions: dict[str, Any], app_context: Any, sender: RecordingSender, cosmos_db: Any
) -> None:
    _submit(functions, PAYMENT)  # before its order: deferred, tracked in the deferral document
    entries = _stored(cosmos_db, deferral.document_id("ord-1"))["entries"]
    newer = _newer(cosmos_db, deferral.document_id("ord-1"), entries=[{**entries[0], "reason": "AwaitingFraudCheck"}])
    sent_before = len(sender.sent)
    kind, _ = _submit(functions, order()).only
    assert kind == "complete"
    assert [q for q, _ in sender.sent[sent_before:]] == [ORDERS_QUEUE]
    assert _stored(cosmos_db, deferral.document_id("ord-1")) == newer
