"""A queue's policy: the entity properties the broker enforces (Bicep declares the same values)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from contracts.names import (
    QUEUE_DUPLICATE_DETECTION_MINUTES,
    QUEUE_LOCK_DURATION_SECONDS,
    QUEUE_MAX_DELIVERY_COUNT,
)

# What Service Bus accepts for a queue's properties, so the broker never runs a queue Azure would refuse
# to create: "The maximum value for LockDuration is 5 minutes" (ServiceBusQueueData.LockDuration,
# https://learn.microsoft.com/dotnet/api/azure.resourcemanager.servicebus.servicebusqueuedata.lockduration);
# the duplicate detection history window "can be set from twenty seconds to seven days" (the service's own
# refusal: "The value supplied must be between 00:00:20 and 7.00:00:00", MicrosoftDocs/azure-docs#3374;
# https://learn.microsoft.com/azure/service-bus-messaging/duplicate-detection).
MAX_LOCK_DURATION = timedelta(minutes=5)
MIN_DUPLICATE_DETECTION_WINDOW = timedelta(seconds=20)
MAX_DUPLICATE_DETECTION_WINDOW = timedelta(days=7)


@dataclass(frozen=True)
class QueuePolicy:
    """What a queue is declared with.

    ``duplicate_detection_window`` None turns duplicate detection off. ``default_ttl`` None means
    messages never expire (the service's default is ``TimeSpan.MaxValue``)."""

    lock_duration: timedelta = field(default_factory=lambda: timedelta(seconds=QUEUE_LOCK_DURATION_SECONDS))
    max_delivery_count: int = QUEUE_MAX_DELIVERY_COUNT
    duplicate_detection_window: timedelta | None = field(
        default_factory=lambda: timedelta(minutes=QUEUE_DUPLICATE_DETECTION_MINUTES)
    )
    default_ttl: timedelta | None = None
    dead_letter_on_expiration: bool = True

    def __post_init__(self) -> None:
        if not timedelta(0) < self.lock_duration <= MAX_LOCK_DURATION:
            raise ValueError(f"lock_duration must be positive and at most {MAX_LOCK_DURATION} (Service Bus's maximum)")
        window = self.duplicate_detection_window
        if window is not None and not MIN_DUPLICATE_DETECTION_WINDOW <= window <= MAX_DUPLICATE_DETECTION_WINDOW:
            raise ValueError(
                f"duplicate_detection_window must be from {MIN_DUPLICATE_DETECTION_WINDOW} to "
                f"{MAX_DUPLICATE_DETECTION_WINDOW} (Service Bus's range), or None"
            )
        if self.max_delivery_count < 1:
            raise ValueError("max_delivery_count must be at least 1")
        if self.default_ttl is not None and self.default_ttl <= timedelta(0):
            raise ValueError("default_ttl must be positive (or None for no expiry)")
