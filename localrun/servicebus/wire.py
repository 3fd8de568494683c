"""What the Functions host sends the Python worker for a Service Bus trigger, built from a broker message.

In Azure the Service Bus extension turns the received ``Azure.Messaging.ServiceBus.ServiceBusReceivedMessage``
into ``ParameterBindingData("1.0", "AzureServiceBusReceivedMessage", <content>, "application/octet-stream")``
(``ServiceBusExtensionConfigProvider.ConvertReceivedMessageToBindingData`` in azure-sdk-for-net,
``sdk/servicebus/Microsoft.Azure.WebJobs.Extensions.ServiceBus``) where ``<content>`` is the lock token's
16 bytes (``Guid.ToByteArray()``: little-endian fields) followed by ``GetRawAmqpMessage().ToBytes()``: the
AMQP 1.0 encoding of the message as received, sections in spec order (header, delivery annotations with
``x-opt-lock-token``, message annotations ``x-opt-*``, properties, application properties, one data
section). The host sends it as ``TypedData.model_binding_data``.

The Python extension (``azurefunctions-extensions-bindings-servicebus`` 1.0.0b2, ``utils.get_decoded_message``)
takes the first 16 bytes as the lock token, then decodes with ``uamqp`` only what follows the first
``x-opt-lock-token`` in the content, so everything before it in the AMQP bytes is lost: **the header
section, hence ``delivery_count`` and ``time_to_live`` (and ``expires_at_utc``, computed from it), are
None on every message a Python SDK-type trigger receives in Azure.** This module encodes exactly what the
host sends (header included), so the real converter applied to it gives what Azure gives.

The encoder is a small, self-contained AMQP 1.0 type encoder (no private SDK modules); the decoding side
in tests is the real one (the extension and ``uamqp``).
"""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from adapters.servicebus.sender import PropertyValue
from localrun.servicebus.messages import BrokerMessage, MessageState

BINDING_VERSION = "1.0"
BINDING_SOURCE = "AzureServiceBusReceivedMessage"
BINDING_CONTENT_TYPE = "application/octet-stream"

LOCK_TOKEN_ANNOTATION = "x-opt-lock-token"
ENQUEUED_TIME_ANNOTATION = "x-opt-enqueued-time"
SEQUENCE_NUMBER_ANNOTATION = "x-opt-sequence-number"
LOCKED_UNTIL_ANNOTATION = "x-opt-locked-until"
SCHEDULED_ENQUEUE_TIME_ANNOTATION = "x-opt-scheduled-enqueue-time"
MESSAGE_STATE_ANNOTATION = "x-opt-message-state"
DEAD_LETTER_REASON_PROPERTY = "DeadLetterReason"
DEAD_LETTER_DESCRIPTION_PROPERTY = "DeadLetterErrorDescription"

# .NET's DateTimeOffset.MaxValue as Json.NET writes it: ExpiresAt of a message without a TTL.
_NET_MAX_DATETIMEOFFSET = "9999-12-31T23:59:59.9999999+00:00"
_UINT_MAX = 2**32 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ModelBindingData:
    """The fields of the host's ``ModelBindingData`` protobuf message (same names)."""

    version: str
    source: str
    content_type: str
    content: bytes


# ----- AMQP 1.0 primitive encoding (OASIS AMQP 1.0, part 1: types) --------------------------------


class _Symbol(str):
    """A string to encode as an AMQP symbol (keys of annotation maps, content-type)."""


@dataclass(frozen=True)
class _Timestamp:
    millis: int


@dataclass(frozen=True)
class _UInt:
    value: int


@dataclass(frozen=True)
class _Long:
    value: int


