"""The host's wire form of a Service Bus trigger message, decoded by the real runtime and extension.

Each broker message is encoded as the Functions host encodes it (``model_binding_data``), decoded the
way the Python worker does (``azure_functions_runtime.bindings.meta.from_incoming_proto`` with a real
``TypedData`` proto, deferred-binding path, i.e. the extension's ``ServiceBusConverter``), and every
member of the resulting ``azure.servicebus.ServiceBusReceivedMessage`` is compared with the broker's."""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import functions_host_protos as protos  # type: ignore[import-untyped]
import pytest
from azure.servicebus import ServiceBusMessageState
from azure.servicebus import ServiceBusReceivedMessage as SdkReceivedMessage
from azure_functions_runtime.bindings import meta  # type: ignore[import-untyped]
from azurefunctions.extensions.base import Datum  # type: ignore[import-untyped]
from azurefunctions.extensions.bindings.servicebus import ServiceBusConverter, ServiceBusReceivedMessage

from adapters.clock import ManualClock
from adapters.servicebus.sender import OutgoingMessage
from adapters.servicebus.settlement import body_bytes
from contracts.parsing import InvalidMessage
from localrun.servicebus import BrokerMessage, InProcessBroker, MessageState, QueuePolicy
from localrun.servicebus.wire import (
    BINDING_CONTENT_TYPE,
    BINDING_SOURCE,
    BINDING_VERSION,
    encode_amqp_message,
    encode_model_binding_data,
    to_typed_data,
    trigger_metadata,
    trigger_metadata_typed,
)

# Microseconds on purpose: AMQP timestamps carry milliseconds, the rest is lost as in Azure.
START = datetime(2026, 3, 1, 9, 30, 0, 123456, tzinfo=UTC)
LOCK = timedelta(seconds=30)
TTL = timedelta(days=14)
PROPS: dict[str, Any] = {
    "text": "plain",
    "unicode": "prüfung ✓",
    "empty": "",
    "small": 7,
    "negative": -40000,
    "large": 2**40,
    "yes": True,
    "no": False,
    "ratio": 0.25,
}


def _ms(moment: datetime | None) -> datetime | None:
    return None if moment is None else moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def _broker(max_delivery_count: int = 10) -> tuple[InProcessBroker, ManualClock]:
    clock = ManualClock(START)
    broker = InProcessBroker(clock)
    broker.declare_queue("q", QueuePolicy(lock_duration=LOCK, max_delivery_count=max_delivery_count, default_ttl=TTL))
    return broker, clock


def _received(body: str, **fields: Any) -> BrokerMessage:
    broker, _ = _broker()
    # from any client: a 64-bit integer property (PROPS["large"]) is one the Python SDK could not send
    broker.send_from_client("q", OutgoingMessage(body=body, message_id=fields.pop("message_id", "m-1"), **fields))
    got = broker.receive("q")
    assert got is not None
    return got


def _redelivered_third_time() -> BrokerMessage:
    broker, clock = _broker()
    broker.send("q", OutgoingMessage(body='{"n": 3}', message_id="again", subject="Retry"))
    first = broker.receive("q")
    assert first is not None
    broker.actions.abandon(first)
    clock.advance(timedelta(seconds=1))
    assert broker.receive("q") is not None  # second delivery: let its lock expire
    clock.advance(LOCK + timedelta(milliseconds=1))
    third = broker.receive("q")
    assert third is not None and third.delivery_count == 3
    return third


def _deferred_fetched() -> BrokerMessage:
    broker, clock = _broker()
    broker.send("q", OutgoingMessage(body='{"late": true}', message_id="later", correlation_id="ord-9"))
    got = broker.receive("q")
    assert got is not None
    broker.actions.defer(got)
    clock.advance(timedelta(minutes=5))
    with broker.deferred_store.open("q") as receiver:
        (fetched,) = receiver.receive_deferred([got.sequence_number])
    assert fetched.state is MessageState.DEFERRED
    return fetched


def _scheduled() -> BrokerMessage:
    broker, clock = _broker()
    at = START + timedelta(minutes=10, milliseconds=250)
    broker.send("q", OutgoingMessage(body="{}", message_id="sched", scheduled_enqueue_time=at))
    clock.advance(timedelta(minutes=11))
    got = broker.receive("q")
    assert got is not None and got.scheduled_enqueue_time_utc == at
    return got


def _dead_letter_fields() -> BrokerMessage:
    """A message carrying the dead-letter properties (as one read from a dead-letter queue would)."""
    return BrokerMessage(
        body=b"{}",
        message_id="dl",
        sequence_number=77,
        enqueued_time_utc=START,
        delivery_count=5,
        state=MessageState.ACTIVE,
        lock_token=str(uuid.UUID(int=99)),
        locked_until_utc=START + LOCK,
        dead_letter_reason="InvalidFields",
        dead_letter_error_description="field 'orderId' is missing",
    )


