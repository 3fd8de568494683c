"""Trigger-side settlement: what the Functions host gives an SDK-type Service Bus trigger as
``azurefunctions.extensions.bindings.servicebus.ServiceBusMessageActions`` (same method names and
parameters), for messages the broker delivered through ``InProcessBroker.receive``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from localrun.servicebus.limits import check_dead_letter_text

if TYPE_CHECKING:
    from localrun.servicebus.broker import InProcessBroker

# The lock owner of every message delivered to a trigger: the Functions host's receiver.
HOST_OWNER = "host"


class HostMessageActions:
    """Each method raises ``MessageLockLost`` if the message's lock expired, it was already settled,
    the host restarted since it was delivered, or it was not delivered to the trigger (a deferred
    message fetched on a receiver is settled on that receiver)."""

    def __init__(self, broker: InProcessBroker) -> None:
        self._broker = broker

    def complete(self, message: Any) -> None:
        self._broker._settle(HOST_OWNER, message, "complete")

    def abandon(self, message: Any) -> None:
        """Release the lock now: the message is available again (or dead-lettered if this was its
        last allowed delivery, or expired if its TTL has passed)."""
        self._broker._settle(HOST_OWNER, message, "abandon")

    def deadletter(
        self, message: Any, deadletter_reason: str | None = None, deadletter_error_description: str | None = None
    ) -> None:
        """``DeadLetterTextTooLong`` (nothing settled) for a reason or description the host's SDK refuses."""
        check_dead_letter_text(deadletter_reason, deadletter_error_description)
        self._broker._settle(HOST_OWNER, message, "deadletter", deadletter_reason, deadletter_error_description)

    def defer(self, message: Any) -> None:
        """The message stays in the queue but is never delivered to a trigger again; fetch it by its
        sequence number through ``InProcessBroker.deferred_store``. Deferred on its last allowed delivery,
        it is dead-lettered ``MaxDeliveryCountExceeded`` instead (``InProcessBroker._defer``)."""
        self._broker._settle(HOST_OWNER, message, "defer")

    def renew_message_lock(self, message: Any) -> None:
        self._broker._renew(HOST_OWNER, message)