def _timestamp(moment: datetime) -> _Timestamp:
    """Milliseconds since the Unix epoch (AMQP timestamps have millisecond precision)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return _Timestamp((moment - _EPOCH) // timedelta(milliseconds=1))


def _encode(value: Any) -> bytes:
    if value is None:
        return b"\x40"
    if isinstance(value, bool):
        return b"\x41" if value else b"\x42"
    if isinstance(value, _UInt):
        if value.value == 0:
            return b"\x43"
        if value.value <= 0xFF:
            return b"\x52" + struct.pack(">B", value.value)
        return b"\x70" + struct.pack(">I", value.value)
    if isinstance(value, _Long):
        if -128 <= value.value <= 127:
            return b"\x55" + struct.pack(">b", value.value)
        return b"\x81" + struct.pack(">q", value.value)
    if isinstance(value, int):
        if -(2**31) <= value < 2**31:
            if -128 <= value <= 127:
                return b"\x54" + struct.pack(">b", value)
            return b"\x71" + struct.pack(">i", value)
        return b"\x81" + struct.pack(">q", value)
    if isinstance(value, float):
        return b"\x82" + struct.pack(">d", value)
    if isinstance(value, _Timestamp):
        return b"\x83" + struct.pack(">q", value.millis)
    if isinstance(value, uuid.UUID):
        return b"\x98" + value.bytes
    if isinstance(value, bytes):
        return _variable(value, b"\xa0", b"\xb0")
    if isinstance(value, _Symbol):
        return _variable(value.encode("ascii"), b"\xa3", b"\xb3")
    if isinstance(value, str):
        return _variable(value.encode("utf-8"), b"\xa1", b"\xb1")
    if isinstance(value, list):
        return _compound([_encode(v) for v in value], b"\x45", b"\xc0", b"\xd0")
    if isinstance(value, dict):
        items = [_encode(part) for pair in value.items() for part in pair]
        return _compound(items, None, b"\xc1", b"\xd1")
    raise TypeError(f"cannot encode {type(value).__name__} as AMQP")


def _variable(data: bytes, short: bytes, long: bytes) -> bytes:
    if len(data) <= 0xFF:
        return short + struct.pack(">B", len(data)) + data
    return long + struct.pack(">I", len(data)) + data


def _compound(items: list[bytes], empty: bytes | None, short: bytes, long: bytes) -> bytes:
    if not items and empty is not None:
        return empty
    payload = b"".join(items)
    if len(payload) + 1 <= 0xFF and len(items) <= 0xFF:
        return short + struct.pack(">BB", len(payload) + 1, len(items)) + payload
    return long + struct.pack(">II", len(payload) + 4, len(items)) + payload


def _section(code: int, value: Any) -> bytes:
    return b"\x00\x53" + struct.pack(">B", code) + _encode(value)


def _trim(fields: list[Any]) -> list[Any]:
    """Trailing null fields of a composite may be omitted (the service's encoder does)."""
    while fields and fields[-1] is None:
        fields.pop()
    return fields


def _property_value(value: PropertyValue | str) -> Any:
    if isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"unsupported application property value {value!r}")


# ----- the message ---------------------------------------------------------------------------------


def encode_amqp_message(message: BrokerMessage, *, header_delivery_count: int | None = None) -> bytes:
    """The AMQP 1.0 bytes of ``message`` as the .NET SDK's ``GetRawAmqpMessage().ToBytes()`` gives them
    on the host. ``header_delivery_count`` defaults to the broker's count (the .NET SDK's, 1 on the
    first delivery); pass ``delivery_count - 1`` for what the service itself sends on the wire."""
    count = message.delivery_count if header_delivery_count is None else header_delivery_count
    ttl_ms = None
    if message.time_to_live is not None:
        ttl_ms = message.time_to_live // timedelta(milliseconds=1)
        if ttl_ms > _UINT_MAX:
            ttl_ms = None  # beyond the header's range: the service sends none (TimeSpan.MaxValue)
    header = _trim([None, None, _UInt(ttl_ms) if ttl_ms is not None else None, None, _UInt(max(count, 0))])
    out = [_section(0x70, header)]

    if message.lock_token:
        out.append(_section(0x71, {_Symbol(LOCK_TOKEN_ANNOTATION): uuid.UUID(message.lock_token)}))

    annotations: dict[Any, Any] = {
        _Symbol(ENQUEUED_TIME_ANNOTATION): _timestamp(message.enqueued_time_utc),
        _Symbol(SEQUENCE_NUMBER_ANNOTATION): _Long(message.sequence_number),
    }
    if message.locked_until_utc is not None:
        annotations[_Symbol(LOCKED_UNTIL_ANNOTATION)] = _timestamp(message.locked_until_utc)
    if message.scheduled_enqueue_time_utc is not None:
        annotations[_Symbol(SCHEDULED_ENQUEUE_TIME_ANNOTATION)] = _timestamp(message.scheduled_enqueue_time_utc)
    if message.state != MessageState.ACTIVE:
        annotations[_Symbol(MESSAGE_STATE_ANNOTATION)] = int(message.state)
    out.append(_section(0x72, annotations))

    expiry = _timestamp(message.expires_at_utc) if message.expires_at_utc is not None and ttl_ms else None
    properties = _trim(
        [
            message.message_id,
            None,  # user-id
            None,  # to
            message.subject,
            None,  # reply-to
            message.correlation_id,
            _Symbol(message.content_type) if message.content_type is not None else None,
            None,  # content-encoding
            expiry,
            _timestamp(message.enqueued_time_utc),  # creation-time
        ]
    )
    out.append(_section(0x73, properties))

    app: dict[str, Any] = {k: _property_value(v) for k, v in message.application_properties.items()}
    if message.dead_letter_reason is not None:
        app[DEAD_LETTER_REASON_PROPERTY] = message.dead_letter_reason
    if message.dead_letter_error_description is not None:
        app[DEAD_LETTER_DESCRIPTION_PROPERTY] = message.dead_letter_error_description
    if app:
        out.append(_section(0x74, app))

    out.append(_section(0x75, message.body))
    return b"".join(out)


def encode_model_binding_data(message: BrokerMessage) -> ModelBindingData:
    """What the host puts in ``TypedData.model_binding_data`` for a message delivered to a trigger."""
    if not message.lock_token:
        raise ValueError("only a received (locked) message can be bound to a trigger")
    token = uuid.UUID(message.lock_token)
    return ModelBindingData(
        version=BINDING_VERSION,
        source=BINDING_SOURCE,
        content_type=BINDING_CONTENT_TYPE,
        content=token.bytes_le + encode_amqp_message(message),
    )


