"""Service Bus: sending with the SDK (MessageId, properties, scheduled time), fetching deferred
messages by sequence number, and settling triggered messages."""
