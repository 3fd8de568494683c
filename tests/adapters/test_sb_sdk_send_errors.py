"""What the app makes of the errors the ``azure-servicebus`` SDK raises on a send, after its own retries.

The runner's broker stands where ``SdkMessageSender`` and the SDK are in Azure (it raises what the adapter
turns the SDK's errors into), so the SDK's retry loop and its AMQP error mapping never run there. Here the
real SDK runs: a ``ServiceBusClient`` and its ``ServiceBusSender.send_messages`` (retry policy,
``_handle_exception``, the pyamqp transport's condition -> exception table), with only the AMQP link below it
replaced by one that answers each send with the error condition the service sends.

Red team: a reply queue its owner disabled (Service Bus answers ``com.microsoft:entity-disabled``, the SDK
raises ``MessagingEntityDisabledError`` after its retries) was a plain ``SendError``: a transient failure,
so no ``ReplyQueueUnavailable`` alert, each final status retried on durable timers for about six hours and then
alerted ``StatusUndelivered`` once per order. A disabled queue refuses this app like a deleted one until its
owner acts: now ``QueueNotFound``, handled as a refusal (one alert per queue, tried again for the refusal
window)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage, QueueNotFound, SdkMessageSender, SendError
from contracts.names import OPERATOR_ALERTS_QUEUE
from notifications.status import Delivery, publish_status

CONNECTION = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=a2V5"
RETRY_TOTAL = 2
T0 = datetime(2026, 3, 1, tzinfo=UTC)

# What the service answers a send with (the outcome's error condition), as the pyamqp transport maps it.
ENTITY_DISABLED = b"com.microsoft:entity-disabled"
SERVER_BUSY = b"com.microsoft:server-busy"
QUOTA_EXCEEDED = b"amqp:resource-limit-exceeded"
LANDED_THEN_TIMED_OUT = "landed, answer lost"
NO_OUTCOME = "no outcome"  # the service never settles the transfer (a stuck gateway)


@dataclass
class Namespace:
    """The queues below the SDK: per queue, the answers to its next sends (an error condition, or
    ``LANDED_THEN_TIMED_OUT``: stored, then the SDK's wait for the outcome timed out), then success."""

    answers: dict[str, list[bytes | str]] = field(default_factory=dict)
    stored: dict[str, list[str]] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    release: threading.Event = field(default_factory=threading.Event)
    # Called by the stand-in for the sender's ``_open`` once it returned (a thread may be scheduled out there).
    after_attach: Callable[[str, Any], None] = lambda queue, sender: None

    def link(self, queue: str) -> Any:
        from azure.servicebus._pyamqp.error import MessageSendFailed

        namespace = self

        class Link:
            def send_message(self, message: Any, timeout: float | None = None) -> None:
                namespace.attempts[queue] = namespace.attempts.get(queue, 0) + 1
                pending = namespace.answers.get(queue, [])
                answer = pending.pop(0) if pending else None
                if answer == NO_OUTCOME:
                    # pyamqp's ``SendClient.send_message``: a timeout of 0 or None waits "until the message is
                    # sent or error happens"; a timeout raises ``TimeoutError`` once it passes.
                    if not namespace.release.wait(timeout or None):
                        raise TimeoutError("send timed out")
                    return
                if answer is None or answer == LANDED_THEN_TIMED_OUT:
                    namespace.stored.setdefault(queue, []).append(message.properties.message_id)
                if answer == LANDED_THEN_TIMED_OUT:
                    raise TimeoutError("the service's outcome did not come in time")
                if isinstance(answer, bytes):
                    raise MessageSendFailed(condition=answer, description=f"{answer.decode()} (test)")

            def close(self) -> None:
                pass

        return Link()

    def client(self) -> Any:
        """A real ``ServiceBusClient`` whose senders' AMQP links are this namespace's."""
        from azure.servicebus import ServiceBusClient

        client = ServiceBusClient.from_connection_string(
            CONNECTION, retry_total=RETRY_TOTAL, retry_backoff_factor=0.001, retry_backoff_max=1
        )
        get_queue_sender = client.get_queue_sender

        def sender_for(queue_name: str, **kwargs: Any) -> Any:
            sender = get_queue_sender(queue_name=queue_name, **kwargs)

            def attach(*_args: Any, **_kwargs: Any) -> None:  # the link the SDK would open
                if sender._handler is None or not sender._running:
                    sender._handler = self.link(queue_name)
                    sender._running = True
                self.after_attach(queue_name, sender)

            sender._handler = None
            sender._open = attach  # type: ignore[method-assign]
            return sender

        client.get_queue_sender = sender_for  # type: ignore[method-assign]
        return client


@pytest.fixture
def namespace() -> Iterator[Namespace]:
    namespace = Namespace()
    yield namespace
    namespace.release.set()  # let a send still waiting end


def test_the_sdk_under_test_retries_and_raises_its_own_exception_types(namespace: Namespace) -> None:
    """The harness is the SDK's code: its retry loop tries ``retry_total`` + 1 times and raises the exception
    class its condition table names."""
    from azure.servicebus import ServiceBusMessage
    from azure.servicebus.exceptions import MessagingEntityDisabledError

    namespace.answers["q"] = [ENTITY_DISABLED] * 10
    with pytest.raises(MessagingEntityDisabledError):
        namespace.client().get_queue_sender("q").send_messages(ServiceBusMessage("{}", message_id="m"))
    assert namespace.attempts["q"] == RETRY_TOTAL + 1


def test_a_disabled_queue_refuses_this_app_like_a_missing_one(namespace: Namespace) -> None:
    namespace.answers["submitter-7"] = [ENTITY_DISABLED] * 10
    sender = SdkMessageSender(namespace.client())
    with pytest.raises(QueueNotFound, match="disabled"):
        sender.send("submitter-7", OutgoingMessage(body="{}", message_id="o1:Completed:1"))
    assert namespace.attempts["submitter-7"] == RETRY_TOTAL + 1  # the SDK's own retries ran first


def test_a_status_for_a_disabled_reply_queue_is_a_refusal_alerted_once_for_the_queue(namespace: Namespace) -> None:
    namespace.answers["submitter-7"] = [ENTITY_DISABLED] * 100
    sender = SdkMessageSender(namespace.client())
    for order in ("o1", "o2"):
        delivery = publish_status(sender, reply_to="submitter-7", order_id=order, status="Completed", attempt=1, at=T0)
        assert delivery is Delivery.REFUSED
    alerts = namespace.stored.get(OPERATOR_ALERTS_QUEUE, [])
    assert len(alerts) == 2 and len(set(alerts)) == 1  # one alert id for the queue: duplicate detection collapses it


@pytest.mark.parametrize("condition", [SERVER_BUSY, QUOTA_EXCEEDED], ids=["server-busy", "quota-exceeded"])
def test_a_busy_or_full_queue_stays_a_transient_send_error(namespace: Namespace, condition: bytes) -> None:
    """Held: ``ServiceBusServerBusyError`` (retried by the SDK) and ``ServiceBusQuotaExceededError`` (not
    retried by the SDK: the queue is full) are ``SendError``s the caller tries again later, never a refusal."""
    namespace.answers["agent-payment"] = [condition] * 10
    sender = SdkMessageSender(namespace.client())
    with pytest.raises(SendError) as raised:
        sender.send("agent-payment", OutgoingMessage(body="{}", message_id="r1"))
    assert not isinstance(raised.value, QueueNotFound)


def test_a_send_that_landed_but_timed_out_is_sent_again_under_the_same_message_id(namespace: Namespace) -> None:
    """Held: the SDK's ``OperationTimeoutError`` after a send the service stored; its retry (and the app's
    own, after a ``SendError``) carries the same MessageId, so duplicate detection keeps one."""
    namespace.answers["submitter-7"] = [LANDED_THEN_TIMED_OUT]
    sender = SdkMessageSender(namespace.client())
    assert (
        publish_status(sender, reply_to="submitter-7", order_id="o1", status="Completed", attempt=1, at=T0)
        is Delivery.SENT
    )
    assert namespace.stored["submitter-7"] == ["o1:Completed:1", "o1:Completed:1"]

    namespace.answers["submitter-7"] = [LANDED_THEN_TIMED_OUT] * (RETRY_TOTAL + 1)
    with pytest.raises(SendError):
        publish_status(sender, reply_to="submitter-7", order_id="o2", status="Completed", attempt=1, at=T0)
    publish_status(sender, reply_to="submitter-7", order_id="o2", status="Completed", attempt=1, at=T0)
    assert set(namespace.stored["submitter-7"][2:]) == {"o2:Completed:1"}


def test_a_send_the_service_never_settles_fails_within_the_send_timeout(
    namespace: Namespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a ``timeout`` ``send_messages`` gives pyamqp none, and pyamqp then waits for the outcome as long as
    the connection lives: an activity or a trigger sending a status held until ``functionTimeout``, an operator's
    cancel past the HTTP front end's 230 s. Now the whole send, the SDK's retries included, is bounded."""
    monkeypatch.setattr("adapters.servicebus.sender.SEND_TIMEOUT_SECONDS", 0.5)
    namespace.answers["submitter-7"] = [NO_OUTCOME] * 10
    sender = SdkMessageSender(namespace.client())
    outcome: list[BaseException | None] = []

    def send() -> None:
        try:
            sender.send("submitter-7", OutgoingMessage(body="{}", message_id="o1:Completed:1"))
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    started = time.monotonic()
    worker = threading.Thread(target=send, daemon=True)
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "the send was still waiting for the service's outcome after 5 s"
    assert time.monotonic() - started < 3
    assert len(outcome) == 1 and isinstance(outcome[0], SendError)
