"""Red team (s51): a Service Bus agent that did the remote work and cannot send its reply.

Before, a failed reply send (``SendError``, the SDK's own retries spent) abandoned the request at once. Each
redelivery came back within seconds, called the service again (the same idempotency key: no second charge) and
failed its send again, so a reply queue failing for a minute used the five deliveries up: the broker dead-lettered
the request ``MaxDeliveryCountExceeded`` and the dead-letter watch paged an operator (``deadLettersFound``) about a
message nobody can use (past its deadline it is dropped unread, resubmitted or redelivered), while the order
recovered on its own through its deadline and the supervisor's retry. The runner, payment replies failing 70 % of
their sends (``agents.payment.reply_send_failure_rate``), 150 orders, seed 51: 31 payment requests dead-lettered and
32 supervisor retries; now the reply is sent again in the same delivery, after a backoff, while the deadline is
ahead and the send can end within the host's lock renewal, then the request is completed (``AgentReplyUndelivered``):
no dead letter, no retry (``tests/localrun/test_redteam51_reply_send_failures.py``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.remote.simulators.ledger import Ledger
from adapters.servicebus.sender import OutgoingMessage, QueueNotFound, SendError
from contracts.messages import AgentReply
from contracts.names import AGENT_REPLIES_QUEUE
from dependencies import use_context
from settings import LOCK_RENEWAL, SEND_TIMEOUT
from tests.agents.support import START, agent_settings, make_context, make_request
from tests.fakes import FakeReceivedMessage, RecordingActions


class FlakySender:
    """Fails every send to ``agent-replies`` while ``failing`` (``times`` more sends when set, else for good)
    with ``error``; records each try's time and what got through."""

    def __init__(self, clock: ManualClock, error: SendError, times: int | None = None) -> None:
        self._clock = clock
        self._error = error
        self._left = times
        self.tries: list[datetime] = []
        self.sent: list[tuple[str, OutgoingMessage]] = []

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue == AGENT_REPLIES_QUEUE:
            self.tries.append(self._clock.now())
            if self._left is None or self._left > 0:
                if self._left is not None:
                    self._left -= 1
                raise self._error
        self.sent.append((queue, message))

    def heal(self) -> None:
        self._left = 0

    def replies(self) -> list[AgentReply]:
        return [AgentReply.model_validate_json(m.body) for q, m in self.sent if q == AGENT_REPLIES_QUEUE]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


def deliver(functions: Any, body: str) -> RecordingActions:
    actions = RecordingActions()
    functions["agent_payment"].func(message=FakeReceivedMessage.of(body), message_actions=actions)
    return actions


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()  # the provider's effects, across the deliveries of a test


@pytest.fixture
def use(clock: ManualClock, ledger: Ledger) -> Iterator[Any]:
    def with_sender(sender: Any, **settings: str) -> Any:
        ctx = make_context(
            clock, sender=sender, ledger=ledger, settings=agent_settings(**settings) if settings else None
        )
        use_context(ctx)
        return ctx

    yield with_sender
    use_context(None)


def test_a_reply_whose_send_fails_for_a_while_is_sent_again_in_the_same_delivery(functions, clock, ledger, use):
    sender = FlakySender(clock, SendError("send to 'agent-replies' failed: ServerBusy"), times=3)
    ctx = use(sender)
    request = make_request()

    assert deliver(functions, request.to_json()).only == ("complete", {})

    [reply] = sender.replies()
    assert (reply.request_id, reply.outcome) == (request.request_id, "succeeded")
    assert len(sender.tries) == 4
    assert all(t < request.deadline for t in sender.tries)
    assert ctx.remote["payment"].calls == 1  # no redelivery, so no second call to the provider
    assert ledger.net("order-1").charged_cents == 4200


def test_a_reply_that_cannot_be_sent_before_the_deadline_completes_the_request_instead_of_dead_lettering_it(
    functions, clock, ledger, use, caplog
):
    sender = FlakySender(clock, SendError("send to 'agent-replies' failed: ServiceCommunicationProblem"))
    use(sender)
    request = make_request()

    with caplog.at_level(logging.WARNING):
        actions = deliver(functions, request.to_json())

    assert actions.only == ("complete", {})  # abandoned, five deliveries ended in MaxDeliveryCountExceeded
    assert sender.replies() == []
    assert len(sender.tries) > 3
    assert all(t < request.deadline for t in sender.tries)  # no send once the attempt's timer has fired
    assert clock.now() < request.deadline + SEND_TIMEOUT
    [event] = [r for r in caplog.records if getattr(r, "event", None) == "AgentReplyUndelivered"]
    assert (event.orderId, event.requestId, event.instanceId) == ("order-1", request.request_id, request.instance_id)

    # the attempt's retry asks again under the same key and gets what the provider did: one charge
    clock.set(request.deadline + timedelta(seconds=30))
    retry = make_request(attempt=2, deadline=clock.now() + timedelta(seconds=60))
    sender.heal()
    assert deliver(functions, retry.to_json()).only == ("complete", {})
    [reply] = sender.replies()
    assert (reply.request_id, reply.outcome) == (retry.request_id, "succeeded")
    assert len(ledger.effects("order-1", "charge")) == 1


def test_the_sends_end_within_the_lock_renewal_however_far_the_deadline(functions, clock, use):
    """A valid configuration may put the deadline past the lock renewal (a long step timeout, one call): the
    settings keep one request within it (``settings.agent_request_longest``), and so do the reply's sends."""
    sender = FlakySender(clock, SendError("send to 'agent-replies' failed: ServerBusy"))
    use(sender, AGENT_MAX_ATTEMPTS="1", STEP_TIMEOUT_SECONDS="3600")
    request = make_request(deadline=START + timedelta(hours=1))

    assert deliver(functions, request.to_json()).only == ("complete", {})

    assert sender.tries[-1] + SEND_TIMEOUT <= START + LOCK_RENEWAL
    assert len(sender.tries) > 5


def test_a_reply_queue_that_refuses_the_app_still_abandons_for_the_dead_letter_page(functions, clock, use):
    sender = FlakySender(clock, QueueNotFound("cannot send to queue 'agent-replies': Unauthorized"))
    use(sender)

    actions = deliver(functions, make_request().to_json())

    assert actions.only[0] == "abandon"
    assert len(sender.tries) == 1
