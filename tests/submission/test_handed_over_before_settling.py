"""The orders trigger hands over what the handler owes (the claimed attempt, statuses whose send
failed) before it settles the message: a settlement that fails because the lock was lost (or a host
that stops right after settling) would otherwise drop them, and the redelivery finds the record and
starts nothing. Called the way the host calls the registered trigger."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage, SendError
from orchestrators.names import DELIVER_STATUS, SCHEDULER
from tests.contexts import context_with
from tests.fakes import FakeReceivedMessage, RecordingActions, RecordingClient, RecordingSender
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos


class LockLost(RecordingActions):
    def complete(self, message: Any) -> None:
        raise RuntimeError("MessageLockLost: the lock supplied is invalid")


class StatusQueueDown(RecordingSender):
    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue == "client-statuses":
            raise SendError("client-statuses: 503")
        super().send(queue, message)


def test_a_settlement_that_fails_still_leaves_the_attempt_started_and_the_owed_status_with_the_courier(
    functions: dict[str, Any], app_context: Any
) -> None:
    context_with(app_context, sender=StatusQueueDown())
    client = RecordingClient()
    fn = functions["submit_order"].func.client_function
    with pytest.raises(RuntimeError, match="MessageLockLost"):
        asyncio.run(fn(message=FakeReceivedMessage.of(order()), message_actions=LockLost(), client=client))
    started = {(name, instance) for name, instance, _ in client.started}
    assert (SCHEDULER, "ord-1:1") in started
    assert any(name == DELIVER_STATUS for name, _ in started)  # the Received its send could not deliver