CASES = {
    "unicode body": lambda: _received('{"name": "Zoë ✓ 注文"}', subject="OrderSubmitted"),
    "empty body": lambda: _received(""),
    "near 256 KB body": lambda: _received("x" * (256 * 1024 - 2048)),
    "every property type": lambda: _received(
        "{}", application_properties=PROPS, correlation_id="corr-1", content_type="text/plain"
    ),
    "redelivered, delivery count 3": _redelivered_third_time,
    "deferred, fetched by sequence number": _deferred_fetched,
    "scheduled": _scheduled,
    "dead-letter reason and description": _dead_letter_fields,
}


def _decode(message: BrokerMessage) -> Any:
    """As the worker does it: TypedData in an InvocationRequest's ParameterBinding, through the runtime."""
    meta.load_binding_registry()
    binding = protos.ParameterBinding(name="message", data=to_typed_data(message, protos))
    return meta.from_incoming_proto(
        "serviceBusTrigger",
        binding,
        pytype=ServiceBusReceivedMessage,
        trigger_metadata=trigger_metadata_typed(message, protos),
        function_name="submit_order",
        is_deferred_binding=True,
    )


@pytest.mark.parametrize("name", list(CASES))
def test_the_real_converter_yields_the_brokers_message(name: str) -> None:
    original = CASES[name]()
    got = _decode(original)

    assert type(got) is SdkReceivedMessage
    assert not isinstance(got.body, bytes | str)  # a generator of data sections
    assert b"".join(got.body) == original.body
    assert body_bytes(_decode(original)) == original.body
    assert got.message_id == original.message_id
    assert got.correlation_id == original.correlation_id
    assert got.subject == original.subject
    assert got.content_type == original.content_type
    assert got.sequence_number == original.sequence_number
    assert got.enqueued_time_utc == _ms(original.enqueued_time_utc)
    assert got.locked_until_utc == _ms(original.locked_until_utc)
    assert got.scheduled_enqueue_time_utc == _ms(original.scheduled_enqueue_time_utc)
    assert got.state == ServiceBusMessageState(int(original.state))
    assert str(got.lock_token) == original.lock_token
    assert isinstance(got.lock_token, uuid.UUID)
    assert got.dead_letter_reason == original.dead_letter_reason
    assert got.dead_letter_error_description == original.dead_letter_error_description
    expected_props = {
        k.encode(): (v.encode() if isinstance(v, str) else v) for k, v in original.application_properties.items()
    }
    if original.dead_letter_reason is not None:
        expected_props[b"DeadLetterReason"] = original.dead_letter_reason.encode()
    if original.dead_letter_error_description is not None:
        expected_props[b"DeadLetterErrorDescription"] = original.dead_letter_error_description.encode()
    assert got.application_properties == (expected_props or None)
    decoded: dict[Any, Any] = got.application_properties or {}
    for key, value in decoded.items():
        assert type(value) is type(expected_props[key])  # bool stays bool, int int, float float
    # The extension decodes only what follows the lock-token annotation: the AMQP header (delivery
    # count, TTL) is lost, in Azure too.
    assert got.delivery_count is None
    assert got.time_to_live is None
    assert got.expires_at_utc is None


@pytest.mark.parametrize("name", list(CASES))
def test_the_host_bytes_carry_the_header_the_extension_drops(name: str) -> None:
    """The AMQP bytes are the host's, header included (decoded here by the SDK's own decoder)."""
    original = CASES[name]()
    full = SdkReceivedMessage.from_bytes(encode_amqp_message(original))
    assert full.delivery_count == original.delivery_count
    assert full.time_to_live == original.time_to_live
    assert full.expires_at_utc == _ms(original.expires_at_utc)
    assert b"".join(full.body) == original.body
    assert str(full.lock_token) == original.lock_token


def test_model_binding_data_is_what_the_host_sends() -> None:
    message = _received('{"a": 1}')
    mbd = encode_model_binding_data(message)
    assert (mbd.version, mbd.source, mbd.content_type) == (BINDING_VERSION, BINDING_SOURCE, BINDING_CONTENT_TYPE)
    assert (BINDING_VERSION, BINDING_SOURCE, BINDING_CONTENT_TYPE) == (
        "1.0",
        "AzureServiceBusReceivedMessage",
        "application/octet-stream",
    )
    assert message.lock_token is not None
    assert mbd.content[:16] == uuid.UUID(message.lock_token).bytes_le  # Guid.ToByteArray()
    assert mbd.content[16:] == encode_amqp_message(message)
    typed = to_typed_data(message, protos)
    assert typed.WhichOneof("data") == "model_binding_data"
    assert typed.model_binding_data.content == mbd.content


