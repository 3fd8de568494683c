"""Red team (hostile62): a reply on ``agent-replies`` whose MessageId is not text (AMQP's uuid, ulong or binary
message-id, which the SDK hands on as ``uuid.UUID``, ``int`` or ``bytes``), on a copy round the relay sends on: its
copy's id was matched with ``re`` and the relay failed on every delivery (``TypeError``). Now read as text
(``adapters.servicebus.settlement.message_id_text``); tests/deferral/test_redteam62_amqp_message_ids.py has the
``orders`` side."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from adapters.clock import ManualClock
from contracts.names import AGENT_REPLIES_QUEUE
from contracts.store_retry import ROUND_PROPERTY
from tests.agents.support import START, make_context
from tests.agents.test_reply_relay import REPLY, FakeDurableClient, relay
from tests.fakes import FakeReceivedMessage, RecordingSender


@pytest.mark.parametrize("message_id", [12345, uuid.UUID(int=7), b"\xff\xfe"], ids=lambda value: type(value).__name__)
def test_a_reply_copy_with_an_id_that_is_not_text_is_sent_on_for_its_next_round(
    functions: Any, message_id: Any
) -> None:
    sender = RecordingSender()
    received = FakeReceivedMessage(
        body=REPLY.to_json().encode("utf-8"),
        message_id=message_id,
        application_properties={ROUND_PROPERTY: 1},
    )
    client = FakeDurableClient({"order-1:2": "Running"}, broken=True)  # the backend cannot take it now
    actions = relay(functions, client, None, ctx=make_context(ManualClock(START), sender=sender), message=received)
    assert actions.only == ("complete", {})  # before: TypeError on every delivery, then MaxDeliveryCountExceeded
    [(queue, copy)] = sender.sent
    assert queue == AGENT_REPLIES_QUEUE and copy.application_properties[ROUND_PROPERTY] == 2
    assert copy.message_id.startswith(f"{message_id if not isinstance(message_id, bytes) else message_id.hex()}:")
