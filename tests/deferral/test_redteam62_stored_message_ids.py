"""Red team rt62: a deferral document an older version wrote with a MessageId that is no text. Before hostile62 the
app recorded a payment notification's MessageId as the SDK handed it on: a ulong AMQP ``message-id`` as an ``int``,
stored as a JSON number (a uuid or binary one failed the write: never stored). hostile62 reads every new id as text
(``message_id_text``), but still read the stored field strictly: a document written before the upgrade stayed one no
read could map, and its order's submission, and every later message of the order, was handled again later until it
was dead-lettered, the order never accepted. Such an id is now read as its digits (``text_or_whole_number``), the text
``message_id_text`` gives it today. Driven through the registered ``submit_order`` trigger, over the Cosmos protocol
server."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from adapters.cosmos.mapping import DocumentError, from_document, to_document
from contracts.names import ORDERS_QUEUE
from domain.deferral import DeferralDocument
from tests.deferral.support import deliver_all, notification, order, send

pytestmark = pytest.mark.cosmos


@pytest.mark.parametrize("stored_id", [12345, 2**64 - 1], ids=repr)
def test_a_notification_recorded_with_a_number_id_before_the_upgrade_is_applied_to_its_order(
    functions: Any, ctx: Any, broker: Any, stored_id: int
) -> None:
    send(broker, notification(), "n-1")
    deliver_all(functions, broker)
    doc = ctx.deferrals.get("p1")
    [entry] = doc.entries
    # as the version before stored it: the id as the SDK answered it, a JSON number
    ctx.deferrals.save(dataclasses.replace(doc, entries=[dataclasses.replace(entry, message_id=stored_id)]))
    read = ctx.deferrals.get("p1").entry(entry.sequence_number).message_id  # before: DocumentError
    # its digits (past 2**53 Cosmos DB keeps a double: the digits of its whole value)
    assert read == str(stored_id) if stored_id < 2**53 else read.isdigit()

    send(broker, order(), "order-p1")
    deliver_all(functions, broker)
    record = ctx.states.get("p1")
    assert record is not None and record.payment is not None and record.payment.notification_id == "n-1"
    assert broker.dead_letters(ORDERS_QUEUE) == []


def _entry_document(message_id: Any) -> dict[str, Any]:
    doc = to_document(DeferralDocument.empty("p1", _NOW))
    entry = {
        "sequenceNumber": 7,
        "messageId": message_id,
        "messageType": "PaymentNotification",
        "reason": "OrderNotSubmitted",
        "deferredAt": "2026-12-07T10:00:00.000000Z",
        "recordedBy": "submission",
        "updatedAt": "2026-12-07T10:00:00.000000Z",
    }
    return {**doc, "entries": [entry]}


_NOW = datetime(2026, 12, 7, 10, tzinfo=UTC)


@pytest.mark.parametrize(
    ("stored", "read"),
    [("m-1", "m-1"), (12345, "12345"), (0, "0"), (1.8446744073709552e19, "18446744073709551616")],
)
def test_a_stored_message_id_reads_as_text(stored: Any, read: str) -> None:
    [entry] = from_document(DeferralDocument, _entry_document(stored)).entries
    assert entry.message_id == read


@pytest.mark.parametrize("stored", [True, 1.5, None, {"id": 1}, ["m"]], ids=repr)
def test_any_other_stored_message_id_still_does_not_fit(stored: Any) -> None:
    with pytest.raises(DocumentError, match=r"entries\.0\.messageId"):
        from_document(DeferralDocument, _entry_document(stored))
