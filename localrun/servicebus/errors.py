"""What the broker raises besides the sender's ``SendError``/``QueueNotFound``."""

from __future__ import annotations


class MessageLockLost(Exception):
    """Settling or renewing a message whose lock this caller no longer holds: the lock expired, the
    message was already settled, the host restarted since it was received, or it was received on a
    different receiver. The counterpart of ``azure.servicebus.exceptions.MessageLockLostError`` (the
    Functions extension's ``ServiceBusMessageActions`` wraps that in its ``SettlementError``)."""


class ReceiverClosed(Exception):
    """A deferred-message receiver was used after its ``with`` block ended or after a host restart."""


class DeadLetterTextTooLong(ValueError):
    """A dead-letter reason or description the Functions host's .NET SDK refuses (over 4,096 characters):
    the message is not settled and keeps its lock (``localrun.servicebus.limits.check_dead_letter_text``)."""
