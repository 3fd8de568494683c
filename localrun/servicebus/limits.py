"""Service Bus limits the broker enforces at send, as the SDK and the service do (Standard tier).

Sources:
- ``azure-servicebus`` (``_common/message.py``): ``ServiceBusMessage.message_id`` raises
  ``ValueError("message_id cannot be longer than 128 characters.")`` when the message is built;
  ``MESSAGE_PROPERTY_MAX_LENGTH = 128`` (``_common/constants.py``).
- Service Bus quotas (https://learn.microsoft.com/azure/service-bus-messaging/service-bus-quotas):
  message size 256 KB on Standard, properties included; each message property at most 32 KB and all
  properties (the whole header: user properties and system properties such as MessageId, label,
  sequence number) at most 64 KB. A message over the size is refused with
  ``MessageSizeExceededError`` ("Message content is larger than the service bus frame size.") by the
  SDK's link; an oversized header with a serialization error.

The broker implements the app's ``MessageSender`` protocol (it stands where ``SdkMessageSender`` and
the SDK are in Azure), so a violation surfaces as what ``SdkMessageSender`` raises for it:
``MessageRejected`` carrying the SDK's message."""

from __future__ import annotations

from adapters.servicebus.sender import MessageRejected, OutgoingMessage, unsendable_property
from localrun.servicebus.errors import DeadLetterTextTooLong

# Peek returns "at most the requested number of messages" and "there's no way to guarantee a minimum size
# for the batch" (https://learn.microsoft.com/azure/service-bus-messaging/message-browsing); the service
# stops a peek at 250 messages however many are asked for (observed: Azure/azure-sdk-for-python#26643,
# after which the SDK's ``max_message_count`` says "subject to service limits", PR #28209;
# paolosalvatori/ServiceBusExplorer#56).
MAX_PEEK_MESSAGES = 250

# The .NET SDK the Functions host settles with refuses a dead-letter reason or description longer than
# 4,096 characters (UTF-16 code units: .NET's ``string.Length``) before anything reaches the service:
# ``Argument.AssertNotTooLong(deadLetterReason, Constants.MaxDeadLetterReasonLength, ...)`` and the same for
# ``deadLetterErrorDescription`` in ``AmqpReceiver.DeadLetterInternalAsync``, ``Constants.MaxDeadLetterReasonLength
# = 4096`` (azure-sdk-for-net ``sdk/servicebus/Azure.Messaging.ServiceBus/src/Amqp/AmqpReceiver.cs``,
# ``src/Constants.cs``). The Python SDK (the deferred receiver's) checks nothing client-side.
MAX_DEAD_LETTER_TEXT_LENGTH = 4096

MAX_MESSAGE_ID_LENGTH = 128
# The SDK's AMQP encoder (azure-servicebus 7.15, the pyamqp transport: ``_pyamqp/_encode.py``,
# ``encode_unknown``) writes a Python ``int`` application property as an AMQP ``int``, 32 bits: any other
# value fails the send with ``ValueError("Value supplied for int invalid: ...")``, which the sender turns
# into a ``ServiceBusError`` ("Handler failed: ...") and shuts its link down (Azure/azure-sdk-for-python#34717);
# ``SdkMessageSender`` refuses it first (``adapters.servicebus.sender.unsendable_property``).
MAX_MESSAGE_BYTES = 256 * 1024
MAX_PROPERTY_BYTES = 32 * 1024
MAX_HEADER_BYTES = 64 * 1024
# What the broker adds to every header (sequence number, enqueued time, lock token, delivery count...).
SYSTEM_HEADER_BYTES = 128


def _size(value: object) -> int:
    return len(value if isinstance(value, bytes) else str(value).encode("utf-8"))


def check(queue: str, message: OutgoingMessage, *, python_sdk: bool = True) -> None:
    """Raises ``MessageRejected`` if Service Bus would refuse ``message``, or (``python_sdk``, the app's
    sender) the Python SDK could not send it."""
    # ``str``: another AMQP client may give a uuid, ulong or binary MessageId (the SDK's setter checks its ``str``)
    message_id = str(message.message_id)
    if len(message_id) > MAX_MESSAGE_ID_LENGTH:
        raise MessageRejected(
            f"message {message_id[:40]!r}... for {queue!r} refused: "
            f"message_id cannot be longer than {MAX_MESSAGE_ID_LENGTH} characters."
        )
    system = {
        "message_id": message.message_id,
        "subject": message.subject or "",
        "correlation_id": message.correlation_id or "",
        "content_type": message.content_type or "",
    }
    properties = {str(k): v for k, v in message.application_properties.items()}
    unsendable = unsendable_property(message.application_properties) if python_sdk else None
    if unsendable is not None:
        raise MessageRejected(
            f"message {message.message_id!r} for {queue!r} refused: application property {unsendable!r} is the "
            f"integer {message.application_properties[unsendable]}, outside the 32 bits the SDK encodes "
            "(Value supplied for int invalid)"
        )
    for name, value in {**system, **properties}.items():
        if _size(name) + _size(value) > MAX_PROPERTY_BYTES:
            raise MessageRejected(
                f"message {message.message_id!r} for {queue!r} refused: property {name!r} is larger than "
                f"{MAX_PROPERTY_BYTES} bytes (SerializationException)"
            )
    header = SYSTEM_HEADER_BYTES + sum(_size(k) + _size(v) for k, v in {**system, **properties}.items())
    if header > MAX_HEADER_BYTES:
        raise MessageRejected(
            f"message {message.message_id!r} for {queue!r} refused: the message header is {header} bytes; "
            f"the limit is {MAX_HEADER_BYTES} (SerializationException)"
        )
    if header + _size(message.body) > MAX_MESSAGE_BYTES:
        raise MessageRejected(
            f"message {message.message_id!r} for {queue!r} refused: "
            "Message content is larger than the service bus frame size."
        )


def _utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def check_dead_letter_text(reason: str | None, description: str | None) -> None:
    """Raises ``DeadLetterTextTooLong`` where the host's .NET SDK would refuse to dead-letter with these."""
    for name, text in (("deadLetterReason", reason), ("deadLetterErrorDescription", description)):
        if text is not None and _utf16_length(text) > MAX_DEAD_LETTER_TEXT_LENGTH:
            raise DeadLetterTextTooLong(
                f"System.ArgumentOutOfRangeException: The argument '{name}' is {_utf16_length(text)} characters "
                f"long; at most {MAX_DEAD_LETTER_TEXT_LENGTH} are allowed. (Parameter '{name}')"
            )
