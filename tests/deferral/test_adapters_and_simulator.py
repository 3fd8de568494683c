"""The production deferred-message receiver's translation of the SDK, the sender's mapping of an
unauthorised queue, and the payment simulator's capture."""

from __future__ import annotations

from typing import Any

import pytest
from azure.servicebus.exceptions import MessageNotFoundError, ServiceBusAuthorizationError

from adapters.clock import ManualClock
from adapters.remote.interface import RemoteCall, RemoteError
from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.service import SimulatedService
from adapters.servicebus.deferred_sdk import SdkDeferredReceiver
from adapters.servicebus.sender import MessageRejected, OutgoingMessage, QueueNotFound, SdkMessageSender


class SdkReceiverDouble:
    """What ``ServiceBusReceiver.receive_deferred_messages`` does: the whole call fails with
    ``MessageNotFoundError`` when any one sequence number is not deferred on the queue."""

    def __init__(self, deferred: set[int]) -> None:
        self.deferred = deferred
        self.calls: list[list[int]] = []

    def receive_deferred_messages(self, sequence_numbers: list[int], *, timeout: float | None = None) -> list[int]:
        self.calls.append(list(sequence_numbers))
        if any(n not in self.deferred for n in sequence_numbers):
            raise MessageNotFoundError(message="com.microsoft:message-not-found")
        return list(sequence_numbers)


def test_the_sdk_receiver_returns_the_deferred_ones_and_leaves_out_the_missing():
    sdk = SdkReceiverDouble({1, 3})
    receiver = SdkDeferredReceiver(sdk)  # type: ignore[arg-type]
    assert receiver.receive_deferred([1, 2, 3]) == [1, 3]
    assert receiver.receive_deferred([2]) == []
    assert receiver.receive_deferred([1, 3]) == [1, 3]
    assert sdk.calls[-1] == [1, 3]  # one call when all are there
    assert receiver.receive_deferred([]) == []


class SdkPeekDouble:
    """What ``ServiceBusReceiver.peek_messages`` does with its ``sequence_number``: up to the count from that
    number on; without one (0), from after the last message this receiver peeked (from 1 before any)."""

    def __init__(self, sequence_numbers: list[int]) -> None:
        self.sequence_numbers = sequence_numbers
        self.last_peeked: int | None = None

    def peek_messages(
        self, max_message_count: int = 1, *, sequence_number: int = 0, timeout: float | None = None
    ) -> list[int]:
        if not sequence_number:
            sequence_number = self.last_peeked + 1 if self.last_peeked else 1
        found = [n for n in self.sequence_numbers if n >= sequence_number][:max_message_count]
        if found:
            self.last_peeked = found[-1]
        return found


def test_a_peek_from_zero_starts_at_the_oldest_message_even_after_earlier_peeks():
    """The protocol's ``peek(n, 0)`` is from the beginning, as the local broker does; the SDK without a
    sequence number goes on after the receiver's last peek (the peek sweep going round the queue, a search
    for the newest alert, peek again on one receiver)."""
    receiver = SdkDeferredReceiver(SdkPeekDouble([3, 4, 7]))  # type: ignore[arg-type]
    assert receiver.peek(2) == [3, 4]
    assert receiver.peek(2, 7) == [7]
    assert receiver.peek(2) == [3, 4]
    assert receiver.peek(5, 0) == [3, 4, 7]
    assert receiver.peek(1, 5) == [7]
    assert receiver.peek(1, 8) == []


class RefusingSender:
    def send_messages(self, message: Any, timeout: float | None = None) -> None:
        raise ServiceBusAuthorizationError(message="Unauthorized access. 'Send' claim(s) are required")


class ClientDouble:
    def get_queue_sender(self, queue_name: str) -> RefusingSender:
        return RefusingSender()


def test_an_unauthorised_queue_is_reported_like_a_missing_one():
    sender = SdkMessageSender(ClientDouble())  # type: ignore[arg-type]
    with pytest.raises(QueueNotFound):
        sender.send("someone-elses-queue", OutgoingMessage(body="{}", message_id="m"))


class EncodingSender:
    """``ServiceBusSender.send_messages`` up to the wire: the message is encoded by the SDK's own AMQP encoder
    (what fails for an integer property outside 32 bits) and a failure surfaces as the SDK surfaces it, a
    ``ServiceBusError`` "Handler failed" (``_base_handler._handle_exception``)."""

    def __init__(self) -> None:
        self.sent = 0

    def send_messages(self, message: Any, timeout: float | None = None) -> None:
        from azure.servicebus._pyamqp._encode import encode_payload
        from azure.servicebus._transport._pyamqp_transport import PyamqpTransport
        from azure.servicebus.exceptions import ServiceBusError

        try:
            encode_payload(bytearray(), PyamqpTransport.to_outgoing_amqp_message(message.raw_amqp_message))
        except ValueError as exc:
            raise ServiceBusError(message=f"Handler failed: {exc}.", error=exc) from exc
        self.sent += 1


class EncodingClient:
    def __init__(self) -> None:
        self.sender = EncodingSender()

    def get_queue_sender(self, queue_name: str) -> EncodingSender:
        return self.sender


def test_an_integer_property_the_sdk_cannot_encode_is_refused_for_good_not_reported_as_a_blip():
    """azure-servicebus 7.15 encodes an ``int`` application property as 32 bits and fails the send otherwise
    (Azure/azure-sdk-for-python#34717): a ``MessageRejected`` (never sendable), not a ``SendError`` to retry."""
    client = EncodingClient()
    sender = SdkMessageSender(client)  # type: ignore[arg-type]
    sender.send("orders", OutgoingMessage(body="{}", message_id="ok", application_properties={"n": 2**31 - 1}))
    with pytest.raises(MessageRejected, match="32 bits"):
        sender.send("orders", OutgoingMessage(body="{}", message_id="m", application_properties={"n": 2**31}))
    sender.send("orders", OutgoingMessage(body="{}", message_id="t", application_properties={"n": str(2**31)}))
    assert client.sender.sent == 2


def call(action: str, payload: dict[str, Any], key: str = "p1:charge-payment") -> RemoteCall:
    return RemoteCall("payment", action, "p1", key, 1, payload)


def test_capture_takes_the_notified_amount_once_and_is_refunded_like_a_charge():
    payment = SimulatedService("payment", ManualClock(), SimulatorConfig(latency_ms=(0, 0)))
    payload = {"amountCents": 2500, "currency": "EUR", "providerReference": "psp-1"}
    first = payment.call(call("capture", payload))
    assert payment.call(call("capture", payload)) == first  # same idempotency key: no second capture
    assert first["chargeId"].startswith("cap-")
    assert [e.action for e in payment.ledger.effects("p1")] == ["capture"]  # never a charge
    assert payment.ledger.net("p1").charged_cents == 2500
    payment.call(call("refund", {}, key="p1:charge-payment:undo"))
    assert payment.ledger.net("p1").charged_cents == 0


def test_capture_without_the_provider_reference_is_refused_for_good():
    payment = SimulatedService("payment", ManualClock(), SimulatorConfig(latency_ms=(0, 0)))
    with pytest.raises(RemoteError) as refused:
        payment.call(call("capture", {"amountCents": 2500}))
    assert not refused.value.transient