def to_typed_data(message: BrokerMessage, protos: Any) -> Any:
    """``protos.TypedData(model_binding_data=...)`` (``protos``: the host's protobuf module, e.g.
    ``functions_host_protos``)."""
    mbd = encode_model_binding_data(message)
    typed = protos.TypedData()
    # Set field by field: the module need not export ModelBindingData (functions_host_protos does not).
    typed.model_binding_data.version = mbd.version
    typed.model_binding_data.source = mbd.source
    typed.model_binding_data.content_type = mbd.content_type
    typed.model_binding_data.content = mbd.content
    return typed


# ----- trigger metadata ----------------------------------------------------------------------------


def trigger_metadata(message: BrokerMessage) -> dict[str, Any]:
    """The binding data the Service Bus extension adds for a single-dispatch trigger
    (``ServiceBusTriggerBindingStrategy.AddBindingData``), as Python values, null values left out (the
    host skips them). The host's objects (``MessageActions``, ``SessionActions``, ``ReceiveActions``,
    ``Client``, ``MessageReceiver``, ``MessageSession``) are not included: they are .NET handles the
    Python worker cannot use. ``ExpiresAt`` is None for a message without a TTL (.NET sends
    ``DateTimeOffset.MaxValue``; see ``trigger_metadata_typed``)."""
    props = dict(message.application_properties)
    expires = message.expires_at_utc
    values: dict[str, Any] = {
        "DeliveryCount": message.delivery_count,
        "LockToken": message.lock_token,
        "ExpiresAtUtc": expires,
        "ExpiresAt": expires,
        "EnqueuedTimeUtc": message.enqueued_time_utc,
        "EnqueuedTime": message.enqueued_time_utc,
        "MessageId": _net_message_id(message.message_id),
        "ContentType": message.content_type,
        "SequenceNumber": message.sequence_number,
        "Subject": message.subject,
        "Label": message.subject,
        "CorrelationId": message.correlation_id,
        "ApplicationProperties": props,
        "UserProperties": props,
    }
    return {k: v for k, v in values.items() if v is not None}


def _net_message_id(message_id: object) -> str | None:
    """The host's ``MessageId`` binding data: the .NET SDK's ``ServiceBusReceivedMessage.MessageId``, always text
    (an AMQP uuid or ulong id as its ``ToString()``; binary as its hex digits here). Another AMQP client may send
    such an id (``send_from_client``); the SDK-type trigger itself gets it as the Python SDK decodes it
    (``encode_amqp_message``)."""
    if message_id is None or isinstance(message_id, str):
        return message_id
    return message_id.hex() if isinstance(message_id, bytes) else str(message_id)


def _net_datetime(moment: datetime, *, offset: bool) -> str:
    """Json.NET's ISO form: 7 fractional digits trimmed of trailing zeros; ``DateTimeOffset`` with
    ``+00:00``; ``DateTimeOffset.DateTime`` (Kind Unspecified) without a zone."""
    moment = moment.astimezone(UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    fraction = f"{moment.microsecond:06d}0".rstrip("0")
    if fraction:
        text += "." + fraction
    return text + ("+00:00" if offset else "")


def trigger_metadata_typed(message: BrokerMessage, protos: Any) -> dict[str, Any]:
    """``trigger_metadata`` as the host puts it in ``InvocationRequest.trigger_metadata``: strings as
    ``TypedData.string``, everything else Json.NET-serialised into ``TypedData.json``
    (``RpcMessageConversionExtensions.ToRpc``/``ToRpcDefault`` in azure-functions-host)."""
    out: dict[str, Any] = {}
    for key, value in trigger_metadata(message).items():
        if isinstance(value, str):
            out[key] = protos.TypedData(string=value)
        elif isinstance(value, datetime):
            out[key] = protos.TypedData(
                json=json.dumps(_net_datetime(value, offset=key in ("ExpiresAt", "EnqueuedTime")))
            )
        elif isinstance(value, Mapping):
            out[key] = protos.TypedData(json=json.dumps(dict(value), separators=(",", ":")))
        else:
            out[key] = protos.TypedData(json=json.dumps(value))
    if message.expires_at_utc is None:
        out["ExpiresAt"] = protos.TypedData(json=json.dumps(_NET_MAX_DATETIMEOFFSET))
        out["ExpiresAtUtc"] = protos.TypedData(json=json.dumps(_NET_MAX_DATETIMEOFFSET[:-6]))
    return out


def decode_as_trigger(message: BrokerMessage) -> Any:
    """The ``azure.servicebus.ServiceBusReceivedMessage`` a Python SDK-type trigger receives for
    ``message``: the host's encoding decoded by the real extension converter."""
    from azurefunctions.extensions.base import Datum  # type: ignore[import-untyped]
    from azurefunctions.extensions.bindings.servicebus import ServiceBusConverter, ServiceBusReceivedMessage

    return ServiceBusConverter.decode(
        Datum(value=encode_model_binding_data(message), type="model_binding_data"),
        trigger_metadata=None,
        pytype=ServiceBusReceivedMessage,
    )
