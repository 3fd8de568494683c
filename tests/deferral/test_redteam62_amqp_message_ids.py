"""Red team (hostile62): a MessageId that is not text. AMQP lets a sender give ``message-id`` as a uuid, a ulong or
binary as well as a string (another AMQP client, or the Python SDK's ``ServiceBusMessage(message_id=12345)``), and
Service Bus passes it on; the Python SDK's ``ServiceBusReceivedMessage.message_id`` then answers a ``uuid.UUID``, an
``int`` or, binary that is not UTF-8, ``bytes`` (it decodes only UTF-8 bytes). The app took it for text. A payment
notification waiting for its order recorded an ``int`` id in the order's deferral document, which no read could map
again: the order's own submission, and every later message of it, met the unreadable document and was handled again
later until dead-lettered, the order never accepted. A ``uuid`` id failed the trigger on every delivery (not JSON
serializable), and so did any id that is not ``str`` on a store-retry copy (the copy's id is matched with ``re``).

Every message read from a queue is now read by ``message_id_text``: a uuid as its canonical text, a ulong as its
digits, binary as UTF-8 or hex, control characters made spaces, at most 128 characters. Driven through the registered
``submit_order`` trigger from the in-process broker, over the Cosmos protocol server."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage
from adapters.servicebus.settlement import message_id_text
from contracts.names import ORDERS_QUEUE
from contracts.store_retry import ROUND_PROPERTY
from tests.deferral.support import DurableClientStub, deliver, deliver_all, notification, order
from tests.fakes import FakeReceivedMessage

pytestmark = pytest.mark.cosmos

# What the SDK answers for an AMQP message-id of each type but string.
NOT_TEXT: list[Any] = [12345, 2**64 - 1, uuid.UUID(int=7), b"\xff\xfe\x00", b""]
# test ids without backslashes: a bytes repr is escaped again when an id is passed on the command line (dev.py test)
NOT_TEXT_IDS = ["int", "ulong-max", "uuid", "binary", "empty-binary"]


def _send(broker: Any, body: dict[str, Any], message_id: Any, **properties: Any) -> None:
    """As another AMQP client sends it (``OutgoingMessage`` types its id as text, the AMQP message-id is not)."""
    broker.send_from_client(
        ORDERS_QUEUE,
        OutgoingMessage(body=json.dumps(body), message_id=message_id, application_properties=properties),
    )


@pytest.mark.parametrize("message_id", NOT_TEXT, ids=NOT_TEXT_IDS)
def test_a_notification_with_an_id_that_is_not_text_waits_for_its_order_and_is_applied(
    functions: Any, ctx: Any, broker: Any, message_id: Any
) -> None:
    _send(broker, notification(), message_id)
    deliver_all(functions, broker)  # before: an int id made the order's deferral document unreadable
    assert ctx.deferrals.get("p1").waiting()  # readable, the notification waiting
    _send(broker, order(), "order-p1")
    deliver_all(functions, broker)  # before: a uuid id raised TypeError on every delivery
    record = ctx.states.get("p1")
    assert record is not None and record.payment is not None and record.payment.notification_id == "n-1"
    assert broker.dead_letters(ORDERS_QUEUE) == []


@pytest.mark.parametrize("message_id", NOT_TEXT, ids=NOT_TEXT_IDS)
def test_a_copy_round_with_an_id_that_is_not_text_is_handled_again_later(
    functions: Any, ctx: Any, broker: Any, message_id: Any
) -> None:
    cancel = {"type": "CancelOrder", "schemaVersion": 1, "orderId": "nope", "reason": "changed my mind"}
    _send(broker, cancel, message_id, **{ROUND_PROPERTY: 1})
    deliver(functions, broker, DurableClientStub())  # before: TypeError (a string pattern on an int, a UUID, bytes)
    [copy] = broker.contents(ORDERS_QUEUE)  # the original completed, its copy scheduled
    assert ":store-retry:2:" in copy.message_id and copy.application_properties[ROUND_PROPERTY] == 2


def test_the_text_of_each_kind_of_id() -> None:
    assert message_id_text(FakeReceivedMessage(b"", message_id=None)) is None  # type: ignore[arg-type]
    assert [message_id_text(FakeReceivedMessage(b"", message_id=m)) for m in NOT_TEXT] == [  # type: ignore[arg-type]
        "12345",
        "18446744073709551615",
        "00000000-0000-0000-0000-000000000007",
        "fffe00",
        "",
    ]
    assert message_id_text(FakeReceivedMessage(b"", message_id="a\nforged line")) == "a forged line"
    long = message_id_text(FakeReceivedMessage(b"", message_id=b"\xff" * 200))  # type: ignore[arg-type]
    assert long is not None and len(long) == 128