def test_a_peeked_message_cannot_be_bound_to_a_trigger() -> None:
    broker, _ = _broker()
    broker.send("q", OutgoingMessage(body="{}", message_id="p"))
    (peeked,) = broker.peek("q", 1)
    with pytest.raises(ValueError, match="lock"):
        encode_model_binding_data(peeked)


def test_trigger_metadata_has_the_extensions_binding_data() -> None:
    message = _received("{}", application_properties={"kind": "x", "n": 2}, correlation_id="c", subject="S")
    values = trigger_metadata(message)
    assert values["MessageId"] == "m-1"
    assert values["DeliveryCount"] == 1
    assert values["SequenceNumber"] == message.sequence_number
    assert values["LockToken"] == message.lock_token
    assert values["EnqueuedTimeUtc"] == message.enqueued_time_utc
    assert values["ExpiresAtUtc"] == message.expires_at_utc
    assert values["Subject"] == values["Label"] == "S"
    assert values["ApplicationProperties"] == values["UserProperties"] == {"kind": "x", "n": 2}
    assert "ReplyTo" not in values  # nulls are not sent
    typed = trigger_metadata_typed(message, protos)
    assert typed["MessageId"].string == "m-1"
    assert json.loads(typed["DeliveryCount"].json) == 1
    assert json.loads(typed["EnqueuedTime"].json) == "2026-03-01T09:30:00.123456+00:00"
    assert json.loads(typed["EnqueuedTimeUtc"].json) == "2026-03-01T09:30:00.123456"
    assert json.loads(typed["ApplicationProperties"].json) == {"kind": "x", "n": 2}


def test_trigger_metadata_without_ttl_sends_dotnet_max_expiry() -> None:
    message = BrokerMessage(
        body=b"{}",
        message_id="plain",
        sequence_number=1,
        enqueued_time_utc=START,
        delivery_count=1,
        state=MessageState.ACTIVE,
        lock_token=str(uuid.UUID(int=1)),
    )
    assert "ExpiresAt" not in trigger_metadata(message)
    typed = trigger_metadata_typed(message, protos)
    assert json.loads(typed["ExpiresAt"].json) == "9999-12-31T23:59:59.9999999+00:00"
    assert json.loads(typed["ExpiresAtUtc"].json) == "9999-12-31T23:59:59.9999999"


@pytest.mark.parametrize(
    ("tail", "kind"),
    [
        (b"\x00\x53\x77\x54\x05", "value"),  # amqp-value 5
        (b"\x00\x53\x77\x40", "value"),  # amqp-value null
    ],
)
def test_a_non_data_body_is_dead_lettered_not_crashed_on(tail: bytes, kind: str) -> None:
    """Another AMQP client can send a value body: the app must dead-letter it with a reason (it used
    to raise TypeError iterating an int, failing every delivery until MaxDeliveryCountExceeded)."""
    mbd = encode_model_binding_data(_received(""))
    data_section = b"\x00\x53\x75\xa0\x00"
    assert mbd.content.endswith(data_section)
    odd = dataclasses.replace(mbd, content=mbd.content[: -len(data_section)] + tail)
    got = ServiceBusConverter.decode(
        Datum(value=odd, type="model_binding_data"), trigger_metadata=None, pytype=ServiceBusReceivedMessage
    )
    with pytest.raises(InvalidMessage) as caught:
        body_bytes(got)
    assert caught.value.reason == "NotJson"
    assert kind in caught.value.description


def test_a_body_in_several_data_sections_is_read_whole() -> None:
    """AMQP lets a sender split a body over several data sections (another AMQP client can; the SDKs send one).
    Through the real converter the SDK message's ``body`` yields each section: ``body_bytes`` joins them, so such
    an order is read as its sender wrote it, not as its first section (``NotJson``) or dead-lettered."""
    mbd = encode_model_binding_data(_received(""))
    data_section = b"\x00\x53\x75\xa0\x00"
    order = json.dumps({"type": "OrderSubmitted", "orderId": "ord-1"}).encode()
    sections = b"".join(b"\x00\x53\x75\xa0" + bytes([len(part)]) + part for part in (order[:10], order[10:]))
    split = dataclasses.replace(mbd, content=mbd.content[: -len(data_section)] + sections)
    got = ServiceBusConverter.decode(
        Datum(value=split, type="model_binding_data"), trigger_metadata=None, pytype=ServiceBusReceivedMessage
    )
    assert len(list(got.body)) == 2
    assert body_bytes(got) == order
